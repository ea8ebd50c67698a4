"""Debian 13 end to end, on a testbed of its own (`kiln testbed up --os debian13`): the README's main job
(deploy, a job across nodes, GPU GRES, accounting, `kiln check` OK on every node, a second deploy that
changes nothing) and a rolling patch under running jobs that kills none.

Debian 13's container nodes share this host's hybrid cgroup layout: Slurm 24.11 runs there with its
cgroup/v1 plugin (its cgroup/v2 refuses any container whose /proc/self/cgroup lists v1 hierarchies);
the VM kind is where Debian 13 runs Slurm on cgroup v2. The driver rolled out is Debian's own
upgrade (trixie 550.163.01-2 -> trixie-backports 550.163.01-4~bpo13+1).

The shared Debian 12 testbed is taken down first (its five nodes' health checks would share the two
cores with this one); tests that need it come before this module (conftest.py orders them).
"""

from __future__ import annotations

import json

import pytest

from kiln.testbed.inventory import DRIVER_UPGRADES
from kiln.testbed.testbed import Testbed
from tests.testbed.conftest import quiet, require_testbed, take_down_shared_testbed, without_remediation
from tests.testbed.slurm_helpers import deploy_json, kiln, ok, on, submit, wait_for
from tests.testbed.test_patch import rollout_under_jobs

NAME = "kilnd13"
UPGRADE = DRIVER_UPGRADES["debian13"]


@pytest.fixture(scope="module")
def debian13(tmp_path_factory):
    """A 3-node Debian 13 testbed (controller + 2 compute) with kiln deployed once; down at the end."""
    require_testbed()
    take_down_shared_testbed()
    tb = Testbed(NAME, progress=quiet, node_os="debian13")
    inventory = tmp_path_factory.mktemp("inventory13") / "testbed"
    try:
        tb.up(3, inventory_dir=inventory, fresh=True)
        without_remediation(inventory)
        tb.inventory = inventory
        nodes = [n.name for n in tb.recorded_nodes()]
        tb.controller, tb.computes = nodes[0], nodes[1:]
        rc, data, text = deploy_json(inventory)
        assert rc == 0, text
        tb.first_deploy = data
        print(f"Debian 13 first deploy: {data.get('seconds', '?')} s")
        wait_for(lambda: on(tb, tb.controller, "sinfo -h -N -o '%N %T'").stdout.count("idle") == 2, timeout=90,
                 what="both Debian 13 compute nodes idle in sinfo")
        yield tb
    finally:
        tb.down(inventory_dir=inventory)


@pytest.mark.proves("base", "slurm", "slurm accounting", "gpu gres", "nvidia_driver", "storage", "health",
                    "monitoring", "kiln check", tier="nspawn", os="debian13")
def test_debian13_deploys_runs_jobs_with_gpus_and_accounting_and_every_check_passes(debian13):
    tb = debian13
    assert {h["host"]: h["status"] for h in tb.first_deploy["hosts"]} == {n: "changed" for n in [tb.controller, *tb.computes]}
    assert sorted(ok(tb, tb.controller, "grep -E '^(ID|VERSION_ID)=' /etc/os-release").split()) == ['ID=debian', 'VERSION_ID="13"']
    assert ok(tb, tb.controller, "scontrol version").split()[1].startswith("24.11.")
    assert "CgroupPlugin=cgroup/v1" in ok(tb, tb.computes[0], "cat /etc/slurm/cgroup.conf")
    # a job across both compute nodes, and one given two of a node's (stand-in) GPUs through GRES
    assert sorted(ok(tb, tb.controller, "srun -N2 hostname").split()) == sorted(tb.computes)
    devices = ok(tb, tb.controller, "srun -N1 --gres=gpu:2 sh -c 'echo $CUDA_VISIBLE_DEVICES'").strip()
    assert devices == "0,1", devices
    job = submit(tb, tb.controller, "-N1 -o /dev/null --wrap true")
    wait_for(lambda: ok(tb, tb.controller, f"sacct -n -X -P -j {job} -o State").strip() == "COMPLETED",
             timeout=60, what=f"job {job} COMPLETED in slurmdbd's accounting")
    out = kiln("check", "-i", str(tb.inventory), "--json", "-")
    report = json.loads(out.stdout)
    failed = {n: [f"{c['id']}: {c['message']}" for c in v["checks"] if c["severity"] != "ok"]
              for n, v in report["nodes"].items()}
    assert out.returncode == 0, (failed, out.stderr[-2000:])
    assert set(report["nodes"]) == {tb.controller, *tb.computes} and report["summary"]["fail"] == 0
    warned = {n: [c["id"] for c in v["checks"] if c["severity"] != "ok"] for n, v in report["nodes"].items()}
    assert not any(warned.values()), warned  # every node OK, as the README's main job ends
    compute = {c["id"] for c in report["nodes"][tb.computes[0]]["checks"]}
    assert {"GPU_COUNT", "GPU_DRIVER_VERSION", "STORAGE_MOUNTED", "SLURM_GRES", "SLURM_REGISTERED"} <= compute
    # the packages held at their pins
    assert "slurmd" in ok(tb, tb.computes[0], "apt-mark showhold").split()
    rc, again, text = deploy_json(tb.inventory)
    assert rc == 0, text
    assert {h["status"] for h in again["hosts"]} == {"no change"}, text


@pytest.mark.proves("kiln patch", tier="nspawn", os="debian13")
def test_debian13_rolling_patch_under_running_jobs_kills_none(debian13, tmp_path):
    summary = rollout_under_jobs(debian13, tmp_path, UPGRADE, debian13.computes, seconds=15)
    assert summary["nodes"] and all(r["result"] == "patched" for r in summary["nodes"].values())
