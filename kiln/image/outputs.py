"""Outputs of a built image beyond its tree (``rootfs/``, what the testbed boots).

``tar``: ``image.tar.zst``, the tree with numeric owners, modes, xattrs and ACLs (file capabilities
survive), for diskless and PXE provisioning systems that unpack a root file system.
``qcow2``: ``image.qcow2`` and its kernel and initramfs, for VMs, Vagrant and clouds (``write_qcow2``).
"""

from __future__ import annotations

import subprocess

from kiln.image.store import OUTPUTS, StoredImage


class OutputError(RuntimeError):
    pass


def write_tar(image: StoredImage) -> None:
    target = image.path / OUTPUTS["tar"]
    tmp = target.with_name(target.name + ".tmp")
    tar = subprocess.Popen(["tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "--acls", "-C",
                            str(image.rootfs), "-cf", "-", "."], stdout=subprocess.PIPE)
    zstd = subprocess.run(["zstd", "-q", "-T0", "-3", "-f", "-o", str(tmp)], stdin=tar.stdout, capture_output=True)
    tar.stdout.close()
    if tar.wait() != 0 or zstd.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise OutputError(f"{image.name}: tar.zst failed: {zstd.stderr.decode(errors='replace').strip()[-300:]}")
    tmp.rename(target)


# The disk's own files: the root file system by label, DHCP on the first NIC (VMs and clouds give
# an address that way), a console on the serial port for a login prompt.
FSTAB = "# Written by kiln image build (qcow2)\nLABEL=kilnroot / ext4 errors=remount-ro 0 1\n"
DHCP = "# Written by kiln image build (qcow2)\n[Match]\nName=en* eth*\n\n[Network]\nDHCP=yes\n"
KERNEL_PACKAGES = ("linux-image-amd64", "initramfs-tools", "e2fsprogs")
QCOW2_FILES = ("image.qcow2", "image.vmlinuz", "image.initrd")


def write_qcow2(image: StoredImage, proxy: str | None = None) -> None:
    """``image.qcow2`` (one ext4 file system labelled kilnroot, no partition table) with the kernel
    and initramfs beside it for direct kernel boot (``-kernel image.vmlinuz -initrd image.initrd
    -append "root=LABEL=kilnroot console=ttyS0"``). An image without a kernel (a testbed image: its
    nodes share the host's) gets Debian's kernel in the disk only; the disk's kernel is recorded in
    ``qcow2.json`` beside it. Needs qemu-img (qemu-utils) and mkfs.ext4 (e2fsprogs)."""
    import json
    import shutil
    import sys

    for tool, package in (("qemu-img", "qemu-utils"), ("mkfs.ext4", "e2fsprogs")):
        if shutil.which(tool) is None:
            raise OutputError(f"{image.name}: the qcow2 output needs {tool}: apt-get install {package}")
    work = image.path / "qcow2.tmp"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        root = work / "root"
        _run(["cp", "-a", "--reflink=auto", str(image.rootfs), str(root)], "copy the tree", 600)
        if not list((root / "boot").glob("vmlinuz-*")):
            command = ["unshare", "--mount", "--propagation", "private", sys.executable, "-m", "kiln.image.chroot",
                       "--root", str(root), "--command",
                       "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
                       f"--no-install-recommends {' '.join(KERNEL_PACKAGES)} && apt-get clean"]
            if proxy:
                command[-2:-2] = ["--proxy", proxy]
            result = subprocess.run(command, capture_output=True, text=True, timeout=1800)
            if result.returncode != 0:
                raise OutputError(f"{image.name}: installing a kernel into the disk failed: "
                                  f"{(result.stderr or result.stdout).strip()[-500:]}")
        from kiln.image.build import clean
        from kiln.image.manifest import in_root
        from checks.parsers.packages import PACKAGES, kernel_packages, parse_packages
        clean(root)
        # the disk's own manifest: the image's, with the kernel it added (the drift suite reads this one)
        disk_manifest = dict(image.manifest, output="qcow2")
        disk_manifest["packages"] = parse_packages(in_root(root, PACKAGES))
        disk_manifest["kernel_packages"] = kernel_packages(disk_manifest["packages"])
        (root / "etc/kiln/image-manifest.json").write_text(json.dumps(disk_manifest, indent=1, sort_keys=True) + "\n")
        (root / "etc" / "fstab").write_text(FSTAB)
        (root / "etc" / "systemd" / "network" / "80-kiln-dhcp.network").write_text(DHCP)
        kernel = sorted((root / "boot").glob("vmlinuz-*"))[-1]
        initrd = root / "boot" / kernel.name.replace("vmlinuz-", "initrd.img-")
        if not initrd.exists():
            raise OutputError(f"{image.name}: {kernel.name} has no initramfs in /boot")
        shutil.copyfile(kernel, work / "image.vmlinuz")
        shutil.copyfile(initrd, work / "image.initrd")
        used = int(subprocess.run(["du", "-sb", str(root)], capture_output=True, text=True).stdout.split()[0])
        size_mb = used * 13 // 10 // 2**20 + 512  # room for the first boot's journal and a deploy's changes
        raw = work / "disk.raw"
        _run(["truncate", "-s", f"{size_mb}M", str(raw)], "make the disk", 60)
        _run(["mkfs.ext4", "-q", "-L", "kilnroot", "-d", str(root), str(raw)], "fill the disk (mkfs.ext4 -d)", 1800)
        _run(["qemu-img", "convert", "-O", "qcow2", str(raw), str(work / "image.qcow2")], "convert to qcow2", 1800)
        (work / "qcow2.json").write_text(json.dumps({"kernel": kernel.name.removeprefix("vmlinuz-"),
                                                     "root": "LABEL=kilnroot", "disk_mb": size_mb}) + "\n")
        for name in (*QCOW2_FILES, "qcow2.json"):
            (work / name).rename(image.path / name)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(cmd: list[str], what: str, timeout: float) -> None:
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise OutputError(f"could not {what}: {(result.stderr or result.stdout).strip()[-400:]}")
