"""What the testbed boots when a node has no image of its own: the bare base of its OS (built and
cached by kiln/image/base.py), as a tree for container nodes or as a bootable qcow2 disk for VMs.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from pathlib import Path
from typing import Callable

from kiln.image.base import BASES, BaseBuildError, ensure_base, recipe_hash
from kiln.image.base import CACHE as BASES_CACHE
from kiln.testbed.host import TestbedError

CACHE = Path("/var/cache/kiln/testbed")
OSES = ("debian12", "debian13")  # what testbed nodes run (the live bases)
# Container nodes see this host's hybrid cgroup layout, whatever their OS: Debian 13's systemd 257 boots
# on it in a container, and Slurm there uses cgroup/v1 as on Debian 12. A cgroup2 hierarchy of their own
# (systemd-nspawn with SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1) boots too, but Slurm 24.11's cgroup/v2 refuses
# to start in it ("Hybrid mode is not supported"): /proc/self/cgroup lists the host's v1 hierarchies in
# every container. Slurm on cgroup v2 is the VM kind's (its own kernel).


def base_tree(os: str, progress: Callable[[str], None]) -> Path:
    for legacy in CACHE.glob("base-*"):
        shutil.rmtree(legacy, ignore_errors=True)  # the Debian 12 base as the testbed kept it before bases were per OS
    try:
        return ensure_base(os, progress)
    except BaseBuildError as exc:
        raise TestbedError(f"the {BASES[os].name} base could not be built: {exc}") from exc


# Testbed VMs have one kind of (virtual) hardware: their initramfs holds only the modules it needs,
# which makes rebuilding it (after a blacklist change) minutes faster under software emulation.
VM_INITRAMFS_CONF = "/etc/initramfs-tools/conf.d/kiln-testbed-vm.conf"
VM_INITRAMFS = "# Written by kiln's testbed: VMs of one virtual machine type\nMODULES=dep\n"


def ensure_vm_disk(os: str, progress: Callable[[str], None], proxy: str | None) -> Path:
    """The bare base of ``os`` as a bootable qcow2 disk for VM nodes (Debian's kernel added, the image
    pipeline's disk recipe: kiln/image/outputs.py), built if missing, cached beside the base."""
    from kiln.image.outputs import make_disk
    from kiln.image.store import QCOW2_VERSION
    rootfs = base_tree(os, progress)
    final = CACHE / (f"vmdisk-{os}-{recipe_hash(os)}-{QCOW2_VERSION}-"
                     f"{hashlib.sha256(VM_INITRAMFS.encode()).hexdigest()[:6]}")
    if (final / "image.qcow2").is_file():
        return final / "image.qcow2"
    for stale in CACHE.glob(f"vmdisk-{os}-*"):
        shutil.rmtree(stale, ignore_errors=True)  # an older recipe's, or a build killed half-way
    for legacy in CACHE.glob("vmdisk-[0-9a-f]*"):
        shutil.rmtree(legacy, ignore_errors=True)  # named before disks were per OS
    tmp = CACHE / f"{final.name}.tmp"
    tmp.mkdir(parents=True)
    started = time.monotonic()
    progress(f"making the {BASES[os].name} VM disk from the base (once; cached in {final})")
    make_disk(rootfs, tmp, "testbed VM disk", None, proxy, extra={VM_INITRAMFS_CONF: VM_INITRAMFS})
    tmp.rename(final)
    progress(f"VM disk made in {time.monotonic() - started:.0f} s")
    return final / "image.qcow2"
