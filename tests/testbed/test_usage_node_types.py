"""A job across two node types, live on the shared testbed (#44): one compute node becomes a second node
type of two GPUs (its simulated hardware re-initialized with two, the inventory given the type in the
same partition at the same price), and a job holding both GPUs of it and two of a four-GPU node is billed
by Slurm what kiln's weights make of each node's part, summed: kiln usage charges that billing, and
lists the job under both types. The node is a four-GPU node of the testbed's one type again after."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone

import yaml

from kiln.inventory import load_cluster
from kiln.testbed import simulate
from kiln.testbed.inventory import GPUS_PER_NODE, SIM_GPU_MODEL, SIM_HCAS, SIM_NVLINKS, SIM_RATE, VERSIONS_BY_OS
from kiln.versions import upstream
from kiln.usage import billing
from tests.testbed.slurm_helpers import deploy_json, job_state, kiln, ok, on, wait_for
from tests.testbed.test_usage import PRICE, _sacct_runs, _submit

HALF = "testbed_half"  # the second node type: the testbed's compute node with two GPUs instead of four


def _with_two_types(tb, dest, node: str):
    """A copy of the shared inventory (same secrets) where ``node`` is of the node type HALF: two GPUs,
    in the batch partition beside testbed_compute, priced the same (kiln refuses one partition of two prices)."""
    shutil.copytree(tb.inventory, dest)
    hosts_file = dest / "hosts.yml"
    hosts = yaml.safe_load(hosts_file.read_text())
    types = hosts["all"]["children"]["compute"]["children"]
    types[HALF] = {"hosts": {node: types["testbed_compute"]["hosts"].pop(node)}}
    hosts_file.write_text(yaml.safe_dump(hosts, sort_keys=False))
    shape = yaml.safe_load((dest / "group_vars" / "testbed_compute.yml").read_text())
    (dest / "group_vars" / f"{HALF}.yml").write_text(yaml.safe_dump({**shape, "kiln_gpu_count": 2}, sort_keys=False))
    settings_file = dest / "group_vars" / "all" / "testbed.yml"
    settings = yaml.safe_load(settings_file.read_text())
    settings["kiln_secrets_dir"] = str((tb.inventory.parent / "secrets").resolve())
    settings["kiln_slurm_partitions"] = [{**p, "groups": [*p["groups"], HALF]} if p["name"] == "batch" else p
                                         for p in settings["kiln_slurm_partitions"]]
    settings["kiln_usage_gpu_hour_prices"] = {**settings["kiln_usage_gpu_hour_prices"], HALF: PRICE}
    settings_file.write_text(yaml.safe_dump(settings, sort_keys=False))
    return dest


def _simulated_gpus(tb, node: str, gpus: int) -> None:
    """The node's simulated hardware made anew, healthy, with ``gpus`` GPUs (as the testbed does at boot)."""
    command = simulate.init_command(gpus, SIM_GPU_MODEL, upstream(VERSIONS_BY_OS[tb.node_os]["nvidia_driver"]),
                                    SIM_NVLINKS, SIM_HCAS, SIM_RATE)
    ok(tb, node, "rm -f /etc/kiln-sim/state.json && " + command[-1])


def _idle(tb, nodes: list[str]) -> bool:
    out = on(tb, tb.controller, "sinfo -h -N -o '%N %T'").stdout.split("\n")
    states = dict(line.split() for line in out if line.strip())
    return all(states.get(n) == "idle" for n in nodes)


def test_a_job_across_two_node_types_is_billed_per_node_and_charged_that_billing(slurm, tmp_path):
    tb = slurm
    full, half = tb.computes[0], tb.computes[-1]
    two_types = _with_two_types(tb, tmp_path / "two-types", half)
    cluster = load_cluster(two_types)
    try:
        _simulated_gpus(tb, half, 2)
        rc, _, text = deploy_json(two_types)
        assert rc == 0, text
        node_line = ok(tb, tb.controller, f"scontrol show node {half} | grep -o 'Gres=[^ ]*'").strip()
        assert node_line.startswith("Gres=gpu:") and node_line.split(":")[-1].split("(")[0] == "2", node_line
        wait_for(lambda: _idle(tb, [full, half]), timeout=120, interval=2, what=f"{full} and {half} idle")
        since = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
        # language's limit is four GPUs: two on each node, one CPU each (a GPU's share is the largest part)
        job = _submit(tb, "bob", "language", f"-N2 -w {full},{half} --ntasks-per-node=1 -c 1 "
                                             "--gpus-per-node=2 --mem=100M", 15)
        wait_for(lambda: job_state(tb, tb.controller, job) == "COMPLETED", timeout=180, interval=2,
                 what=f"job {job} across {full} and {half} completed")
        until = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
        run = next(r for r in _sacct_runs(tb, since, until) if r["job"] == job)
        assert run["gpus"] == 4 and run["cpus"] == 2, run
        # kiln's weights, per node: two GPUs on a four-GPU node and both of a two-GPU node, each at the one price
        per_node = (billing.expected(2, 1, 100, cluster.node_types["testbed_compute"], PRICE)
                    + billing.expected(2, 1, 100, cluster.node_types[HALF], PRICE))
        assert per_node == 4 * PRICE * billing.UNITS
        assert run["billing"] == per_node, run  # Slurm billed the job what each node's part costs
        out = kiln("usage", "-i", str(two_types), "--since", since, "--until", until, "--json")
        assert out.returncode == 0, out.stdout + out.stderr
        row = next(r for r in json.loads(out.stdout)["top_cost_jobs"] if r["job"] == job)
        assert row["charged_by"] == "billing", row
        assert abs(row["cost"] - round(billing.cost(run["billing"], run["seconds"]), 2)) <= 0.01, row
        assert sorted(row["node_types"]) == sorted(["testbed_compute", HALF]), row
    finally:
        _simulated_gpus(tb, half, GPUS_PER_NODE)
        rc, _, text = deploy_json(tb.inventory)
        assert rc == 0, text
        wait_for(lambda: _idle(tb, tb.computes), timeout=120, interval=2, what="every compute node idle again")
