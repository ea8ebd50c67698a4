"""The vm kind's lifecycle holds what the nspawn kind's does: strict host keys, power loss with every
disk kept, recovery from a crashed supervisor, and nothing left on the host after ``down``."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

from kiln.testbed.host import read_pid
from tests.testbed.slurm_helpers import ok, on, wait_for
from tests.testbed.test_lifecycle import leftovers


def _sinfo(tb, node: str) -> str:
    return on(tb, tb.controller, f"sinfo -h -n {node} -o %T").stdout.strip()


def test_strict_host_keys_accept_the_vm_key_and_refuse_a_changed_one(vms, tmp_path):
    node = vms.computes[0]
    assert ok(vms, node, "hostname").strip() == node
    wrong = tmp_path / "known_hosts"
    key = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True)
    assert key.returncode == 0
    kind, blob = (tmp_path / "k.pub").read_text().split()[:2]
    address = next(n.address for n in vms.recorded_nodes() if n.name == node)
    wrong.write_text(f"{node},{address} {kind} {blob}\n")
    out = subprocess.run(["ssh", "-F", str(vms.ssh_config), "-o", f"UserKnownHostsFile={wrong}", "-o", "ControlMaster=no",
                          "-o", "ControlPath=none", node, "true"], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "REMOTE HOST IDENTIFICATION HAS CHANGED" in out.stderr, out.stderr


def test_power_loss_keeps_the_vm_disk_and_up_boots_only_that_vm(vms):
    node = vms.computes[0]
    # in service first (a drained node that stops answering shows as drained*, not down); the storage tests
    # before this one stop and restart the NFS server, and a client can take minutes to recover from that
    # (its retries back off), during which its health check drains it
    try:
        wait_for(lambda: _sinfo(vms, node) == "idle", timeout=240, interval=3, what=f"{node} idle before the test")
    except AssertionError as late:
        why = on(vms, vms.controller, f"sinfo -h -n {node} -o '%T %E'").stdout.strip()
        log = on(vms, node, "journalctl -t kiln-node-check --no-pager -n 10 -o short-monotonic").stdout
        raise AssertionError(f"{late}\n{node}: {why}\n{log}") from None
    for n in [vms.controller, *vms.computes]:
        ok(vms, n, f"echo before-power-loss-{n} > /var/tmp/kiln-marker && sync")
    others = {n: ok(vms, n, "cat /proc/sys/kernel/random/boot_id").strip() for n in [vms.controller, vms.computes[1]]}
    vms.power_loss(node)
    assert {n["name"]: n["state"] for n in vms.status()["nodes"]}[node] == "stopped"
    wait_for(lambda: "down" in _sinfo(vms, node), timeout=120, interval=3, what=f"Slurm to see {node} DOWN")
    vms.up(len(vms.recorded_nodes()), inventory_dir=vms.inventory, images=vms.images)
    for n, boot_id in others.items():
        assert ok(vms, n, "cat /proc/sys/kernel/random/boot_id").strip() == boot_id, f"{n} was rebooted"
    for n in [vms.controller, *vms.computes]:
        assert ok(vms, n, "cat /var/tmp/kiln-marker").strip() == f"before-power-loss-{n}"
    ok(vms, node, "systemctl is-active slurmd munge")
    wait_for(lambda: _sinfo(vms, node) == "idle", timeout=240, interval=3, what=f"{node} back in service")


def test_up_recovers_a_vm_whose_supervisor_was_killed_without_rebooting_it(vms):
    """A dead supervisor is kiln's failure, not the machine's: ``up`` gives the running VM a new supervisor
    (it adopts its QEMU), the guest runs on with the same boot, and it stays in service."""
    node = next(n for n in vms.recorded_nodes() if n.name == vms.computes[1])
    boot_id = ok(vms, node.name, "cat /proc/sys/kernel/random/boot_id").strip()
    os.kill(read_pid(node.dir / "supervisor.pid"), signal.SIGKILL)  # QEMU runs on, an orphan
    assert {n["name"]: n["state"] for n in vms.status()["nodes"]}[node.name] == "orphaned"
    vms.up(len(vms.recorded_nodes()), inventory_dir=vms.inventory, images=vms.images)
    # up (systemd's own word for the guest: running, or degraded where a unit of its own failed)
    assert {n["name"]: n["state"] for n in vms.status()["nodes"]}[node.name] in ("running", "degraded")
    assert ok(vms, node.name, "cat /proc/sys/kernel/random/boot_id").strip() == boot_id, "the VM was rebooted"
    assert ok(vms, node.name, "cat /var/tmp/kiln-marker").strip() == f"before-power-loss-{node.name}"
    assert "adopted" in (node.dir / "supervisor.log").read_text()
    wait_for(lambda: _sinfo(vms, node.name) == "idle", timeout=240, interval=3, what=f"{node.name} in service")


def test_down_leaves_nothing_of_the_vms_behind(vms):
    forward = Path("/proc/sys/net/ipv4/ip_forward").read_text()
    rules = _rules()
    assert leftovers(vms), "the VMs should be visible while up"
    vms.down(inventory_dir=vms.inventory)
    assert leftovers(vms) == []
    assert not [p for p in Path("/sys/class/net").iterdir() if p.name.startswith("kt-")]
    assert not vms.proxy.running()
    assert Path("/proc/sys/net/ipv4/ip_forward").read_text() == forward
    assert _rules() == rules


def _rules() -> list[str]:
    """The host's firewall rules (none where iptables is not installed), without iptables-save's dated
    comments and packet counters."""
    import shutil
    if shutil.which("iptables-save") is None:
        return []
    out = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    return [re.sub(r" \[\d+:\d+\]$", "", line) for line in out.splitlines() if not line.startswith("#")]
