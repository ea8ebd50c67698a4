"""Billing as Slurm counts it (kiln/usage/billing.py): each partition's TRESBillingWeights from the
inventory's prices, a job charged by its ``billing`` TRES (an exclusive job pays its node, a job across node
types of one price pays per node), waiting counted from Eligible; on recorded ``sacct -D -P`` records."""

from __future__ import annotations

import dataclasses
import shutil

import pytest

from kiln.inventory import load_cluster, validate
from kiln.usage import billing, sacct
from kiln.usage.report import report
from roles import slurm_config
from tests.conftest import REPO
from tests.slurm_framing import SEP, frame
from tests.unit.test_usage import _ts

SMALL = REPO / "tests" / "inventories" / "small"
PRICE = 2.5  # per GPU-hour of gpu_a (4 GPUs, 32 CPUs, 128000 MB) and, below, gpu_c (2 GPUs, 16 CPUs, 64000 MB)


@pytest.fixture(scope="module")
def two_types(tmp_path_factory):
    """The small inventory with a second GPU node type, gpu_c (gpu05), in the same partition at one price."""
    root = tmp_path_factory.mktemp("inv") / "inv"
    shutil.copytree(SMALL, root)
    hosts = (root / "hosts.yml").read_text()
    (root / "hosts.yml").write_text(hosts.replace(
        "        cpu_b:\n", "        gpu_c:\n          hosts:\n            gpu05: {ansible_host: 10.0.0.25}\n        cpu_b:\n"))
    (root / "group_vars" / "gpu_c.yml").write_text(
        "kiln_cpus: 16\nkiln_memory_mb: 64000\nkiln_gpu_count: 2\nkiln_gpu_model: a100\n"
        "kiln_fabric: {type: infiniband, hca_count: 4, rate_gbps: 200}\n")
    parts = root / "group_vars" / "all"
    text = next(p for p in parts.iterdir() if "kiln_slurm_partitions" in p.read_text())
    text.write_text(text.read_text().replace("groups: [gpu_a]", "groups: [gpu_a, gpu_c]"))
    (parts / "prices.yml").write_text(f"kiln_usage_gpu_hour_prices: {{gpu_a: {PRICE}, gpu_c: {PRICE}}}\n"
                                      "kiln_usage_currency: EUR\n")
    return root


def test_each_partition_is_weighted_so_a_node_costs_its_gpus_whichever_resource_a_job_takes(two_types):
    cluster = load_cluster(two_types)
    lines = slurm_config.partition_lines(cluster)
    # a GPU 250 hundredths an hour; 32 CPUs (gpu_a) or 16 (gpu_c) cost 4 or 2 GPUs: 31.25 a CPU either way;
    # 128000 MB costs 4 GPUs: 8 a GiB
    assert lines[0].endswith(" TRESBillingWeights=CPU=31.25,Mem=8G,GRES/gpu=250"), lines
    assert "TRESBillingWeights" not in lines[1]  # cpu: no GPU node type, no price: Slurm's own billing
    conf = slurm_config.slurm_conf(cluster)
    assert "\nPriorityFlags=MAX_TRES\n" in conf
    unpriced = dataclasses.replace(cluster, settings={**cluster.settings, "kiln_usage_gpu_hour_prices": {}})
    assert "MAX_TRES" not in slurm_config.slurm_conf(unpriced)
    assert not any("TRESBillingWeights" in line for line in slurm_config.partition_lines(unpriced))
    node = cluster.node_types["gpu_a"]
    assert billing.expected(1, 1, 4000, node, PRICE) == 250            # one GPU, a few CPUs: one GPU
    assert billing.expected(1, 32, 4000, node, PRICE) == 1000          # exclusive: every CPU, so the node
    assert billing.expected(1, 4, 128000, node, PRICE) == 1000         # every byte of memory: the node
    assert billing.cost(1000, 3600) == 10.0 == 4 * PRICE


def test_a_partition_of_node_types_priced_differently_is_refused_naming_the_key(two_types, tmp_path):
    root = tmp_path / "inv"
    shutil.copytree(two_types, root)
    (root / "group_vars" / "all" / "prices.yml").write_text("kiln_usage_gpu_hour_prices: {gpu_a: 2.5, gpu_c: 1.0}\n")
    cluster, errors = validate(root)
    assert cluster is None
    assert any("prices.yml" in str(e) and "kiln_usage_gpu_hour_prices.gpu_a" in str(e) and "partition 'gpu'" in str(e)
               and "gpu_c: 1.0" in str(e) for e in errors), errors
    (root / "group_vars" / "all" / "prices.yml").write_text("kiln_usage_gpu_hour_prices: {gpu_a: 2.5}\n")
    cluster, errors = validate(root)  # an unpriced GPU type beside a priced one: the same refusal
    assert cluster is None and any("gpu_c: no price" in str(e) for e in errors), errors


# sacct -a -X -D -n -P, fields of kiln.usage.sacct.FIELDS (the closing JobIDRaw added by frame()), as Slurm
# writes them under kiln's weights: 301 one GPU exclusive on gpu02 (32 CPUs: the node), 302 one GPU and two
# CPUs, 303 across gpu01 (gpu_a) and gpu05 (gpu_c) with two GPUs on each, 304 held for two hours after its
# submission (scontrol hold / --begin) then waiting half an hour, 305 a scavenger run preempted and its rerun
RECORDED = """301|ann|alpha|normal|gpu|COMPLETED|2026-11-02T09:00:00|2026-11-02T09:00:00|2026-11-02T09:00:00|2026-11-02T10:00:00|3600|billing=1000,cpu=32,gres/gpu:a100=1,gres/gpu=1,mem=4000M,node=1|gpu02||||exclusive
302|ann|alpha|normal|gpu|COMPLETED|2026-11-02T09:00:00|2026-11-02T09:00:00|2026-11-02T09:00:00|2026-11-02T10:00:00|3600|billing=250,cpu=2,gres/gpu:a100=1,gres/gpu=1,mem=4000M,node=1|gpu03||||small
303|ben|beta|normal|gpu|COMPLETED|2026-11-02T09:00:00|2026-11-02T09:00:00|2026-11-02T09:00:00|2026-11-02T11:00:00|7200|billing=1000,cpu=4,gres/gpu:a100=4,gres/gpu=4,mem=8000M,node=2|gpu[01,05]||||two-types
304|ben|beta|normal|gpu|COMPLETED|2026-11-03T08:00:00|2026-11-03T10:00:00|2026-11-03T10:30:00|2026-11-03T11:30:00|3600|billing=250,cpu=1,gres/gpu=1,mem=4000M,node=1|gpu04||||held
305|ben|beta|scavenger|gpu|PREEMPTED|2026-11-04T08:00:00|2026-11-04T08:00:00|2026-11-04T08:00:00|2026-11-04T09:00:00|3600|billing=500,cpu=2,gres/gpu=2,mem=8000M,node=1|gpu04||||scav
305|ben|beta|scavenger|gpu|COMPLETED|2026-11-04T09:00:00|2026-11-04T09:00:00|2026-11-04T09:00:30|2026-11-04T10:00:30|3600|billing=500,cpu=2,gres/gpu=2,mem=8000M,node=1|gpu01||||scav
"""


def test_jobs_are_charged_by_slurms_billing_exclusive_ones_by_the_node_and_across_types_per_node(two_types):
    cluster = load_cluster(two_types)
    jobs, problem = sacct.read(frame(RECORDED, 17), SEP)
    assert len(jobs) == 6 and not problem
    prices = cluster.setting("usage_gpu_hour_prices")
    data = report(jobs, cluster, _ts("2026-11-01T00:00:00"), _ts("2026-12-01T00:00:00"), prices, "EUR")
    rows = {r["job"]: r for r in data["top_cost_jobs"]}
    assert rows["301"]["cost"] == 4 * PRICE and rows["301"]["charged_by"] == "billing"  # 1 GPU held, the node paid
    assert rows["302"]["cost"] == 1 * PRICE
    assert rows["303"]["cost"] == (2 * PRICE + 2 * PRICE) * 2  # two GPUs on each type, two hours
    assert rows["303"]["node_types"] == ["gpu_a", "gpu_c"] and rows["301"]["node_types"] == ["gpu_a"]
    # each recorded billing is what kiln's weights make of the job's allocation on its node type
    types = cluster.node_types
    assert billing.expected(1, 32, 4000, types["gpu_a"], PRICE) == jobs[0].billing
    assert billing.expected(1, 2, 4000, types["gpu_a"], PRICE) == jobs[1].billing
    assert (billing.expected(2, 2, 4000, types["gpu_a"], PRICE) + billing.expected(2, 2, 4000, types["gpu_c"], PRICE)
            == jobs[2].billing)
    teams = {t["team"]: t for t in data["teams"]}
    # 304 waited from 10:00 (eligible) to 10:30, not from its submission at 08:00; 305's reruns waited 30 s
    assert teams["beta"]["pending_hours"] == pytest.approx(0.5 + 30 / 3600, abs=1e-3)
    assert teams["beta"]["lost_gpu_hours_preemption"] == 2.0 and teams["beta"]["runs"] == 4
    assert teams["beta"]["cost"] == pytest.approx(20.0 + 2.5 + 5.0 + 5.0)


def test_the_job_summarys_counters_charge_a_billed_partitions_job_its_billing(monkeypatch, tmp_path, two_types):
    """kiln-job-summary's Prometheus counters cost a job as kiln usage does: by Slurm's billing."""
    from checks import job_summary
    from roles.monitoring_config import usage_settings
    config = usage_settings(load_cluster(two_types))
    assert config["billed_partitions"] == ["gpu"]
    shown = ("JobId=9 JobName=x\n   UserId=ann(2101) Account=alpha QOS=normal\n   Partition=gpu\n"
             "   TRES=cpu=32,mem=4000M,node=1,billing=1000,gres/gpu=1\n")
    info = job_summary.parse_job(shown)
    assert info["billing"] == 1000 and info["partition"] == "gpu"
    info["gpus"] = {"gpu02": [0]}
    monkeypatch.setattr(job_summary, "COUNTERS", str(tmp_path / "usage-counters.json"))
    job_summary.count(config, info, 3600, None)
    import json
    counted = json.loads((tmp_path / "usage-counters.json").read_text())["alpha"]
    assert counted["cost"] == 4 * PRICE and counted["gpu_seconds"] == 3600  # one GPU held, the node paid


def test_share_used_counts_what_fair_share_counts_so_scavenger_runs_are_free(two_types, tmp_path):
    """A scavenger QoS of UsageFactor 0 uses GPU-hours but no fair share: beta's runs under it leave its
    share used at what its other jobs count."""
    root = tmp_path / "inv"
    shutil.copytree(two_types, root)
    (root / "group_vars" / "all" / "qos.yml").write_text(
        "kiln_qos:\n  - {name: high, priority: 100, preempt: [scavenger]}\n  - {name: scavenger, usage_factor: 0}\n")
    cluster = load_cluster(root)
    jobs, _ = sacct.read(frame(RECORDED, 17), SEP)
    data = report(jobs, cluster, _ts("2026-11-01T00:00:00"), _ts("2026-12-01T00:00:00"),
                  cluster.setting("usage_gpu_hour_prices"), "EUR")
    teams = {t["team"]: t for t in data["teams"]}
    alpha_usage = 1000 * 3600 + 250 * 3600           # 301, 302
    beta_usage = 1000 * 7200 + 250 * 3600            # 303, 304; 305's two scavenger runs count 0
    assert teams["beta"]["share_used"] == round(beta_usage / (alpha_usage + beta_usage), 3)
    assert teams["beta"]["gpu_hours_share"] > teams["beta"]["share_used"]  # its GPU-hours include the free runs


@pytest.mark.parametrize("price, refused", [(0.005, True), (0.0099, True), (0, False), (0.01, False)])
def test_a_price_below_one_billing_unit_is_refused_it_would_bill_nothing(two_types, tmp_path, price, refused):
    """Slurm's billing counts whole hundredths of the currency per hour: 0.005 a GPU-hour would bill every
    job 0. 0 (free) and 0.01 are taken."""
    from kiln.inventory.monitoring_checks import SMALLEST_PRICE
    assert SMALLEST_PRICE == 1 / billing.UNITS
    root = tmp_path / "inv"
    shutil.copytree(two_types, root)
    (root / "group_vars" / "all" / "prices.yml").write_text(f"kiln_usage_gpu_hour_prices: {{gpu_a: {price}, gpu_c: {price}}}\n")
    cluster, errors = validate(root)
    said = [str(e) for e in errors if "less than one hundredth" in str(e)]
    assert bool(said) == refused, errors
    if refused:
        assert "prices.yml" in said[0] and "kiln_usage_gpu_hour_prices.gpu_a" in said[0] and "billed 0" in said[0]
    else:
        assert cluster is not None, errors
