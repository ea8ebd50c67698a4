"""Encrypted node-local disks on the VM tier (roles/disk_encryption.py): each compute VM's blank local disk
(kiln/testbed/vm.py: local.qcow2, /dev/disk/by-id/virtio-kilnlocal) was made LUKS2 by the first deploy, bound
to tang on the controller VM by its key's thumbprint, and mounted at /local.

Shown here: after a reboot clevis unlocked it with no person and it is mounted; a file written through it is
nowhere in the disk's image on the host while the same bytes written to the root disk are (the disk taken
away is unreadable); with tang stopped the VM boots, the volume stays locked and unmounted, and Slurm's
health check drains the node with STORAGE_LOCKED; with tang back it unlocks, mounts and returns to service
by itself. (kiln-remediate, not deployed on this tier, holds such a node without escalating it:
tests/unit/test_disk_encryption.py.)"""

from __future__ import annotations

import time

import pytest

from kiln.testbed.inventory import ENCRYPTED_VOLUME, VM_HEALTH_CHECK_INTERVAL
from tests.testbed.slurm_helpers import ok, on, wait_for

NAME, DEVICE, PATH = ENCRYPTED_VOLUME["name"], ENCRYPTED_VOLUME["device"], ENCRYPTED_VOLUME["path"]
MARKER = "kiln-encrypted-volume-marker-"


def _boot_id(vms, node) -> str:
    return on(vms, node, "cat /proc/sys/kernel/random/boot_id", timeout=20).stdout.strip()


def _reboot(vms, node) -> float:
    """Reboot ``node`` as a person would not have to watch it: from inside, and wait until it answers SSH again."""
    before = _boot_id(vms, node)
    started = time.monotonic()
    on(vms, node, "systemctl reboot", timeout=20)
    wait_for(lambda: (_boot_id(vms, node) or before) != before, timeout=420, interval=5, what=f"{node} to boot again")
    return time.monotonic() - started


def _state(vms, node) -> tuple[str, str]:
    line = ok(vms, vms.controller, f"scontrol show node {node} -o")
    reason = line.split("Reason=")[1].split(" [")[0] if "Reason=" in line else ""
    return line.split("State=")[1].split()[0], reason


def _unlocked_by_clevis_this_boot(vms, node) -> bool:
    return "successfully" in on(vms, node, "journalctl -b -u clevis-luks-askpass.service --no-pager -o cat").stdout


def _booted_since_set_up(vms, node) -> bool:
    """Whether ``node`` booted after its first deploy set the volume up (its record's time)."""
    return on(vms, node, f"[ $(stat -c %Y /etc/kiln/encrypted-volumes/{NAME}) -lt $(date -d \"$(uptime -s)\" +%s) ]").returncode == 0


def _host_file(vms, node, name: str):
    return next(n.dir for n in vms.recorded_nodes() if n.name == node) / name


@pytest.mark.proves("disk encryption", tier="vm")
def test_a_local_disk_is_luks2_unlocked_through_tang_at_boot_and_what_is_written_through_it_is_not_on_the_disk(vms):
    node = vms.computes[-1]
    if not _booted_since_set_up(vms, node):  # the reboot test of tests/vm/test_vm.py did not run before
        print(f"{node}: rebooted in {_reboot(vms, node):.0f} s")
    wait_for(lambda: on(vms, node, f"findmnt -n -o SOURCE {PATH}").stdout.strip() == f"/dev/mapper/{NAME}",
             timeout=180, interval=3, what=f"{PATH} mounted from /dev/mapper/{NAME} after the boot")
    assert _unlocked_by_clevis_this_boot(vms, node), on(vms, node, "journalctl -b -u clevis-luks-askpass --no-pager").stdout
    dump = ok(vms, node, f"cryptsetup luksDump {DEVICE}")
    assert "Version:       \t2" in dump or "Version: 2" in " ".join(dump.split()), dump
    binding = ok(vms, node, f"clevis luks list -d {DEVICE}")
    controller_address = next(n.address for n in vms.recorded_nodes() if n.name == vms.controller)
    assert "tang" in binding and f"{controller_address}:7500" in binding, binding
    # no person typed anything: the node is in service
    assert _state(vms, node)[0].lower().startswith(("idle", "mixed", "allocated")), _state(vms, node)
    # the same bytes through the volume and onto the root disk: the root disk's image holds them, the local
    # disk's image does not
    marker = MARKER + "x" * 64
    script = f"for i in $(seq 4096); do echo {marker}$i; done"
    ok(vms, node, f"({script}) > {PATH}/secret.txt && ({script}) > /root/plain.txt && sync && "
                  f"echo 3 > /proc/sys/vm/drop_caches")
    assert ok(vms, node, f"grep -c {marker} {PATH}/secret.txt").strip() == "4096"
    local, root = _host_file(vms, node, "local.qcow2"), _host_file(vms, node, "disk.qcow2")
    assert marker.encode() not in local.read_bytes(), f"{local} holds the volume's plain text"
    with open(root, "rb") as f:
        assert any(marker.encode() in chunk for chunk in iter(lambda: f.read(1 << 26), b"")), \
            f"the control failed: {root} does not hold what was written to the root disk"
    ok(vms, node, f"rm -f {PATH}/secret.txt /root/plain.txt")


@pytest.mark.proves("disk encryption", tier="vm")
def test_with_tang_stopped_a_node_boots_stays_locked_and_drained_and_returns_by_itself_when_tang_is_back(vms):
    node = vms.computes[-1]
    try:
        ok(vms, vms.controller, "systemctl stop tangd.socket 'tangd@*.service'")
        print(f"{node}: rebooted with tang stopped in {_reboot(vms, node):.0f} s")
        # the boot went on without the volume: SSH and slurmd serve, the volume is locked and unmounted
        wait_for(lambda: on(vms, node, "systemctl is-active slurmd").stdout.strip() == "active", timeout=180,
                 interval=3, what=f"slurmd active on {node} with its volume locked")
        assert on(vms, node, f"test -e /dev/mapper/{NAME}").returncode != 0
        assert on(vms, node, f"findmnt {PATH}").returncode != 0
        started = time.monotonic()
        wait_for(lambda: "STORAGE_LOCKED" in _state(vms, node)[1], timeout=VM_HEALTH_CHECK_INTERVAL * 3 + 60,
                 interval=5, what=f"{node} drained with STORAGE_LOCKED")
        state, reason = _state(vms, node)
        print(f"{node}: {state} {reason!r} {time.monotonic() - started:.0f} s after it answered")
        assert "DRAIN" in state and reason.startswith(f"kiln: STORAGE_LOCKED {PATH}: {NAME} ({DEVICE}) locked"), reason
        assert on(vms, node, f"test -e /dev/mapper/{NAME}").returncode != 0, "unlocked with tang stopped"
    finally:
        ok(vms, vms.controller, "systemctl start tangd.socket")
    # tang back: clevis's prompt answer unlocks it, the mount follows, the health check resumes the node
    started = time.monotonic()
    wait_for(lambda: on(vms, node, f"findmnt -n -o SOURCE {PATH}").stdout.strip() == f"/dev/mapper/{NAME}",
             timeout=240, interval=5, what=f"{PATH} unlocked and mounted once tang answers")
    unlocked = time.monotonic() - started
    wait_for(lambda: _state(vms, node)[0].lower().startswith(("idle", "mixed")), timeout=VM_HEALTH_CHECK_INTERVAL * 3 + 60,
             interval=5, what=f"{node} back in service by itself")
    print(f"{node}: unlocked and mounted {unlocked:.0f} s after tang started, in service after "
          f"{time.monotonic() - started:.0f} s")
    assert ok(vms, vms.controller, f"timeout 120 srun -w {node} stat -c %m {PATH}/").strip() == PATH
