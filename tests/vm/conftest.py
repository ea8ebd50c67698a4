"""The VM tier: a small cluster of QEMU VMs (the testbed's vm kind), booted from images kiln builds.

What only a real kernel shows (cgroup v2 limits, kernel modules, the initramfs, real reboots) is tried
here. One VM cluster is shared by every test of the run: its inventory is written first, the compute
and controller images are built from it as qcow2 disks, the VMs boot from them and one deploy
configures them. They need root and QEMU; outside CI they skip, saying why; in CI a missing
prerequisite is a failure.
"""

from __future__ import annotations

import os
import shutil
import time

import pytest

from kiln.testbed.testbed import VM_TOOLS, Testbed
from tests import lanes
from tests.testbed.conftest import quiet, require_testbed, take_down_shared_testbed
from tests.vm.cluster import VM_NAME, VM_NODES, VM_OS, build_images, first_deploy


def require_vms() -> None:
    require_testbed()
    missing = [t for t in VM_TOOLS if shutil.which(t) is None]
    if missing:
        reason = f"QEMU tools missing: {', '.join(missing)} (apt-get install qemu-system-x86 qemu-utils e2fsprogs)"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the VM tier, but {reason}")
        pytest.skip(reason)


def pytest_runtest_setup(item):
    """The VM tier runs after every nspawn test and is CPU-bound under emulation: the shared nspawn testbed
    of its lane is taken down before the first VM-tier test instead of running its five nodes (Slurm, a
    health check every 10 s) beside the VMs until the run ends, and the first of lane a waits for the live
    tests of lanes b and c to end, the Vagrant cluster's last among them (tests/lanes.py)."""
    take_down_shared_testbed()
    if lanes.lane_of(item.nodeid) == "a" and not OTHER_LANES_WAITED:
        OTHER_LANES_WAITED.append(lanes.wait_for_other_lanes(item.config, item.session.items, quiet))


OTHER_LANES_WAITED: list[float] = []


@pytest.fixture(scope="session")
def vms(tmp_path_factory):
    """Three VMs (controller + 2 compute) from the cluster's own images, Slurm configured, a first job run."""
    require_vms()
    tb = Testbed(VM_NAME, progress=quiet, node_kind="vm", node_os=VM_OS)
    inventory = tmp_path_factory.mktemp("vm-inventory") / "testbed"
    started = time.monotonic()
    images = build_images(tb, inventory)
    built = time.monotonic()
    steps = first_deploy(tb, inventory, images)
    print(f"VM tier: images {built - started:.0f} s, {VM_NODES} VMs booted from them {steps['boot']:.0f} s, "
          f"deploy {steps['deploy']:.0f} s, every compute VM idle and a first job {steps['idle_and_job']:.0f} s")
    tb.first_deploy = steps["deploy_json"]
    yield tb
    tb.down(inventory_dir=inventory)
