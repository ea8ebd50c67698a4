"""Outputs of a built image beyond its tree (``rootfs/``, what the testbed boots).

``tar``: ``image.tar.zst``, the tree with numeric owners, modes, xattrs and ACLs (file capabilities
survive), for diskless and PXE provisioning systems that unpack a root file system.
``qcow2``: ``image.qcow2`` and its kernel and initramfs, for VMs, Vagrant and clouds (``write_qcow2``).
"""

from __future__ import annotations

import subprocess

from pathlib import Path

from kiln.image.clean import clean
from kiln.image.commands import run_step
from kiln.image.store import BOX_VERSION, OUTPUTS, QCOW2_VERSION, StoredImage


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

# A machine's own files from a seed disk (an ext4 file system labelled kilnseed holding seed-id and
# root/): copied over / early in boot whenever the seed is new to the machine, before the network,
# udev's device pass and sshd start. How the testbed gives each VM its name, address and host key; a
# machine without a seed disk boots as it is (DHCP, first-boot host keys).
SEED_SCRIPT = """#!/bin/sh
# Written by kiln image build (qcow2): apply this machine's seed disk (label kilnseed), once per seed.
set -eu
dev=""
for i in $(seq 30); do
  dev=$(blkid -L kilnseed 2>/dev/null || true)
  [ -n "$dev" ] && break
  sleep 0.1
done
[ -n "$dev" ] || { echo "kiln-seed: no seed disk"; exit 0; }
mkdir -p /run/kiln-seed
mount -o ro "$dev" /run/kiln-seed
if ! cmp -s /run/kiln-seed/seed-id /etc/kiln/seed-id; then
  cp -a /run/kiln-seed/root/. /
  mkdir -p /etc/kiln
  cp /run/kiln-seed/seed-id /etc/kiln/seed-id
  echo "kiln-seed: applied seed $(cat /etc/kiln/seed-id)"
fi
umount /run/kiln-seed
hostname "$(cat /etc/hostname)"
mount -a -t 9p 2>/dev/null || true
"""
SEED_UNIT = """[Unit]
Description=kiln: this machine's own files from its seed disk
DefaultDependencies=no
After=systemd-remount-fs.service
Before=systemd-tmpfiles-setup-dev.service systemd-tmpfiles-setup.service systemd-udev-trigger.service
Before=systemd-networkd.service ssh.service kiln-ssh-hostkeys.service sysinit.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/kiln-seed

[Install]
WantedBy=sysinit.target
"""


# Every boot, the machine's SSH host public keys on its serial console, between these lines: how a
# host that made the VM (Vagrant's libvirt console log, a cloud's console output) learns the keys out
# of band and verifies them strictly from the first connection on (kiln/vagrant.py reads them).
HOSTKEYS_BEGIN, HOSTKEYS_END = "-----BEGIN KILN SSH HOST KEYS-----", "-----END KILN SSH HOST KEYS-----"
CONSOLE_KEYS_UNIT = f"""[Unit]
Description=kiln: this machine's SSH host public keys on the console
After=kiln-ssh-hostkeys.service
Before=ssh.service

[Service]
Type=oneshot
RemainAfterExit=yes
StandardOutput=tty
TTYPath=/dev/console
ExecStart=/bin/sh -c 'echo {HOSTKEYS_BEGIN}; cat /etc/ssh/ssh_host_*_key.pub; echo {HOSTKEYS_END}'

[Install]
WantedBy=multi-user.target
"""


def write_qcow2(image: StoredImage, proxy: str | None = None) -> None:
    """``image.qcow2`` (one ext4 file system labelled kilnroot, no partition table) with the kernel
    and initramfs beside it for direct kernel boot (``-kernel image.vmlinuz -initrd image.initrd
    -append "root=LABEL=kilnroot console=ttyS0"``). An image without a kernel (a testbed image: its
    nodes share the host's) gets Debian's kernel in the disk only; the disk's kernel is recorded in
    ``qcow2.json`` beside it. Needs qemu-img (qemu-utils) and mkfs.ext4 (e2fsprogs)."""
    import shutil

    work = image.path / "qcow2.tmp"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        make_disk(image.rootfs, work, image.name, image.manifest, proxy)
        for name in (*QCOW2_FILES, "qcow2.json"):
            (work / name).rename(image.path / name)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def make_disk(tree: Path, work: Path, name: str, manifest: dict | None, proxy: str | None,
              extra: dict[str, str] | None = None, setup: str | None = None) -> None:
    """A bootable disk in ``work`` (image.qcow2, image.vmlinuz, image.initrd, qcow2.json) from a copy
    of ``tree``: Debian's kernel added where the tree has none, cleaned, fstab, DHCP, the seed unit.
    ``manifest``: the image's, written into the disk with the kernel it added (None: no manifest).
    ``extra``: more files (path -> content) written into the copy after the kernel is added;
    ``setup``: a shell command run in the copy (chroot) after that."""
    import json
    import shutil

    for tool, package in (("qemu-img", "qemu-utils"), ("mkfs.ext4", "e2fsprogs")):
        if shutil.which(tool) is None:
            raise OutputError(f"{name}: the qcow2 output needs {tool}: apt-get install {package}")
    root = work / "root"
    run_step(["cp", "-a", "--reflink=auto", str(tree), str(root)], "copy the tree", 600, OutputError)
    if not list((root / "boot").glob("vmlinuz-*")):
        _in_chroot(root, "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
                   f"--no-install-recommends {' '.join(KERNEL_PACKAGES)} && apt-get clean", proxy,
                   f"{name}: installing a kernel into the disk")
    for rel, content in (extra or {}).items():
        path = root / rel.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    if setup:
        _in_chroot(root, setup, None, f"{name}: setting up the disk")
    from kiln.image.manifest import in_root
    from checks.parsers.packages import ENABLED_UNITS, PACKAGES, kernel_packages, parse_enabled_units, parse_packages
    clean(root)
    (root / "etc" / "fstab").write_text(FSTAB)
    (root / "etc" / "systemd" / "network").mkdir(parents=True, exist_ok=True)
    (root / "etc" / "systemd" / "network" / "80-kiln-dhcp.network").write_text(DHCP)
    _install_unit(root, "kiln-seed.service", SEED_UNIT, "sysinit.target.wants")
    _install_unit(root, "kiln-console-hostkeys.service", CONSOLE_KEYS_UNIT, "multi-user.target.wants")
    script = root / "usr/local/sbin/kiln-seed"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(SEED_SCRIPT)
    script.chmod(0o755)
    if manifest is not None:
        # the disk's own manifest: the image's, with the kernel and units it added (the drift suite reads this one)
        disk_manifest = dict(manifest, output="qcow2")
        disk_manifest["packages"] = parse_packages(in_root(root, PACKAGES))
        disk_manifest["kernel_packages"] = kernel_packages(disk_manifest["packages"])
        disk_manifest["enabled_units"] = parse_enabled_units(in_root(root, ENABLED_UNITS))
        (root / "etc/kiln").mkdir(parents=True, exist_ok=True)
        (root / "etc/kiln/image-manifest.json").write_text(json.dumps(disk_manifest, indent=1, sort_keys=True) + "\n")
    kernel = sorted((root / "boot").glob("vmlinuz-*"))[-1]
    initrd = root / "boot" / kernel.name.replace("vmlinuz-", "initrd.img-")
    if not initrd.exists():
        raise OutputError(f"{name}: {kernel.name} has no initramfs in /boot")
    shutil.copyfile(kernel, work / "image.vmlinuz")
    shutil.copyfile(initrd, work / "image.initrd")
    used = int(subprocess.run(["du", "-sb", str(root)], capture_output=True, text=True).stdout.split()[0])
    size_mb = used * 13 // 10 // 2**20 + 1024  # room for the first boot's journal and a deploy's changes
    raw = work / "disk.raw"
    run_step(["truncate", "-s", f"{size_mb}M", str(raw)], "make the disk", 60, OutputError)
    run_step(["mkfs.ext4", "-q", "-L", "kilnroot", "-d", str(root), str(raw)], "fill the disk (mkfs.ext4 -d)", 1800,
             OutputError)
    run_step(["qemu-img", "convert", "-O", "qcow2", str(raw), str(work / "image.qcow2")], "convert to qcow2", 1800,
             OutputError)
    raw.unlink()
    shutil.rmtree(root)
    (work / "qcow2.json").write_text(json.dumps({"kernel": kernel.name.removeprefix("vmlinuz-"), "root": "LABEL=kilnroot",
                                                 "disk_mb": size_mb, "version": QCOW2_VERSION}) + "\n")


def _in_chroot(root: Path, command: str, proxy: str | None, what: str) -> None:
    import sys
    cmd = ["unshare", "--mount", "--propagation", "private", sys.executable, "-m", "kiln.image.chroot",
           "--root", str(root), "--command", command]
    if proxy:
        cmd[-2:-2] = ["--proxy", proxy]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        raise OutputError(f"{what} failed: {(result.stderr or result.stdout).strip()[-500:]}")


# A Vagrant box (libvirt provider): the qcow2 disk, its kernel and initramfs (booted directly: the
# disk has no bootloader), and Vagrant's well-known insecure key for root, which Vagrant replaces
# with a key of its own at the first `vagrant up`. Nothing is downloaded.
VAGRANT_KEY_GLOBS = ("/usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub",
                     "/opt/vagrant/embedded/gems/gems/vagrant-*/keys/vagrant.pub",
                     "/opt/vagrant/embedded/gems/*/gems/vagrant-*/keys/vagrant.pub")
BOX_VAGRANTFILE = """# Written by kiln image build (vagrant-box): the box's defaults.
Vagrant.configure("2") do |config|
  config.ssh.username = "root"
  config.vm.provider :libvirt do |libvirt|
    libvirt.kernel = File.join(File.dirname(__FILE__), "vmlinuz")
    libvirt.initrd = File.join(File.dirname(__FILE__), "initrd")
    libvirt.cmd_line = "root=LABEL=kilnroot ro console=ttyS0 net.ifnames=0"
    libvirt.disk_bus = "virtio"
  end
end
"""
# Vagrant logs in as root: compute nodes run pam_slurm_adopt, which refuses any other user without a
# job on the node (root is never affected).
VAGRANT_SETUP = "chmod 700 /root/.ssh && chmod 600 /root/.ssh/authorized_keys"


def vagrant_public_key() -> str:
    import glob
    for pattern in VAGRANT_KEY_GLOBS:
        for path in sorted(glob.glob(pattern)):
            return Path(path).read_text()
    raise OutputError("the vagrant-box output needs Vagrant's insecure public key from the vagrant package: "
                      "apt-get install vagrant vagrant-libvirt")


def write_vagrant_box(image: StoredImage, proxy: str | None = None) -> None:
    """``image.box``: a libvirt box of the image (Vagrant's user added in the disk only)."""
    import json
    import shutil
    import tarfile

    key = vagrant_public_key()
    work = image.path / "box.tmp"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        make_disk(image.rootfs, work, image.name, image.manifest, proxy,
                  extra={"/root/.ssh/authorized_keys": key}, setup=VAGRANT_SETUP)
        disk_gb = -(-json.loads((work / "qcow2.json").read_text())["disk_mb"] // 1024)
        (work / "metadata.json").write_text(json.dumps({"provider": "libvirt", "format": "qcow2",
                                                        "virtual_size": disk_gb}) + "\n")
        (work / "Vagrantfile").write_text(BOX_VAGRANTFILE)
        with tarfile.open(work / "image.box.tmp", "w:gz", compresslevel=1) as box:
            for arcname, name in (("metadata.json", "metadata.json"), ("Vagrantfile", "Vagrantfile"),
                                  ("box.img", "image.qcow2"), ("vmlinuz", "image.vmlinuz"), ("initrd", "image.initrd")):
                box.add(work / name, arcname=arcname)
        (work / "image.box.tmp").rename(image.path / "image.box")
        (image.path / "box.json").write_text(json.dumps({"version": BOX_VERSION}) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _install_unit(root: Path, name: str, text: str, wants: str) -> None:
    unit = root / "etc/systemd/system" / name
    unit.parent.mkdir(parents=True, exist_ok=True)
    unit.write_text(text)
    link = root / "etc/systemd/system" / wants / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to(f"/etc/systemd/system/{name}")


