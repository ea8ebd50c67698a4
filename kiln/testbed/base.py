"""The Debian 12 base root filesystem all testbed nodes share (read-only, under each node's overlay).

Built once with debootstrap and cached outside the repository, keyed by a hash of its recipe: change
the recipe and the next ``up`` builds a new base. The build goes to a temporary directory that is
renamed into place only when complete, so a killed build never leaves a half base behind.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from pathlib import Path
from typing import Callable

from kiln.image.base import BASES, bootstrap_commands
from kiln.testbed.host import run

CACHE = Path("/var/cache/kiln/testbed")
SUITE, MIRROR = BASES["debian12"].release, BASES["debian12"].mirror
PACKAGES = BASES["debian12"].packages

# Remounts the node's own v1 freezer and devices cgroups writable early in boot, before any service
# (Slurm's proctrack/cgroup and ConstrainDevices) needs them.
CGROUP_RW_UNIT = """[Unit]
Description=kiln testbed: make this node's freezer and devices cgroups writable
DefaultDependencies=no
After=sys-fs-cgroup.mount
Before=sysinit.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=-/bin/mount -o remount,bind,rw /sys/fs/cgroup/freezer
ExecStart=-/bin/mount -o remount,bind,rw /sys/fs/cgroup/devices

[Install]
WantedBy=sysinit.target
"""

RECIPE_VERSION = "3"


# contrib too: Debian's NVIDIA driver packages depend on glx-alternative-nvidia, which lives there.
SOURCES = ("Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\n"
           "Components: main contrib non-free non-free-firmware\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
           "Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\n"
           "Components: main contrib non-free non-free-firmware\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")


def recipe_hash() -> str:
    text = "\n".join([RECIPE_VERSION, SUITE, MIRROR, *PACKAGES, CGROUP_RW_UNIT, SOURCES])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def base_dir() -> Path:
    return CACHE / f"base-{recipe_hash()}"


def ensure_base(progress: Callable[[str], None]) -> Path:
    """The base rootfs, built if missing. Returns its path."""
    final = base_dir()
    rootfs = final / "rootfs"
    if (final / "complete").exists():
        return rootfs
    CACHE.mkdir(parents=True, exist_ok=True)
    for stale in CACHE.glob("base-*.tmp"):
        shutil.rmtree(stale, ignore_errors=True)  # a build killed half-way
    tmp = CACHE / f"{final.name}.tmp"
    started = time.monotonic()
    progress(f"building the Debian 12 base with debootstrap (once; cached in {final})")
    run(["sh", "-c", bootstrap_commands("debian12", str(tmp / "rootfs"))[0]], timeout=900)
    _customize(tmp / "rootfs")
    (tmp / "complete").write_text(f"{recipe_hash()}\n")
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    for old in CACHE.glob("base-*"):
        if old != final and not old.name.endswith(".tmp"):
            shutil.rmtree(old, ignore_errors=True)  # an older recipe
    progress(f"base built in {time.monotonic() - started:.0f} s")
    return rootfs


def _customize(root: Path) -> None:
    for key in (root / "etc" / "ssh").glob("ssh_host_*"):
        key.unlink()  # each node gets its own host keys
    (root / "etc" / "machine-id").write_text("")
    unit = root / "etc" / "systemd" / "system" / "kiln-cgroup-rw.service"
    unit.write_text(CGROUP_RW_UNIT)
    wants = root / "etc" / "systemd" / "system" / "sysinit.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (wants / "kiln-cgroup-rw.service").symlink_to("/etc/systemd/system/kiln-cgroup-rw.service")
    run(["chroot", str(root), "systemctl", "enable", "systemd-networkd"])
    # No DNS in nodes and no NIC to wait for beyond host0: do not hold boot for it.
    run(["chroot", str(root), "systemctl", "mask", "systemd-networkd-wait-online.service"])
    (root / "etc" / "apt" / "sources.list").write_text("")
    (root / "etc" / "apt" / "sources.list.d" / "debian.sources").write_text(SOURCES)
    (root / "etc" / "apt" / "apt.conf.d" / "80kiln-retries").write_text(
        'Acquire::Retries "5";\nAcquire::http::Timeout "30";\nAPT::Install-Recommends "false";\n')


# Testbed VMs have one kind of (virtual) hardware: their initramfs holds only the modules it needs,
# which makes rebuilding it (after a blacklist change) minutes faster under software emulation.
VM_INITRAMFS_CONF = "/etc/initramfs-tools/conf.d/kiln-testbed-vm.conf"
VM_INITRAMFS = "# Written by kiln's testbed: VMs of one virtual machine type\nMODULES=dep\n"


def ensure_vm_disk(progress: Callable[[str], None], proxy: str | None) -> Path:
    """The bare base as a bootable qcow2 disk for VM nodes (Debian's kernel added, the image
    pipeline's disk recipe: kiln/image/outputs.py), built if missing, cached beside the base."""
    from kiln.image.outputs import make_disk
    from kiln.image.store import QCOW2_VERSION
    rootfs = ensure_base(progress)
    final = CACHE / f"vmdisk-{recipe_hash()}-{QCOW2_VERSION}-{hashlib.sha256(VM_INITRAMFS.encode()).hexdigest()[:6]}"
    if (final / "image.qcow2").is_file():
        return final / "image.qcow2"
    for stale in CACHE.glob("vmdisk-*"):
        shutil.rmtree(stale, ignore_errors=True)  # an older recipe's, or a build killed half-way
    tmp = CACHE / f"{final.name}.tmp"
    tmp.mkdir(parents=True)
    started = time.monotonic()
    progress(f"making the VM disk from the base (once; cached in {final})")
    make_disk(rootfs, tmp, "testbed VM disk", None, proxy, extra={VM_INITRAMFS_CONF: VM_INITRAMFS})
    tmp.rename(final)
    progress(f"VM disk made in {time.monotonic() - started:.0f} s")
    return final / "image.qcow2"
