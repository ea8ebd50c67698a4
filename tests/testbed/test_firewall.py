"""kiln's host firewall live on the shared testbed (kiln_firewall, #47): turned on, a compute node reaches
neither MariaDB, slurmdbd nor the controller's SSH while jobs across nodes, a batch job's own srun and
every scrape still work, every journal reaches the log host and no one but its uploader may connect
there; SYSTEM_FIREWALL fails on the node whose rules were taken away; a change that
would shut this machine's SSH out is put back by the node itself; turned off, kiln's table is gone."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from kiln.deploy.firewall_confirm import OP
from kiln.inventory import load_cluster
from tests.testbed.slurm_helpers import (copy_inventory, deploy_json, job_state, kiln, ok, on, submit, tcp_opens,
                                         wait_for)

RULES = "/etc/kiln/firewall/rules.nft"


def _fresh_ssh(tb, node: str, command: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """ssh on a new TCP connection (the testbed's ssh_config keeps a master connection, which a firewall
    lets through as established)."""
    argv = tb.ssh_command(node, [command])
    argv[1:1] = ["-o", "ControlMaster=no", "-o", "ControlPath=none", "-o", "ConnectTimeout=5"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


PROMETHEUS_TARGETS = """python3 -c '
import base64, json, ssl, urllib.request
password = open("/etc/prometheus/kiln-password").read().strip()
request = urllib.request.Request("https://{address}:9090/api/v1/targets")
request.add_header("Authorization", "Basic " + base64.b64encode(("kiln:" + password).encode()).decode())
context = ssl.create_default_context(cafile="/etc/prometheus/kiln-ca.crt")
targets = json.load(urllib.request.urlopen(request, timeout=10, context=context))["data"]["activeTargets"]
print(sum(t["health"] == "up" for t in targets), len(targets))'"""


def _up_targets(tb, address: str) -> tuple[int, int] | None:
    """(up, all) of Prometheus' targets, asked on the controller, once all are up; else None."""
    out = on(tb, tb.controller, PROMETHEUS_TARGETS.format(address=address))
    up, total = (int(x) for x in out.stdout.split()) if out.returncode == 0 and out.stdout.strip() else (0, -1)
    return (up, total) if up == total > 0 else None


def _check(inventory, suites: str, exit_code: int) -> dict:
    """kiln check's verdicts per node for ``suites``, its exit code as expected."""
    out = kiln("check", "-i", str(inventory), "--suite", suites, "--json", "-", timeout=300)
    assert out.returncode == exit_code, out.stdout[-3000:] + out.stderr[-3000:]
    return json.loads(out.stdout)["nodes"]


@pytest.mark.proves("firewall", "slurm", "monitoring", "kiln check", tier="nspawn")
def test_a_compute_node_reaches_no_database_or_controller_ssh_while_jobs_and_scrapes_work_and_a_lockout_undoes_itself(
        slurm, tmp_path):
    tb, ctl = slurm, slurm.controller
    c1, c2 = tb.computes[0], tb.computes[1]
    cluster = load_cluster(tb.inventory)
    ctl_address = cluster.hosts[ctl].address
    # this machine is the operators' network and the users' (the controller is also the login host)
    admin = [f"{tb.host_address}/32"]
    firewall = {"enabled": True, "admin_networks": admin, "access_networks": admin, "confirm_seconds": 30}
    on_inventory = copy_inventory(tb.inventory, tmp_path / "on", {"kiln_firewall": firewall})
    # before: slurmdbd, SSH and slurmctld answer a compute node (the test tells open from shut); MariaDB
    # listens on the controller's loopback only, firewall or not
    assert all(tcp_opens(tb, c1, ctl_address, port) for port in (6819, 22, 6817))
    try:
        started = time.monotonic()
        rc, data, text = deploy_json(on_inventory)
        print(f"firewall on: kiln deploy {time.monotonic() - started:.1f} s")
        assert rc == 0, text
        for node in (ctl, *tb.computes):
            ok(tb, node, f"test -f {RULES} && nft list chain inet kiln input | grep -q 'policy drop;'")
        assert "SrunPortRange=60001-63000" in ok(tb, ctl, "cat /etc/slurm/slurm.conf")

        # a compute node: no MariaDB, no slurmdbd, no SSH to the controller; slurmctld yes
        for port in (3306, 6819, 22):
            assert not tcp_opens(tb, c1, ctl_address, port), f"{c1} still reaches {ctl}:{port}"
        assert tcp_opens(tb, c1, ctl_address, 6817)
        assert _fresh_ssh(tb, ctl, "true").returncode == 0  # this machine (an admin network) still does

        # jobs: one step across every compute node from the controller, and a batch job's own srun
        names = ok(tb, ctl, f"srun -N{len(tb.computes)} -t 2 hostname", timeout=180).split()
        assert sorted(names) == sorted(tb.computes)
        job = submit(tb, ctl, "-N2 -t 2 -o /dev/null --wrap 'srun -N2 hostname'")
        wait_for(lambda: job_state(tb, ctl, job) not in ("PENDING", "RUNNING", "COMPLETING", ""), timeout=120,
                 interval=2, what=f"batch job {job} to end")
        assert job_state(tb, ctl, job) == "COMPLETED", ok(tb, ctl, f"sacct -j {job} -o JobID,State,ExitCode")

        # scrapes: every target up after the firewall (each scrape is a new connection)
        time.sleep(12)
        up, total = wait_for(lambda: _up_targets(tb, ctl_address), timeout=60, interval=3,
                             what="every Prometheus target up")
        print(f"Prometheus targets up behind the firewall: {up}/{total}")

        # the log host: every journal still arrives behind the firewall, and only the uploader may connect there
        # (a user of a node cannot write entries into its host's files on the log host)
        nodes = _check(on_inventory, "logs", 0)
        assert all(c["severity"] == "ok" for v in nodes.values() for c in v["checks"]), nodes
        for user in ("bob", "root"):
            refused = on(tb, c1, f"runuser -u {user} -- bash -c ': </dev/tcp/{ctl_address}/19532'")
            assert refused.returncode != 0 and "refused" in refused.stderr, (user, refused.stderr)
        assert on(tb, c1, f"runuser -u systemd-journal-upload -- bash -c ': </dev/tcp/{ctl_address}/19532'").returncode == 0

        # kiln check: SYSTEM_FIREWALL and every node's probes (ZONES_FIREWALL) pass; each fails on its fault
        nodes = _check(on_inventory, "system,zones", 0)
        zoned = {n: next(c for c in v["checks"] if c["id"] == "ZONES_FIREWALL") for n, v in nodes.items()}
        assert set(zoned) == {ctl, *tb.computes} and all(c["severity"] == "ok" for c in zoned.values()), zoned
        print(f"zones probes from {c1}: {zoned[c1]['message']}")
        ok(tb, ctl, "nft insert rule inet kiln input tcp dport 6819 accept")  # slurmdbd open to all
        try:
            nodes = _check(on_inventory, "zones", 1)
        finally:
            ok(tb, ctl, "systemctl restart kiln-firewall")
        failed = {n: c["message"] for n, v in nodes.items() for c in v["checks"] if c["severity"] == "fail"}
        assert set(failed) == set(tb.computes) and all(f"{ctl}:6819 answered" in m for m in failed.values()), failed
        ok(tb, c2, "nft delete table inet kiln")
        try:
            nodes = _check(on_inventory, "system", 1)
            failed = {(n, c["id"]) for n, v in nodes.items() for c in v["checks"] if c["severity"] == "fail"}
            assert failed == {(c2, "SYSTEM_FIREWALL")}, nodes
        finally:
            ok(tb, c2, "systemctl restart kiln-firewall")
        assert tcp_opens(tb, c2, ctl_address, 6817) and not tcp_opens(tb, c2, ctl_address, 6819)

        # a change that shuts this machine out: never confirmed, put back by the node itself
        before = ok(tb, c2, f"sha1sum {RULES}")
        locked = copy_inventory(tb.inventory, tmp_path / "locked", {"kiln_firewall": {
            **firewall, "admin_networks": ["192.0.2.0/24"]}})
        started = time.monotonic()
        rc, data, text = deploy_json(locked, "--limit", c2)
        assert rc != 0, text
        result = next(h for h in data["hosts"] if h["host"] == c2)
        assert result["status"] == "failed" and result["failed_operation"] == OP, result
        assert "puts its confirmed rules back" in result["error"] and "admin_networks" in result["next_step"]
        assert _fresh_ssh(tb, c2, "true", timeout=20).returncode != 0  # shut out, for now
        wait_for(lambda: _fresh_ssh(tb, c2, "true").returncode == 0, timeout=90, interval=3,
                 what=f"{c2} answering a new SSH connection again")
        print(f"locked out {c2}: back by itself {time.monotonic() - started:.0f} s after the deploy started")
        assert ok(tb, c2, f"sha1sum {RULES}") == before  # the confirmed rules are still the earlier ones
        assert "not confirmed in time" in ok(tb, c2, "journalctl -t kiln-firewall --no-pager -n 20")
    finally:
        rc, data, text = deploy_json(tb.inventory)  # the testbed's own inventory: the firewall off
        assert rc == 0, text
    for node in (ctl, *tb.computes):
        assert on(tb, node, "nft list table inet kiln").returncode != 0, node
    assert tcp_opens(tb, c1, ctl_address, 6819)
