"""The VM tier: a small cluster of QEMU VMs (the testbed's vm kind), booted from images kiln builds.

What only a real kernel shows (cgroup v2 limits, kernel modules, the initramfs, real reboots) is tried
here. One VM cluster is shared by every test of the run: its inventory is written first, the compute
and controller images are built from it as qcow2 disks, the VMs boot from them and one deploy
configures them. They need root and QEMU; outside CI they skip, saying why; in CI a missing
prerequisite is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from kiln.testbed.testbed import VM_TOOLS, Testbed
from tests.testbed.conftest import quiet, require_testbed, take_down_shared_testbed
from tests.testbed.slurm_helpers import deploy_json, kiln, ok, on, wait_for

VM_NAME = "kilnvm"
VM_NODES = 3  # 1 controller + 2 compute


def require_vms() -> None:
    require_testbed()
    missing = [t for t in VM_TOOLS if shutil.which(t) is None]
    if missing:
        reason = f"QEMU tools missing: {', '.join(missing)} (apt-get install qemu-system-x86 qemu-utils e2fsprogs)"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the VM tier, but {reason}")
        pytest.skip(reason)


def pytest_runtest_setup(item):  # noqa: ARG001 - every item here is a VM-tier test
    """The VM tier runs after every nspawn test (tests/testbed/conftest.py orders them) and is CPU-bound
    under emulation: the shared nspawn testbed is taken down before the first VM-tier test instead of
    running its five nodes (Slurm, a health check every 10 s) beside the VMs until the run ends."""
    take_down_shared_testbed()


def build_image(inventory, *target: str) -> str:
    out = kiln("image", "build", "-i", str(inventory), *target, "--format", "qcow2", "--json", timeout=1800)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)["images"][0]["name"]


@pytest.fixture(scope="session")
def vms(tmp_path_factory):
    """Three VMs (controller + 2 compute) from the cluster's own images, Slurm configured, a first job run."""
    require_vms()
    tb = Testbed(VM_NAME, progress=quiet, node_kind="vm")
    inventory = tmp_path_factory.mktemp("vm-inventory") / "testbed"
    tb.inventory = inventory
    tb.write_inventory(VM_NODES, inventory)
    started = time.monotonic()
    tb.images = (build_image(inventory, "--node-type", "testbed_compute"),
                 build_image(inventory, "--group", "slurm_controller"))
    built = time.monotonic()
    tb.up(VM_NODES, inventory_dir=inventory, images=tb.images, fresh=True)  # nothing of an earlier run's Slurm state
    booted = time.monotonic()
    rc, data, text = deploy_json(inventory)
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
    print(f"VM tier: images {built - started:.0f} s, {VM_NODES} VMs booted from them {booted - built:.0f} s, "
          f"deploy and first job {done - booted:.0f} s (from cached images to the first job: {done - built:.0f} s)")
    tb.first_deploy = data
    yield tb
    tb.down(inventory_dir=inventory)
