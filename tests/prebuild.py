"""Build, ahead of the tests that boot them, what the live tiers boot from: the debootstrapped bases
(Debian 12 and 13), then the VM tier's two qcow2 images and the Vagrant cluster's two boxes; first, the
older images of the suite's own clusters leave the store (``prune_test_images``).

``.ci/run`` starts this in the background before the README's test command. The bases come first, at
normal priority: the shared nspawn testbed comes up minutes into the run and waits on its base. The
VM images and boxes follow at the lowest CPU priority (nice 19): they use what the nspawn tier leaves
idle (its tests mostly wait on Slurm, timers and reboots) and take nothing from its timing. Every build
goes through kiln's own image store (``kiln.image.build``): one build at a time under its lock, and a
test that asks for an image this is still building waits for it and finds it built. The inventories are
the ones the tests write (``tests/vm/cluster.py``, ``kiln vagrant box``), so the image names, which are
digests of their recipes, are the same; a build that fails here is built again by its test, which then
reports the failure.

    python -m tests.prebuild [--bases-only]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

VAGRANT_COMPUTE = 1  # compute VMs of tests/vm/test_vagrant.py's cluster (kiln vagrant box --compute N)


def _say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


def bases() -> None:
    from kiln.image.base import ensure_base
    for os_name in ("debian12", "debian13"):
        ensure_base(os_name, _say)


def vm_images(workdir: Path) -> None:
    from kiln.testbed.testbed import Testbed
    from tests.vm.cluster import VM_NAME, VM_NODES, VM_OS, build_image
    inventory = workdir / "vm" / "testbed"
    Testbed(VM_NAME, progress=_say, node_kind="vm", node_os=VM_OS).write_inventory(VM_NODES, inventory)
    for target in (("--node-type", "testbed_compute"), ("--group", "slurm_controller")):
        _say(f"VM tier image {' '.join(target)}: {build_image(inventory, *target)}")


def vagrant_boxes(workdir: Path) -> None:
    from kiln import vagrant as vg
    from kiln.image.build import build
    from kiln.image.recipe import recipe
    from kiln.inventory.validate import load_cluster
    inventory = workdir / "vagrant"
    vg.write_inventory(inventory, VAGRANT_COMPUTE, Path(__file__).resolve().parents[1])
    cluster = load_cluster(inventory)
    for target in ("slurm_controller", vg.NODE_TYPE):
        result = build(cluster, recipe(cluster, target), ["dir", "vagrant-box"], progress=_say)
        _say(f"Vagrant box {target}: {result.name} ({'cached' if result.cached else f'{result.seconds:.0f} s'})")


# The clusters the suite builds images of (tests/testbed, tests/vm, the Vagrant cluster): their images only
TEST_CLUSTERS = ("kilntest", "kilnlb", "kilnvm", "kilnvag", "kilnd13")
KEEP = 2


def prune_test_images() -> None:
    """The store keeps the KEEP newest images of each test cluster, target and OS (never one a testbed boots
    from): a run whose roles changed builds new ones, about 5 GB, and the host's disk is the testbed nodes'
    too (a full one fires KilnDiskAlmostFull on them mid-run). Other clusters' images are left alone."""
    from kiln.image.store import ImageInUse, images, prunable, remove
    from kiln.testbed.testbed import images_in_use
    ours = [i for i in images() if i.manifest.get("cluster") in TEST_CLUSTERS]
    for image in prunable(ours, KEEP, set(images_in_use())):
        try:
            remove(image)
            _say(f"removed the older image {image.name}")
        except ImageInUse as e:
            _say(str(e))


def main(argv: list[str]) -> int:
    started = time.monotonic()
    prune_test_images()
    bases()
    _say(f"bases ready after {time.monotonic() - started:.0f} s")
    if "--bases-only" in argv:
        return 0
    os.nice(19)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="kiln-prebuild-") as tmp:
        for step in (vm_images, vagrant_boxes):
            try:
                step(Path(tmp))
            except (Exception, AssertionError) as exc:  # noqa: BLE001 - the test that boots it builds it again
                failed += 1
                _say(f"{step.__name__} failed (its tests build it again): {exc}")
    _say(f"done after {time.monotonic() - started:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
