"""The files the testbed writes into a new node's disk before it first boots."""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING

from kiln.testbed import simulate
from kiln.testbed.inventory import GPUS_PER_NODE

if TYPE_CHECKING:
    from kiln.testbed.nspawn import Node
    from kiln.testbed.testbed import Testbed

SHARED_DIR = "/srv/kiln-shared"

# apt-cacher-ng (3.7 in Debian 12) races when several clients make it refresh the same index file in
# the same second ("cannot create .../InRelease.<seconds> - errno: File exists") and the losing
# clients wait forever. On the testbed, `apt-get update` therefore takes a lock in the directory
# every node shares, so index refreshes run one node at a time (about a second each, from the
# cache); package downloads and installs stay fully concurrent. Testbed nodes only.
APT_GET_WRAPPER = f"""#!/bin/sh
# Written by kiln's testbed: serialise index refreshes across nodes (see kiln/testbed/node_files.py).
for arg in "$@"; do
  if [ "$arg" = update ]; then
    exec flock --timeout 600 {SHARED_DIR}/.kiln-apt-update.lock /usr/bin/apt-get "$@"
  fi
done
exec /usr/bin/apt-get "$@"
"""
# VMs share the directory over virtio-9p, where QEMU grants every lock: mkdir (atomic on the host's
# file system) is the lock there; one left by a VM that lost power is taken over after 10 minutes.
APT_GET_WRAPPER_VM = f"""#!/bin/sh
# Written by kiln's testbed: serialise index refreshes across VMs (see kiln/testbed/node_files.py).
for arg in "$@"; do
  if [ "$arg" = update ]; then
    lock={SHARED_DIR}/.kiln-apt-update.lockdir
    i=0
    until mkdir "$lock" 2>/dev/null; do
      i=$((i+1)); [ $i -gt 600 ] && break
      sleep 1
    done
    /usr/bin/apt-get "$@"; status=$?
    rmdir "$lock" 2>/dev/null
    exit $status
  fi
done
exec /usr/bin/apt-get "$@"
"""

# Testbed container nodes only (never in an image): on a host with the hybrid cgroup layout (Debian
# 12's), the node's own v1 freezer and devices cgroups remounted writable early in boot, before Slurm's
# proctrack/cgroup and ConstrainDevices need them. On a unified hierarchy (Debian 13 nodes, VMs) there is nothing to remount
# and the unit does nothing.
CGROUP_RW_UNIT = """[Unit]
Description=kiln: make this node's freezer and devices cgroups writable (container nodes, hybrid cgroups)
DefaultDependencies=no
After=sys-fs-cgroup.mount
Before=sysinit.target
ConditionPathIsDirectory=/sys/fs/cgroup/freezer

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=-/bin/mount -o remount,bind,rw /sys/fs/cgroup/freezer
ExecStart=-/bin/mount -o remount,bind,rw /sys/fs/cgroup/devices
"""
# ... pulled in by sysinit.target through a drop-in (a regular file: node files are written, not linked)
CGROUP_RW_WANTED = "[Unit]\nWants=kiln-cgroup-rw.service\n"


def node_files(testbed: "Testbed", node: "Node", nodes: list["Node"], host_key: tuple[str, str]) -> dict[str, tuple[str, int]]:
    """The files a new node gets before its first boot: hostname, address, host key, root's key, apt proxy,
    stand-in GPU device files and the tool simulators on compute nodes."""
    hosts = "127.0.0.1 localhost\n::1 localhost ip6-localhost\n" + "".join(
        f"{n.address} {n.name}\n" for n in nodes)
    files = {}
    if node.role == "compute" or len(nodes) == 1:
        # Stand-in GPU device files (NVIDIA's major 195) so slurmd can start with GPU GRES; there is
        # no GPU behind them. /dev is rebuilt at each boot, so tmpfiles.d makes them every boot.
        files["/etc/tmpfiles.d/kiln-testbed-gpus.conf"] = ("".join(
            f"c /dev/nvidia{i} 0666 root root - 195:{i}\n" for i in range(GPUS_PER_NODE)), 0o644)
        if simulate.available():
            # VMs have a real RDMA stack (soft-RoCE): only the GPU tools are simulated there
            files |= simulate.simulator_files(fabric=testbed.node_kind != "vm")
    network = f"[Network]\nAddress={node.address}/{node.prefix}\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n"
    if testbed.node_kind == "vm":
        from kiln.image.outputs import FSTAB
        from kiln.testbed.vm import mac_address
        files |= {
            # the testbed's NIC by its MAC (the disk's own DHCP file matches any other NIC)
            "/etc/systemd/network/10-kiln-testbed.network": (
                f"[Match]\nMACAddress={mac_address(testbed.name, node.name)}\n\n{network}", 0o644),
            "/etc/fstab": (FSTAB + f"kilnshared {SHARED_DIR} 9p trans=virtio,version=9p2000.L,nofail,x-mount.mkdir 0 0\n", 0o644),
            "/usr/local/sbin/apt-get": (APT_GET_WRAPPER_VM, 0o755),
        }
    else:
        files |= {
            "/etc/machine-id": (hashlib.md5(f"{testbed.name}/{node.name}/{time.time()}".encode()).hexdigest() + "\n", 0o444),
            "/etc/systemd/network/10-kiln-host0.network": (f"[Match]\nName=host0\n\n{network}", 0o644),
            "/usr/local/sbin/apt-get": (APT_GET_WRAPPER, 0o755),
            "/etc/systemd/system/kiln-cgroup-rw.service": (CGROUP_RW_UNIT, 0o644),
            "/etc/systemd/system/sysinit.target.d/kiln-cgroup-rw.conf": (CGROUP_RW_WANTED, 0o644),
        }
    return files | {
        "/etc/hostname": (f"{node.name}\n", 0o644),
        "/etc/hosts": (hosts, 0o644),
        "/etc/ssh/ssh_host_ed25519_key": (host_key[0], 0o600),
        "/etc/ssh/ssh_host_ed25519_key.pub": (host_key[1], 0o644),
        "/etc/ssh/sshd_config.d/80-kiln.conf": ("HostKey /etc/ssh/ssh_host_ed25519_key\nUseDNS no\n"
                                                "PermitRootLogin prohibit-password\n", 0o644),
        "/root/.ssh/authorized_keys": (testbed.key.with_suffix(".pub").read_text(), 0o600),
        # No HTTP pipelining through the proxy: pipelined requests are where apt and
        # apt-cacher-ng can wait on each other for minutes when many nodes fetch at once.
        "/etc/apt/apt.conf.d/80kiln-proxy": (f'Acquire::http::Proxy "{testbed.proxy.url}";\n'
                                             'Acquire::http::Pipeline-Depth "0";\n', 0o644),
    }
