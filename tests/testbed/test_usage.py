"""kiln usage live on the shared testbed (#31): jobs of known size and length under two teams, one over
its team's GPU limit (pends with Slurm's limit reason); kiln usage --json gives each team's GPU-hours and
cost as sacct's own fields say for the same window, and each job's GPU utilization recorded at its end
(kiln-job-summary, EpilogSlurmctld, from Prometheus) is what the GPU simulators were set to."""

from __future__ import annotations

import json
import re
import shlex
import time
from datetime import datetime, timezone

from kiln.inventory import load_cluster
from kiln.monitoring.alerts import query
from kiln.secrets import monitoring_password
from kiln.usage import billing
from tests.testbed.slurm_helpers import job_state, kiln, ok, on, wait_for

PRICE = 2.5  # kiln/testbed/inventory.py: EUR per GPU-hour of testbed_compute


def _submit(tb, user: str, account: str, args: str, seconds: int) -> str:
    out = ok(tb, tb.controller, f"cd /tmp && su {user} -c 'sbatch --parsable -o /dev/null -A {account} {args} "
                                f"--wrap \"sleep {seconds}\"'")
    return out.strip().split(";")[0]


def _sacct_runs(tb, since: str, until: str) -> list[dict]:
    """Every run in [since, until) from sacct's own fields: its account, GPUs, CPUs, memory (MB), Slurm's
    billing and its seconds inside the window, clipped by hand."""
    text = ok(tb, tb.controller, f"TZ=UTC sacct -a -X -D -n -P --noconvert -S {since} -E {until} "
                                 "-o JobIDRaw,Account,Start,End,AllocTRES")
    lo, hi = (datetime.strptime(t, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp() for t in (since, until))
    out = []
    for line in text.splitlines():
        job, account, start, end, alloc = line.split("|")
        held = dict(p.split("=", 1) for p in alloc.split(",") if "=" in p)
        if start in ("Unknown", "None") or not held:
            continue  # never started, or held nothing (a run cancelled as it was starting)
        s = datetime.strptime(start, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
        e = hi if end in ("Unknown", "None") else datetime.strptime(end, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
        mem = held.get("mem", "0M")
        out.append({"job": job, "account": account, "gpus": int(held.get("gres/gpu", 0)), "cpus": int(held["cpu"]),
                    "mem_mb": int(mem[:-1]) * (1024 if mem.endswith("G") else 1) if mem[-1:] in "MG" else int(mem) // 2**20,
                    "billing": int(held.get("billing", 0)), "seconds": max(0.0, min(e, hi) - max(s, lo))})
    return out


def _sacct_gpu_hours(tb, since: str, until: str) -> dict[str, float]:
    """GPU-hours per account from sacct's own fields, clipped to [since, until) by hand."""
    out: dict[str, float] = {}
    for run in _sacct_runs(tb, since, until):
        out[run["account"]] = out.get(run["account"], 0.0) + run["gpus"] * run["seconds"] / 3600
    return out


def _billed(tb, runs: list[dict]) -> dict[str, float]:
    """Cost per account as Slurm bills it (billing x hours, in hundredths of the currency), after checking
    that each GPU run's billing is what kiln's weights make of its allocation (kiln/usage/billing.py)."""
    node_type = load_cluster(tb.inventory).node_types["testbed_compute"]
    out: dict[str, float] = {}
    for run in runs:
        if run["gpus"]:
            assert run["billing"] == billing.expected(run["gpus"], run["cpus"], run["mem_mb"], node_type, PRICE), run
        out[run["account"]] = out.get(run["account"], 0.0) + billing.cost(run["billing"], run["seconds"])
    return out


def test_usage_per_team_matches_sacct_and_jobs_carry_their_gpu_utilization(slurm, tmp_path):
    tb = slurm
    busy, light = tb.computes[0], tb.computes[1]
    ok(tb, busy, "kiln-sim load 60 --mem 50")
    ok(tb, light, "kiln-sim load 20")
    since = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    try:
        vision = _submit(tb, "alice", "vision", f"--gpus=2 -w {busy}", 30)
        language = _submit(tb, "bob", "language", f"--gpus=1 -w {light}", 30)
        wait_for(lambda: job_state(tb, tb.controller, vision) == "RUNNING", timeout=60, what="the vision job running")
        over = _submit(tb, "alice", "vision", "--gpus=1", 5)  # vision's limit is 2 GPUs, both in use
        wait_for(lambda: on(tb, tb.controller, f"squeue -h -j {over} -o %r").stdout.strip() == "AssocGrpGRES",
                 timeout=60, what="the job over vision's GPU limit pending with AssocGrpGRES")
        for job in (vision, language, over):
            wait_for(lambda j=job: job_state(tb, tb.controller, j) == "COMPLETED", timeout=180, interval=2,
                     what=f"job {job} completed")
        counted = {}  # GPU-seconds per team as kiln-job-summary counted them at each job's end
        for job, util, team in ((vision, 60.0, "vision"), (language, 20.0, "language")):
            comment = wait_for(lambda j=job: on(tb, tb.controller, f"sacct -n -X -P -j {j} -o AdminComment").stdout.strip(),
                               timeout=60, interval=2, what=f"job {job}'s summary in AdminComment")
            assert comment.startswith("kiln:"), comment
            assert f"gpu_util={util}," in comment, comment
            fields = dict(part.split("=", 1) for part in comment[len("kiln:"):].split(","))
            counted[team] = int(fields["gpus"]) * int(fields["seconds"])
        until = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
        page = tmp_path / "usage.html"
        out = kiln("usage", "-i", str(tb.inventory), "--since", since, "--until", until, "--json", "--html", str(page))
        assert out.returncode == 0, out.stdout + out.stderr
        data = json.loads(out.stdout)
        assert f"<h1>Usage of cluster {tb.name}</h1>" in page.read_text() and "vision" in page.read_text()
        expected = _sacct_gpu_hours(tb, since, until)
        charged = _billed(tb, _sacct_runs(tb, since, until))  # Slurm's billing of each run, checked
        teams = {t["team"]: t for t in data["teams"]}
        for team in ("vision", "language"):
            assert abs(teams[team]["gpu_hours"] - expected[team]) < 0.002, (team, teams[team], expected)
            assert abs(teams[team]["cost"] - round(charged[team], 2)) <= 0.01, (team, teams[team], charged)
        assert data["currency"] == "EUR"
        assert abs(teams["vision"]["useful_gpu_hours"] / teams["vision"]["gpu_hours"] - 0.6) < 0.1, teams["vision"]
        assert teams["language"]["idle_gpu_hours"] > 0
        # the same jobs in Prometheus: kiln-job-summary's counters, exported by the Slurm collector
        cluster = load_cluster(tb.inventory)
        password = monitoring_password(cluster)
        def scraped() -> dict | None:
            """The counters once Prometheus has scraped this test's jobs in them (an earlier scrape holds only
            the run's earlier jobs: the collector counts at each job's end, Prometheus reads every 10 s)."""
            got = {r["metric"]["account"]: float(r["value"][1])
                   for r in query(cluster, password, "kiln_usage_gpu_seconds_total")}
            return got if all(got.get(team, 0) >= counted[team] for team in counted) else None
        gpu_seconds = wait_for(scraped, timeout=90, interval=3,
                               what="this test's jobs in kiln_usage_gpu_seconds_total in Prometheus")
        for team in ("vision", "language"):  # at least this test's jobs (the counters count the run's every job)
            assert gpu_seconds.get(team, 0) >= counted[team], (team, gpu_seconds, counted)
            # what the epilog counts (its own start to end) is sacct's length within a few seconds
            assert abs(counted[team] / 3600 - teams[team]["gpu_hours"]) < 0.003, (team, counted, teams[team])
        assert query(cluster, password, 'kiln_usage_share_target{account="vision"} == 0.6')
        print(f"kiln usage: vision {teams['vision']['gpu_hours']:.4f} GPU-h (sacct {expected['vision']:.4f}), language "
              f"{teams['language']['gpu_hours']:.4f} (sacct {expected['language']:.4f})")
    finally:
        on(tb, busy, "kiln-sim load 0")
        on(tb, light, "kiln-sim load 0")


def test_qos_preemption_limits_and_team_lists_hold_live(slurm):
    """kiln_qos of the testbed inventory (kiln/testbed/inventory.py): a high-QoS job preempts a
    scavenger job (requeued after its 10 s grace, not killed), a job past high's MaxWall pends with
    Slurm's QoS reason, and a team may not use a QoS that is not in its list."""
    tb = slurm
    node = tb.computes[-1]
    qos = ok(tb, tb.controller, "sacctmgr -nP show qos format=name,priority,maxwall,maxtrespu,preempt,preemptmode,"
                                "usagefactor,gracetime")
    assert "high|100|1-00:00:00|gres/gpu=2|scavenger|cluster|1.000000|00:00:00" in qos, qos
    assert "scavenger|0||||requeue|0.000000|00:00:10" in qos, qos
    since = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    # a checkpointing job: 3 s in, it names a checkpoint in its own comment (docs/examples/checkpointing-job.sh)
    work = 'sleep 3; scontrol update jobid=$SLURM_JOB_ID comment="kiln:checkpoint kiln:saved=$(date +%s)"; sleep 600'
    scavenger = ok(tb, tb.controller, "cd /tmp && su bob -c " + shlex.quote(
        f"sbatch --parsable -o /dev/null -A language --qos=scavenger --gpus=4 -w {node} --wrap {shlex.quote(work)}")
    ).strip().split(";")[0]
    jobs = [scavenger]
    try:
        wait_for(lambda: job_state(tb, tb.controller, scavenger) == "RUNNING", timeout=60,
                 what="the scavenger job running on all GPUs of the node")
        wait_for(lambda: "kiln:saved=" in ok(tb, tb.controller, f"squeue -h -j {scavenger} -o %k"), timeout=30,
                 interval=1, what="the scavenger job's checkpoint named in its comment")
        time.sleep(4)  # work after the checkpoint, which the preemption loses
        high = _submit(tb, "alice", "vision", f"--qos=high --gpus=2 -w {node}", 5)
        jobs.append(high)
        t0 = time.monotonic()
        wait_for(lambda: job_state(tb, tb.controller, high) in ("RUNNING", "COMPLETED"), timeout=90, interval=1,
                 what="the high-QoS job running after preempting the scavenger job")
        preempted = time.monotonic() - t0
        history = ok(tb, tb.controller, f"sacct -X -D -n -P -j {scavenger} -o State")
        assert history.splitlines()[0] == "PREEMPTED", history
        restarts = ok(tb, tb.controller, f"scontrol show job {scavenger}")
        assert "Restarts=1" in restarts and "Requeue=1" in restarts, restarts
        # kiln usage shows both runs: the preempted one as GPU-hours lost to preemption (sacct -D). Slurm
        # holds a requeued job back a while; made eligible now, as kiln patch does for its requeues
        wait_for(lambda: job_state(tb, tb.controller, high) == "COMPLETED", timeout=60, what="the high job done")
        ok(tb, tb.controller, f"scontrol update jobid={scavenger} StartTime=now")
        wait_for(lambda: job_state(tb, tb.controller, scavenger) == "RUNNING", timeout=60, interval=1,
                 what="the requeued scavenger job running again")
        until = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
        out = kiln("usage", "-i", str(tb.inventory), "--since", since, "--until", until, "--json")
        assert out.returncode == 0, out.stdout + out.stderr
        language = {t["team"]: t for t in json.loads(out.stdout)["teams"]}["language"]
        first = next(r for r in _sacct_runs(tb, since, until) if r["job"] == scavenger)
        assert language["runs"] == 2 and language["jobs"] == 1, language  # one job, its two runs
        # only the work after the first run's checkpoint is lost: the comment sacct -D kept for that run
        comment, end = ok(tb, tb.controller, f"TZ=UTC sacct -X -D -n -P -j {scavenger} -o Comment,End").splitlines()[0].split("|")
        saved = int(re.search(r"kiln:saved=(\d+)", comment).group(1))
        ended = datetime.strptime(end, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
        assert 4 <= ended - saved < first["seconds"], (comment, end, first)
        assert abs(language["lost_gpu_hours_preemption"] - 4 * (ended - saved) / 3600) < 0.002, (language, first, saved)
        assert language["cost_per_kept_gpu_hour"] is not None
        # ended here, and counted by its epilog before the next test reads the counters
        counted = _counters(tb).get("language", {}).get("jobs", 0)
        ok(tb, tb.controller, f"scancel {scavenger}")
        wait_for(lambda: _counters(tb).get("language", {}).get("jobs", 0) > counted, timeout=60, interval=2,
                 what="the cancelled scavenger job counted by kiln-job-summary")
        long = _submit(tb, "alice", "vision", "--qos=high -t 2-00:00:00", 1)
        jobs.append(long)
        wait_for(lambda: on(tb, tb.controller, f"squeue -h -j {long} -o %r").stdout.strip()
                 == "QOSMaxWallDurationPerJobLimit", timeout=30, what="the job past high's MaxWall pending")
        refused = on(tb, tb.controller, "cd /tmp && su bob -c 'sbatch -A language --qos=high --wrap \"sleep 1\"'")
        assert refused.returncode != 0 and "Invalid qos specification" in refused.stderr, refused
        print(f"QoS: the scavenger job was preempted and requeued, the high job ran {preempted:.0f} s after its "
              "submission (10 s grace)")
    finally:
        on(tb, tb.controller, f"scancel {' '.join(jobs)}")


FORGED = " Account=language StartTime=2000-01-01T00:00:00"


def _counters(tb) -> dict:
    text = on(tb, tb.controller, "cat /var/lib/kiln/jobs/usage-counters.json 2>/dev/null || echo {}").stdout
    return json.loads(text or "{}")


def test_job_names_that_forge_fields_are_counted_to_their_own_team_for_their_real_time(slurm):
    """#42: a job named with a space and `` Account=language StartTime=2000-01-01T00:00:00``, and one whose
    name holds a carriage return and a newline before such words, are vision's jobs of about 20 s: in
    ``kiln usage`` (sacct read with a separator of the call's own) and in the job summary (scontrol's
    record read whole) alike; language, whose account they name, gets nothing."""
    tb = slurm
    node = tb.computes[0]
    before = _counters(tb)
    since = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    names = {"space": "train" + FORGED, "cr": "train\\r" + FORGED.strip() + "\\n" + FORGED.strip()}
    jobs = {}
    for kind, name in names.items():
        out = ok(tb, tb.controller, f"cd /tmp && su alice -c 'sbatch --parsable -o /dev/null -A vision --gpus=1 "
                                    f"-w {node} -J \"$(printf \"{name}\")\" --wrap \"sleep 20\"'")
        jobs[kind] = out.strip().split(";")[0]
    for job in jobs.values():
        wait_for(lambda j=job: job_state(tb, tb.controller, j) == "COMPLETED", timeout=180, interval=2,
                 what=f"job {job} completed")
    for job in jobs.values():
        comment = wait_for(lambda j=job: on(tb, tb.controller, f"sacct -n -X -P -j {j} -o AdminComment").stdout.strip(),
                           timeout=60, interval=2, what=f"job {job}'s summary in AdminComment")
        seconds = int(dict(p.split("=", 1) for p in comment[len("kiln:"):].split(","))["seconds"])
        assert comment.startswith("kiln:") and 15 <= seconds <= 60, comment  # its real time, not since 2000
    shown = on(tb, tb.controller, f"sacct -n -X -P -j {jobs['cr']} -o JobName").stdout
    assert "\r" in shown or "\n" in shown.strip("\n"), repr(shown)  # Slurm kept the name as given
    def both_counted() -> dict | None:
        now = _counters(tb)
        return now if now.get("vision", {}).get("jobs", 0) >= before.get("vision", {}).get("jobs", 0) + 2 else None
    after = wait_for(both_counted, timeout=60, interval=2, what="both jobs in kiln-job-summary's counters")
    added = after["vision"]["gpu_seconds"] - before.get("vision", {}).get("gpu_seconds", 0)
    assert 30 <= added <= 120, (before, after)  # two 1-GPU jobs of about 20 s each
    assert after.get("language", {}).get("jobs", 0) == before.get("language", {}).get("jobs", 0), (before, after)
    until = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    out = kiln("usage", "-i", str(tb.inventory), "--since", since, "--until", until, "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    data = json.loads(out.stdout)
    teams = {t["team"]: t for t in data["teams"]}
    expected = _sacct_gpu_hours(tb, since, until)
    assert abs(teams["vision"]["gpu_hours"] - expected["vision"]) < 0.002, (teams, expected)
    assert 30 / 3600 <= teams["vision"]["gpu_hours"] <= 120 / 3600, teams["vision"]
    assert teams.get("language", {}).get("gpu_hours", 0) == 0, teams.get("language")
    assert data["left_out"] == "", data["left_out"]
    print(f"forged names: vision {teams['vision']['gpu_hours'] * 3600:.0f} GPU-s in kiln usage, {added:.0f} GPU-s "
          f"in the job summary's counters; language nothing")


def test_an_exclusive_job_pays_its_node_and_reconcile_sets_kiln_beside_sreport_and_sshare(slurm):
    """#44: a one-GPU job with --exclusive holds every CPU of a four-GPU node: Slurm bills it the node
    (kiln's TRESBillingWeights, MAX_TRES) and kiln usage charges that billing; a one-GPU job of one CPU
    pays its share. kiln usage --reconcile reads sreport and sshare: each team's fair-share target is
    Slurm's NormShares of the inventory's shares, and over whole hours that have ended kiln's GPU-hours
    agree with sreport's within 1 %."""
    tb = slurm
    node = tb.computes[0]
    cluster = load_cluster(tb.inventory)
    node_type = cluster.node_types["testbed_compute"]
    partition = ok(tb, tb.controller, "scontrol show partition batch")
    assert "TRESBillingWeights=" in partition and "GRES/gpu=250" in partition, partition
    assert "MAX_TRES" in ok(tb, tb.controller, "scontrol show config | grep -i PriorityFlags"), "PriorityFlags"
    since = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    # language: an exclusive job holds every GPU of the node, past vision's limit of 2
    exclusive = _submit(tb, "bob", "language", f"--gpus=1 --exclusive -w {node}", 15)
    small = _submit(tb, "alice", "vision", f"--gpus=1 -c 1 -w {tb.computes[1]}", 15)
    for job in (exclusive, small):
        wait_for(lambda j=job: job_state(tb, tb.controller, j) == "COMPLETED", timeout=180, interval=2,
                 what=f"job {job} completed")
    until = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    runs = {r["job"]: r for r in _sacct_runs(tb, since, until)}
    whole_node = node_type.gpu_count * PRICE * billing.UNITS
    assert runs[exclusive]["billing"] == whole_node, runs[exclusive]  # one GPU asked, the node paid
    assert runs[small]["billing"] < whole_node, runs[small]
    _billed(tb, list(runs.values()))  # each run's billing is what kiln's weights make of what it held
    out = kiln("usage", "-i", str(tb.inventory), "--since", since, "--until", until, "--json", "--reconcile")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "left out" not in out.stderr, out.stderr  # sreport's and sshare's answers were read whole
    data = json.loads(out.stdout)
    jobs = {r["job"]: r for r in data["top_cost_jobs"]}
    hours = runs[exclusive]["seconds"] / 3600
    assert jobs[exclusive]["charged_by"] == "billing"
    assert abs(jobs[exclusive]["cost"] - round(node_type.gpu_count * PRICE * hours, 2)) <= 0.01, jobs[exclusive]
    rec = data["reconcile"]
    total = sum(t.shares for t in cluster.teams)
    if rec["teams"]:  # the window's hour has ended (the run crossed an hour): kiln and sreport agree
        for row in rec["teams"]:
            team = next(t for t in cluster.teams if t.name == row["team"])
            assert abs(row["fair_share_target"] - team.shares / total) < 0.01, row  # sshare's NormShares
            assert row["reason"] == "" or row["sreport_gpu_hours"] == row["gpu_hours"] == 0, row
    else:
        assert "hourly rollups" in rec["note"], rec
    # sshare and sreport answered for the whole hours before now, where the run's earlier jobs are
    now = datetime.now(timezone.utc)
    start = now.replace(minute=0, second=0, microsecond=0).timestamp() - 3 * 3600
    out = kiln("usage", "-i", str(tb.inventory), "--since",
               datetime.fromtimestamp(start, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S"), "--json", "--reconcile")
    assert out.returncode == 0, out.stdout + out.stderr
    rec = json.loads(out.stdout)["reconcile"]
    targets = {r["team"]: r["fair_share_target"] for r in rec["teams"]}
    assert abs(targets["vision"] - 0.6) < 0.01, rec  # the inventory's shares, as Slurm normalizes them
    for row in rec["teams"]:
        assert row["reason"] == "", row  # whole hours: kiln's GPU-hours are sreport's within 1 %
        assert row["fair_share_note"] == "", row
    # an account the inventory does not have (a team removed from it, say) takes its part of root's shares:
    # Slurm's target is then not the inventory's, and the reconcile names the account
    ok(tb, tb.controller, "sacctmgr -i add account kiln_stale Fairshare=50")
    try:
        out = kiln("usage", "-i", str(tb.inventory), "--since",
                   datetime.fromtimestamp(start, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S"), "--reconcile")
        assert out.returncode == 0, out.stdout + out.stderr
        assert "kiln_stale (50)" in out.stdout and "not the inventory's 60.0%" in out.stdout, out.stdout
    finally:
        ok(tb, tb.controller, "sacctmgr -i delete account kiln_stale")
    print(f"billing: exclusive one-GPU job {runs[exclusive]['billing']} (the node), one GPU of one CPU "
          f"{runs[small]['billing']}; reconcile over {len(rec['teams'])} teams: "
          + ", ".join(f"{r['team']} kiln {r['gpu_hours']:.4f} sreport {r['sreport_gpu_hours']:.4f}" for r in rec["teams"]))



def test_usage_and_the_job_summary_read_the_same_with_private_data_on_as_off(slurm, tmp_path):
    """#46: kiln's own readers run as root and SlurmUser, which PrivateData does not restrict. The same
    window read by ``kiln usage --reconcile`` with PrivateData on (the default) and off (``[]``, Slurm's
    default) gives the same answer, field for field; a job's summary (kiln-job-summary at its end) is
    written and counted alike under each."""
    from tests.testbed.slurm_helpers import copy_inventory
    tb = slurm
    node = tb.computes[0]

    def one_job(user: str, account: str) -> tuple[str, dict]:
        before = _counters(tb)
        job = _submit(tb, user, account, f"--gpus=1 -w {node}", 15)
        wait_for(lambda: job_state(tb, tb.controller, job) == "COMPLETED", timeout=180, interval=2,
                 what=f"job {job} completed")
        comment = wait_for(lambda: on(tb, tb.controller, f"sacct -n -X -P -j {job} -o AdminComment").stdout.strip(),
                           timeout=60, interval=2, what=f"job {job}'s summary in AdminComment")
        wait_for(lambda: _counters(tb).get(account, {}).get("jobs", 0) > before.get(account, {}).get("jobs", 0),
                 timeout=60, interval=2, what=f"job {job} in the job summary's counters")
        fields = dict(p.split("=", 1) for p in comment[len("kiln:"):].split(","))
        return job, fields

    def usage(inventory, since, until) -> dict:
        out = kiln("usage", "-i", str(inventory), "--since", since, "--until", until, "--json", "--reconcile")
        assert out.returncode == 0, out.stdout + out.stderr
        return json.loads(out.stdout)

    since = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    assert "PrivateData=accounts,jobs,usage,users" in ok(tb, tb.controller, "scontrol show config | tr -d ' '")
    on_summary = one_job("alice", "vision")[1]
    time.sleep(1)
    until = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    read_on = usage(tb.inventory, since, until)
    off = copy_inventory(tb.inventory, tmp_path / "off", {"kiln_slurm_private_data": []})
    out = kiln("deploy", "-i", str(off))
    assert out.returncode == 0, out.stdout + out.stderr
    try:
        assert "PrivateData=none" in ok(tb, tb.controller, "scontrol show config | tr -d ' '")
        read_off = usage(off, since, until)
        off_summary = one_job("bob", "language")[1]
    finally:
        out = kiln("deploy", "-i", str(tb.inventory))
        assert out.returncode == 0, out.stdout + out.stderr
    assert read_on == read_off
    assert {t["team"] for t in read_on["teams"] if t["gpu_hours"]} == {"vision"}, read_on["teams"]
    assert set(on_summary) == set(off_summary) and abs(int(on_summary["seconds"]) - int(off_summary["seconds"])) <= 10, \
        (on_summary, off_summary)
    print(f"PrivateData on and off: kiln usage --reconcile of one window equal ({len(json.dumps(read_on))} bytes); "
          f"job summaries {on_summary} / {off_summary}")
