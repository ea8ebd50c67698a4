"""kiln usage's pure parts: sacct's output read field by field (a job name with '|' cannot shift a field),
GPU-hours clipped to the window, cost by node type, useful and idle GPU-hours from kiln's AdminComment."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from kiln.inventory import load_cluster, validate
from kiln.usage import sacct
from kiln.usage.report import report
from tests.conftest import REPO
from tests.slurm_framing import SEP, frame

SMALL = REPO / "tests" / "inventories" / "small"


def _ts(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()


# JobIDRaw|User|Account|QOS|Partition|State|Submit|Eligible|Start|End|ElapsedRaw|AllocTRES|NodeList|Reservation|AdminComment|Comment|JobName
SACCT = """101|ann|alpha|normal|gpu|COMPLETED|2026-11-02T09:00:00|2026-11-02T09:00:00|2026-11-02T10:00:00|2026-11-02T12:00:00|7200|billing=1000,cpu=8,gres/gpu:a100=4,gres/gpu=4,mem=64G,node=1|gpu01||kiln:gpu_util=75.0,gpu_mem_util=30.5,gpus=4,seconds=7200||train | eval
102|ben|beta|normal|gpu|COMPLETED|2026-11-03T09:00:00|2026-11-03T09:00:00|2026-11-03T09:30:00|2026-11-03T10:30:00|3600|billing=500,cpu=2,gres/gpu=2,mem=8G,node=1|gpu02||||probe
103|ann|alpha|normal|gpu|FAILED|2026-10-31T22:00:00|2026-10-31T22:00:00|2026-10-31T23:00:00|2026-11-01T01:00:00|7200|billing=250,cpu=4,gres/gpu=1,mem=8G,node=1|gpu03||kiln:gpu_util=10,gpus=1,seconds=7200||late-night
104|ben|beta|normal|cpu|COMPLETED|2026-11-04T09:00:00|2026-11-04T09:00:00|2026-11-04T09:00:00|2026-11-04T11:00:00|7200|billing=16,cpu=16,mem=32G,node=1|cpu01||||cpu-only
105|ann|alpha|normal|gpu|PENDING|2026-11-05T09:00:00|2026-11-05T09:00:00|Unknown|Unknown|0|billing=1000,cpu=4,gres/gpu=4,mem=8G,node=1|None assigned|||| waits
106|ann|alpha|normal|gpu|CANCELLED by 0|2026-11-06T09:00:00|2026-11-06T09:00:00|2026-11-06T09:00:00|2026-11-06T09:30:00|1800|billing=500,cpu=1,gres/gpu=2,mem=1G,node=2|gpu[01-02]||kiln:gpu_util=1e9;rm||broken-comment
not a job line
"""
# sacct -D: each run of a job that was preempted, requeued by a rollout, or lost its node, under one id
RUNS = """201|ben|beta|scavenger|gpu|PREEMPTED|2026-11-07T08:00:00|2026-11-07T08:00:00|2026-11-07T08:00:00|2026-11-07T09:00:00|3600|billing=400,cpu=2,gres/gpu=2,node=1|gpu02||||scav
201|ben|beta|scavenger|gpu|COMPLETED|2026-11-07T09:00:00|2026-11-07T09:00:00|2026-11-07T10:00:00|2026-11-07T11:00:00|3600|billing=400,cpu=2,gres/gpu=2,node=1|gpu01||||scav
202|ann|alpha|normal|gpu|REQUEUED|2026-11-08T08:00:00|2026-11-08T08:00:00|2026-11-08T08:00:00|2026-11-08T08:30:00|1800|billing=800,cpu=4,gres/gpu=4,node=1|gpu01||||ckpt
202|ann|alpha|normal|gpu|NODE_FAIL|2026-11-08T08:30:00|2026-11-08T08:30:00|2026-11-08T08:32:00|2026-11-08T09:02:00|1800|billing=800,cpu=4,gres/gpu=4,node=1|gpu02||||ckpt
202|ann|alpha|normal|gpu|COMPLETED|2026-11-08T09:02:00|2026-11-08T09:02:00|2026-11-08T09:05:00|2026-11-08T10:05:00|3600|billing=800,cpu=4,gres/gpu=4,node=1|gpu03||||ckpt
"""


def test_every_run_of_a_requeued_preempted_or_node_failed_job_counts_and_its_lost_time_is_named(cluster):
    """sacct -D gives each run its own record: a job is counted once, its runs each, and the GPU-hours of a
    run that ended by preemption, requeue or node failure are shown as lost, per cause."""
    assert "-D" in sacct.command("a", "b", SEP)
    runs, problem = sacct.read(frame(RUNS, 17), SEP)
    assert len(runs) == 5 and not problem
    data = report(runs, cluster, _ts("2026-11-01T00:00:00"), _ts("2026-12-01T00:00:00"), {"gpu_a": 2.0}, "EUR")
    teams = {t["team"]: t for t in data["teams"]}
    assert (teams["beta"]["jobs"], teams["beta"]["runs"]) == (1, 2) and teams["beta"]["gpu_hours"] == 4.0
    assert teams["beta"]["lost_gpu_hours"] == 2.0 and teams["beta"]["lost_gpu_hours_preemption"] == 2.0
    assert (teams["alpha"]["jobs"], teams["alpha"]["runs"]) == (1, 3) and teams["alpha"]["gpu_hours"] == 8.0
    assert teams["alpha"]["lost_gpu_hours_requeue"] == 2.0 and teams["alpha"]["lost_gpu_hours_node_failure"] == 2.0
    assert teams["alpha"]["lost_gpu_hours"] == 4.0 and data["totals"]["lost_gpu_hours"] == 6.0


# runs of checkpointing jobs (docs/examples/checkpointing-job.sh writes kiln:saved=EPOCH in its own comment)
SAVED = """301|ann|alpha|normal|gpu|NODE_FAIL|2026-11-09T08:00:00|2026-11-09T08:00:00|2026-11-09T08:00:00|2026-11-09T10:00:00|7200|billing=800,cpu=4,gres/gpu=4,node=1|gpu01||kiln:gpu_util=90.0,gpus=4,seconds=7200|kiln:checkpoint kiln:saved=1794211200 kiln:saved=1794214800|ckpt
301|ann|alpha|normal|gpu|COMPLETED|2026-11-09T10:00:00|2026-11-09T10:00:00|2026-11-09T10:01:00|2026-11-09T11:01:00|3600|billing=800,cpu=4,gres/gpu=4,node=1|gpu02|||kiln:checkpoint kiln:saved=1794218400|ckpt
302|ben|beta|scavenger|gpu|PREEMPTED|2026-11-09T08:00:00|2026-11-09T08:00:00|2026-11-09T08:00:00|2026-11-09T09:00:00|3600|billing=400,cpu=2,gres/gpu=2,node=1|gpu03|||kiln:saved=1700000000|early
303|ben|beta|scavenger|gpu|PREEMPTED|2026-11-09T08:00:00|2026-11-09T08:00:00|2026-11-09T08:00:00|2026-11-09T09:00:00|3600|billing=400,cpu=2,gres/gpu=2,node=1|gpu04|||kiln:saved=1894211200 kiln:saved=12x kiln:saved=-5|future
"""


def test_a_lost_run_loses_only_the_work_after_its_last_checkpoint():
    """A run that ended by a node failure, a preemption or a requeue loses what it did after the last
    checkpoint its job named (kiln:saved=EPOCH, the last such word of its comment); a checkpoint outside the
    run (a stale one from an earlier run, a forged future one) or none at all: the whole run is lost. The
    cost per kept GPU-hour spreads what the lost hours cost over the hours whose work was kept."""
    runs, problem = sacct.read(frame(SAVED, 17), SEP)
    assert not problem and [r.saved for r in runs] == [_ts("2026-11-09T09:00:00"), _ts("2026-11-09T10:00:00"),
                                                       _ts("2023-11-14T22:13:20"), _ts("2030-01-09T17:46:40")]
    cluster = load_cluster(SMALL)
    data = report(runs, cluster, _ts("2026-11-01T00:00:00"), _ts("2026-12-01T00:00:00"), {"gpu_a": 2.0}, "EUR")
    teams = {t["team"]: t for t in data["teams"]}
    # 301's first run: 4 GPUs x 2 h, saved at 09:00, lost at 10:00: 4 GPU-h lost, 4 kept
    assert teams["alpha"]["lost_gpu_hours_node_failure"] == 4.0 and teams["alpha"]["gpu_hours"] == 12.0
    assert teams["alpha"]["cost_per_kept_gpu_hour"] == round(12.0 * 2.0 / 8.0, 2)
    # 302 names a checkpoint from before the run, 303 one after it (and two words that are no time): all lost
    assert teams["beta"]["lost_gpu_hours_preemption"] == 4.0 and teams["beta"]["cost_per_kept_gpu_hour"] is None
    # the window cuts the run: only what falls inside counts, after the checkpoint
    data = report(runs, cluster, _ts("2026-11-09T09:30:00"), _ts("2026-12-01T00:00:00"), {"gpu_a": 2.0}, "EUR")
    assert {t["team"]: t for t in data["teams"]}["alpha"]["lost_gpu_hours"] == 2.0


@pytest.fixture(scope="module")
def cluster():
    return load_cluster(SMALL)


def test_sacct_lines_are_read_field_by_field():
    jobs = {j.job_id: j for j in sacct.read(frame(SACCT, 17), SEP)[0]}
    assert sorted(jobs) == ["101", "102", "103", "104", "105", "106"]
    assert jobs["101"].name == "train | eval" and jobs["101"].gpus == 4 and jobs["101"].gpu_util == 75.0
    assert jobs["102"].gpu_util is None and jobs["104"].gpus == 0 and jobs["104"].cpus == 16
    assert jobs["105"].start is None and jobs["106"].state == "CANCELLED" and jobs["106"].gpu_util is None
    assert jobs["101"].start == _ts("2026-11-02T10:00:00")
    assert "-a" in sacct.command("a", "b", SEP) and sacct.command("a", "b", SEP)[-1].endswith(",JobName,JobIDRaw")
    assert f"--delimiter={SEP}" in sacct.command("a", "b", SEP)
    assert "not a job line" in sacct.read(frame(SACCT, 17), SEP)[1]


def test_gpu_hours_cost_and_useful_hours_per_team(cluster):
    prices = {"gpu_a": 2.5}
    data = report(sacct.read(frame(SACCT, 17), SEP)[0], cluster, _ts("2026-11-01T00:00:00"), _ts("2026-12-01T00:00:00"), prices, "EUR")
    teams = {t["team"]: t for t in data["teams"]}
    # alpha: 101 4 GPUs x 2 h = 8; 103 1 GPU x 1 h inside the window (started the evening before) = 1;
    # 106 2 GPUs x 0.5 h = 1; the pending 105 none
    assert teams["alpha"]["gpu_hours"] == 10.0 and teams["alpha"]["cost"] == 25.0
    assert teams["alpha"]["useful_gpu_hours"] == pytest.approx(8 * 0.75 + 1 * 0.10)
    assert teams["alpha"]["idle_gpu_hours"] == pytest.approx(8 * 0.25 + 1 * 0.90)
    assert teams["alpha"]["measured_share"] == 0.9  # 9 of its 10 GPU-hours were measured
    assert teams["alpha"]["cost_per_useful_gpu_hour"] == round(22.5 / 6.1, 2)
    assert teams["beta"]["gpu_hours"] == 2.0 and teams["beta"]["cpu_hours"] == 34.0
    assert teams["beta"]["cost_per_useful_gpu_hour"] is None  # nothing measured: no figure, not zero
    assert teams["alpha"]["share_target"] == 0.7 and teams["alpha"]["gpu_limit"] == 4
    assert data["totals"]["gpu_hours"] == 12.0 and data["currency"] == "EUR"
    assert data["top_cost_jobs"][0]["job"] == "101" and data["idle_jobs"][0]["job"] == "101"
    assert teams["alpha"]["pending_hours"] == pytest.approx(1 + 0 + (_ts("2026-12-01T00:00:00") - _ts("2026-11-05T09:00:00")) / 3600, abs=1e-3)


def test_unknown_priced_node_types_are_refused(tmp_path):
    import shutil
    root = tmp_path / "inv"
    shutil.copytree(SMALL, root)
    (root / "group_vars" / "all" / "prices.yml").write_text("kiln_usage_gpu_hour_prices: {gpu_aa: 2.5}\n"
                                                           "kiln_usage_currency: EUR\n")
    cluster, errors = validate(root)
    assert cluster is None and any("kiln_usage_gpu_hour_prices.gpu_aa" in str(e) and "prices.yml" in str(e)
                                   for e in errors), errors
    for bad in ("kiln_usage_gpu_hour_prices: {gpu_a: -1}\n", "kiln_usage_gpu_hour_prices: {gpu_a: \"1; rm -rf /\"}\n",
                "kiln_usage_currency: \"EUR\\n\"\n", "kiln_usage_currency: euro\n"):
        (root / "group_vars" / "all" / "prices.yml").write_text(bad)
        cluster, errors = validate(root)
        assert cluster is None and any("prices.yml" in str(e) for e in errors), (bad, errors)


def test_finished_jobs_add_up_in_the_usage_counters_under_concurrent_epilogs(tmp_path, monkeypatch):
    """kiln-job-summary adds each finished GPU job to per-account counters; epilogs of many jobs at once
    (separate processes) lose none of them."""
    import multiprocessing

    from checks import job_summary
    monkeypatch.setattr(job_summary, "COUNTERS", str(tmp_path / "usage-counters.json"))
    counters = job_summary.add_job({}, "vision", 2, 3600, 60.0, 2.5)
    job_summary.add_job(counters, "vision", 1, 1800, None, 2.5)
    assert counters["vision"] == {"jobs": 2, "gpu_seconds": 9000.0, "measured_gpu_seconds": 7200.0,
                                  "useful_gpu_seconds": 4320.0, "cost": 6.25}
    info = {"gpus": {"gpu02": [0, 1]}, "account": "vision"}
    config = {"node_prices": {"gpu02": 3.0}}
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=lambda: [job_summary.count(config, info, 60, 50.0) for _ in range(25)])
             for _ in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    import json
    result = json.loads((tmp_path / "usage-counters.json").read_text())["vision"]
    assert result["jobs"] == 200 and result["gpu_seconds"] == 200 * 120.0
    assert abs(result["cost"] - 200 * 120 / 3600 * 3.0) < 1e-6 and result["useful_gpu_seconds"] == 200 * 60.0


def test_usage_counters_become_prometheus_counters(tmp_path):
    import shutil
    import subprocess

    from checks import job_summary, slurm_metrics
    assert job_summary.parse_job("JobId=7 JobName=x\n   UserId=alice(2101) Account=vision QOS=normal\n")["account"] == "vision"
    counters = {"vision": {"jobs": 2, "gpu_seconds": 9000.0, "measured_gpu_seconds": 7200.0,
                           "useful_gpu_seconds": 4320.0, "cost": 661089.71},
                'evil"} 1\nkiln_x{a="': {"jobs": 1}, "language": {"jobs": "1; rm", "gpu_seconds": -5}}
    config = {"currency": "EUR", "share_targets": {"vision": 0.6, "language": 0.4}}
    exposition = slurm_metrics.exposition(1, 1, ({}, []), {}, {}, 0, counters, config)
    lines = exposition.split("\n")
    text = exposition
    assert 'kiln_usage_gpu_seconds_total{account="vision"} 9000' in lines
    assert 'kiln_usage_cost_total{account="vision",currency="EUR"} 661089.71' in lines
    assert 'kiln_usage_share_target{account="language"} 0.4' in lines
    assert "evil" not in text and 'kiln_usage_jobs_total{account="language"}' not in text  # not kiln's: left out
    assert 'kiln_usage_gpu_seconds_total{account="language"}' not in text
    if shutil.which("promtool"):
        check = subprocess.run(["promtool", "check", "metrics"], input=exposition, capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr


def test_job_summary_knows_each_gpu_nodes_price_and_the_teams_targets():
    from roles.monitoring_config import usage_settings
    cluster = load_cluster(SMALL)
    import dataclasses
    settings = usage_settings(dataclasses.replace(cluster, settings={**cluster.settings,
                                                                     "kiln_usage_gpu_hour_prices": {"gpu_a": 2.5}}))
    assert settings["node_prices"] == {f"gpu0{i}": 2.5 for i in range(1, 5)}  # cpu01 has no GPUs, no price
    assert settings["share_targets"] == {"alpha": 0.7, "beta": 0.3}
