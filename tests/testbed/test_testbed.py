"""The testbed's nodes are real systemd machines: distinct, reachable with strict host keys, able to
install packages through the proxy, and able to reboot themselves."""

from __future__ import annotations

import subprocess
import time

from kiln.inventory import load_cluster
from tests.testbed.conftest import NODES

# Units that may fail inside a testbed node, with the reason. Empty: a node must be "running".
ALLOWED_FAILED_UNITS: dict[str, str] = {}


def ssh(tb, node, command, **kw):
    return subprocess.run(tb.ssh_command(node, [command]), capture_output=True, text=True, timeout=120, **kw)


def test_nodes_have_distinct_hostnames_and_addresses(testbed):
    nodes = testbed.recorded_nodes()
    assert len(nodes) == NODES
    seen = {}
    for node in nodes:
        out = ssh(testbed, node.name, "hostname; ip -4 -o addr show host0")
        assert out.returncode == 0, out.stderr
        hostname, addr_line = out.stdout.splitlines()[:2]
        assert hostname == node.name
        assert f"inet {node.address}/24" in addr_line
        seen[hostname] = node.address
    assert len(set(seen)) == NODES and len(set(seen.values())) == NODES


def test_inventory_describes_the_testbed(testbed):
    cluster = load_cluster(testbed.inventory)
    names = [n.name for n in testbed.recorded_nodes()]
    assert sorted(cluster.hosts) == names
    assert [h.name for h in cluster.controllers] == [names[0]]
    assert sorted(h.name for h in cluster.compute) == names[1:]
    assert cluster.hosts[names[1]].connection["ssh_known_hosts_file"] == str(testbed.known_hosts)


def test_strict_host_keys_accept_the_real_key_and_refuse_a_changed_one(testbed, tmp_path):
    node = testbed.recorded_nodes()[1]
    ok = ssh(testbed, node.name, "true")
    assert ok.returncode == 0, ok.stderr
    # A known_hosts entry with another key for the same node must be refused.
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    kind, blob = (tmp_path / "other.pub").read_text().split()[:2]
    (tmp_path / "known_hosts").write_text(f"{node.name},{node.address} {kind} {blob}\n")
    refused = subprocess.run(
        ["ssh", "-F", str(testbed.ssh_config), "-o", f"UserKnownHostsFile={tmp_path / 'known_hosts'}",
         "-o", "ControlMaster=no", "-o", "ControlPath=none", node.name, "true"],
        capture_output=True, text=True, timeout=30)
    assert refused.returncode != 0
    assert "Host key verification failed" in refused.stderr or "IDENTIFICATION HAS CHANGED" in refused.stderr


def test_systemd_is_running_on_every_node(testbed):
    for node in testbed.recorded_nodes():
        state = ssh(testbed, node.name, "systemctl is-system-running").stdout.strip()
        failed = ssh(testbed, node.name, "systemctl --failed --no-legend --plain | cut -d' ' -f1").stdout.split()
        assert state == "running" or (state == "degraded" and set(failed) <= set(ALLOWED_FAILED_UNITS)), \
            f"{node.name}: {state}, failed units: {failed}"


def test_apt_install_through_the_proxy(testbed):
    node = testbed.recorded_nodes()[2]
    out = ssh(testbed, node.name, "apt-get update -q && apt-get install -y -q tree && tree --version")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "tree v" in out.stdout
    # Nodes have no route but the bridge: the package came through the testbed's proxy, which cached it.
    cached = list(testbed.proxy.cache.rglob("tree_*.deb"))
    assert cached, f"tree's .deb is not in the proxy cache {testbed.proxy.cache}"
    route = ssh(testbed, node.name, "ip route").stdout
    assert "default" not in route


def test_shared_directory_fuse_and_writable_freezer(testbed):
    a, b = testbed.recorded_nodes()[1:3]
    assert ssh(testbed, a.name, f"echo from-{a.name} > /srv/kiln-shared/marker").returncode == 0
    assert ssh(testbed, b.name, "cat /srv/kiln-shared/marker").stdout.strip() == f"from-{a.name}"
    assert ssh(testbed, b.name, "test -c /dev/fuse").returncode == 0
    out = ssh(testbed, b.name, "mkdir /sys/fs/cgroup/freezer/kiln-probe && rmdir /sys/fs/cgroup/freezer/kiln-probe")
    assert out.returncode == 0, out.stderr


def test_a_node_that_reboots_itself_comes_back(testbed):
    node = testbed.recorded_nodes()[1]
    before = float(ssh(testbed, node.name, "cut -d' ' -f1 /proc/uptime").stdout)
    time.sleep(max(0.0, 3 - before))
    ssh(testbed, node.name, "systemctl reboot")
    deadline = time.monotonic() + 90
    uptime = None
    while time.monotonic() < deadline:
        out = subprocess.run(["ssh", "-F", str(testbed.ssh_config), "-o", "ControlMaster=no", "-o",
                              "ControlPath=none", node.name, "cut -d' ' -f1 /proc/uptime; systemctl is-system-running"],
                             capture_output=True, text=True, timeout=20)
        lines = out.stdout.split()
        if out.returncode == 0 and lines and float(lines[0]) < before and lines[1] == "running":
            uptime = float(lines[0])
            break
        time.sleep(1)
    assert uptime is not None, "node did not come back with a fresh boot within 90 s"
    assert ssh(testbed, node.name, "hostname").stdout.strip() == node.name
