"""The VM tier's cluster made as an operator makes one (README, VM nodes): the inventory first, images
of the compute node type and of the controller built from it as qcow2 disks, the VMs booted from them,
one first deploy, every compute VM idle in Slurm and a job across them. Used by the VM tier's shared
fixture (tests/vm/conftest.py) and by ``python -m tests.vm.first_deploys`` (first deploys in a row)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from kiln.testbed.testbed import Testbed
from tests.testbed.slurm_helpers import deploy_json, kiln, ok, on, wait_for

VM_NAME = "kilnvm"
VM_NODES = 3  # 1 controller + 2 compute
# The VMs' OS: Debian 12 in CI; KILN_TEST_VM_OS=debian13 runs the whole tier on Debian 13 (cgroup v2 on its
# own kernel, the storage and fabric roles) by hand.
VM_OS = os.environ.get("KILN_TEST_VM_OS", "debian12")


def build_image(inventory: Path, *target: str) -> str:
    out = kiln("image", "build", "-i", str(inventory), *target, "--format", "qcow2", "--json", timeout=1800)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)["images"][0]["name"]


def build_images(tb: Testbed, inventory: Path) -> tuple[str, str]:
    tb.inventory = inventory
    tb.write_inventory(VM_NODES, inventory)
    return (build_image(inventory, "--node-type", "testbed_compute"),
            build_image(inventory, "--group", "slurm_controller"))


def first_deploy(tb: Testbed, inventory: Path, images: tuple[str, str]) -> dict:
    """Boot fresh VMs from ``images`` (nothing of an earlier run's disks or Slurm state), deploy once,
    wait for every compute VM idle in sinfo and run a job across them. Returns the seconds of each
    step and the deploy's JSON; the deploy's own failure is raised with its output."""
    tb.images = images
    started = time.monotonic()
    tb.up(VM_NODES, inventory_dir=inventory, images=images, fresh=True)
    booted = time.monotonic()
    # The isolation gate after a deploy is proven on the nspawn tier (tests/testbed/test_isolation.py); under
    # emulation it would add about 50 s to every run of this tier
    rc, data, text = deploy_json(inventory, "--no-isolation-gate")
    deployed = time.monotonic()
    assert rc == 0, text
    nodes = [n.name for n in tb.recorded_nodes()]
    tb.controller, tb.computes = nodes[0], nodes[1:]
    try:
        wait_for(lambda: on(tb, tb.controller, "sinfo -h -N -o '%N %T'").stdout.count("idle") == len(tb.computes),
                 timeout=180, interval=3, what="every compute VM idle in sinfo")
    except AssertionError as timed_out:
        # Say why: the node states with their reasons, and the compute VMs' slurmd logs.
        why = on(tb, tb.controller, "sinfo -N -o '%N %T %E'; scontrol show nodes | grep -E 'NodeName|State|Reason'").stdout
        logs = "".join(on(tb, n, "journalctl -u slurmd --no-pager -n 30").stdout for n in tb.computes)
        raise AssertionError(f"{timed_out}\n{why}\n{logs}") from None
    ok(tb, tb.controller, f"srun -N{len(tb.computes)} hostname", timeout=180)
    done = time.monotonic()
    return {"boot": booted - started, "deploy": deployed - booted, "idle_and_job": done - deployed,
            "deploy_json": data}
