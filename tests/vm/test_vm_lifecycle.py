"""The vm kind's lifecycle holds what the nspawn kind's does: strict host keys, power loss with every
disk kept and the VM powered on again by kiln-remediate through the testbed's BMC, recovery from a crashed
supervisor, and nothing left on the host after ``down``."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from kiln.testbed.host import read_pid
from kiln.testbed.inventory import REMEDIATION
from tests.testbed.slurm_helpers import job_state, kiln, ok, on, submit, wait_for
from tests.testbed.test_remediation import JOURNAL, SILENCE_EVENTS
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


def _remediation_on(vms) -> None:
    """kiln-remediate on the controller VM (off in the VM tier until now: its tests break nodes on purpose),
    looking every 5 s with a 5 s settle; the tests after this one break nothing."""
    path = vms.inventory / "group_vars" / "all" / "testbed.yml"
    data = yaml.safe_load(path.read_text())
    data["kiln_remediation"] = {**REMEDIATION, "interval_seconds": 5, "settle_seconds": 5}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    out = kiln("deploy", "-i", str(vms.inventory), "--roles", "remediation")
    assert out.returncode == 0, out.stdout + out.stderr


def _journal(vms, node: str) -> list[dict]:
    lines = ok(vms, vms.controller, f"cat {JOURNAL} 2>/dev/null || true").splitlines()
    return [e for e in map(json.loads, lines) if e.get("node") == node and e["event"] not in SILENCE_EVENTS
            and e["event"] != "held"]


@pytest.mark.proves("remediation", tier="vm")
def test_a_vm_that_loses_power_is_powered_on_through_its_bmc_keeps_its_disk_and_a_job_needing_both_then_runs(vms):
    """A compute VM loses power (its QEMU killed): Slurm has it down, kiln-remediate's restart of slurmd
    finds no SSH session, so it powers the VM on through its BMC (the testbed's Redfish endpoint, whose
    power for a VM is QEMU's); the VM boots from its own disk (every disk kept, no other VM rebooted), its
    checks pass, kiln-remediate returns it, and a job that needs both compute VMs, submitted after the loss,
    runs."""
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
    _remediation_on(vms)
    for n in [vms.controller, *vms.computes]:
        ok(vms, n, f"echo before-power-loss-{n} > /var/tmp/kiln-marker && sync")
    others = {n: ok(vms, n, "cat /proc/sys/kernel/random/boot_id").strip() for n in [vms.controller, vms.computes[1]]}
    before = len(_journal(vms, node))
    lost_at = time.monotonic()
    vms.power_loss(node)
    assert {n["name"]: n["state"] for n in vms.status()["nodes"]}[node] == "stopped"
    wait_for(lambda: "down" in _sinfo(vms, node), timeout=180, interval=3, what=f"Slurm to see {node} DOWN")
    down_at = time.monotonic()
    job = submit(vms, vms.controller, f"-N {len(vms.computes)} -t 5 --wrap 'srun hostname'")
    try:
        episode = wait_for(lambda: (lambda ev: ev if ev and ev[-1]["event"] in ("returned", "escalated") else None)(
            _journal(vms, node)[before:]), timeout=720, interval=3,
            what=f"kiln-remediate powering {node} on through its BMC and returning it")
    finally:  # never leave the VM off for the tests after this one
        if {n["name"]: n["state"] for n in vms.status()["nodes"]}[node] == "stopped":
            vms.start(node)
    back_at = time.monotonic()
    for e in episode:
        print(f"  +{e['t'] - episode[0]['t']:6.1f} s  {e['event']:13} {e.get('step', '')} {e.get('result', '')} "
              f"{e.get('reset_type', '')} {str(e.get('detail', e.get('why', '')))[:90]}")
    assert episode[0]["check"] == "SLURM_NOT_RESPONDING", episode
    assert [e["step"] for e in episode if e["event"] == "step"] == ["restart:slurmd", "power_cycle"], episode
    assert [e["result"] for e in episode if e["event"] == "result"] == ["unreachable", "ok"], episode
    assert [e["reset_type"] for e in episode if e["event"] == "power_cycled"] == ["On"], episode
    assert not [e for e in episode if e["event"] == "escalated"], episode
    wait_for(lambda: job_state(vms, vms.controller, job) in ("RUNNING", "COMPLETED"), timeout=300, interval=2,
             what=f"job {job} on both compute VMs")
    ran_at = time.monotonic()
    for n, boot_id in others.items():
        assert ok(vms, n, "cat /proc/sys/kernel/random/boot_id").strip() == boot_id, f"{n} was rebooted"
    for n in [vms.controller, *vms.computes]:
        assert ok(vms, n, "cat /var/tmp/kiln-marker").strip() == f"before-power-loss-{n}"
    ok(vms, node, "systemctl is-active slurmd munge")
    print(f"{node} lost power: down in Slurm after {down_at - lost_at:.0f} s, powered on by kiln-remediate through "
          f"its BMC and back in service after {back_at - lost_at:.0f} s; the job needing both compute VMs "
          f"running {ran_at - lost_at:.0f} s after the loss")


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
