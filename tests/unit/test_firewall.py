"""kiln's host firewall (kiln_firewall; roles/firewall_rules.py, roles/firewall.py): the zones and ways in
each role gets, the inventory values it refuses, slurm.conf's SrunPortRange, the rules nft itself loads,
and SYSTEM_FIREWALL read from nft's own listing of them."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from checks import system, zones
from checks.parsers.nft import input_policy
from kiln.deploy.firewall_confirm import confirm_argv
from kiln.inventory import load_cluster
from kiln.inventory.validate import validate
from roles import firewall_rules, slurm_config
from roles.firewall_rules import allows, probes, ruleset, zones as zones_of
from tests.conftest import REPO

HOSTS = """all:
  children:
    slurm_controller:
      hosts:
        ctl01: {ansible_host: 10.10.0.2}
    slurm_dbd:
      hosts:
        ctl01:
    monitoring:
      hosts:
        ctl01:
    login:
      hosts:
        login01: {ansible_host: 10.10.0.3}
    storage_servers:
      hosts:
        nfs01: {ansible_host: 10.10.0.4}
    compute:
      children:
        gpu_h100:
          hosts:
            hgx001: {ansible_host: 10.10.1.1}
            hgx002: {ansible_host: 10.10.1.2}
        gpu_l40s:
          hosts:
            l40s01: {ansible_host: "2001:db8::11"}
"""
ENABLED = "kiln_firewall:\n  enabled: true\n  admin_networks: [192.0.2.0/24]\n"


def _inventory(tmp_path: Path, firewall: str = ENABLED, hosts: str = HOSTS) -> Path:
    inventory = tmp_path / "inv"
    shutil.copytree(REPO / "inventory" / "example", inventory)
    (inventory / "hosts.yml").write_text(hosts)
    (inventory / "group_vars" / "all" / "firewall.yml").write_text(firewall)
    versions = inventory / "group_vars" / "all" / "versions.yml"  # the monitoring group's pins (Ubuntu's)
    versions.write_text(versions.read_text() + '  prometheus: "2.31.2+ds1-1ubuntu1.22.04.3"\n'
                        '  alertmanager: "0.23.0+ds-1ubuntu0.22.04.2"\n  node_exporter: "1.3.1-1ubuntu0.22.04.3"\n')
    return inventory


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    return load_cluster(_inventory(tmp_path_factory.mktemp("fw")))


def _ways(cluster, name: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {a.why: (a.ports, a.sources) for a in allows(cluster, cluster.hosts[name])}


def test_each_host_is_in_the_zones_of_its_groups(cluster):
    assert zones_of(cluster.hosts["ctl01"]) == ["management"]
    assert zones_of(cluster.hosts["login01"]) == ["access"]
    assert zones_of(cluster.hosts["hgx001"]) == ["computing"]
    assert zones_of(cluster.hosts["nfs01"]) == ["data storage"]


def test_a_compute_node_lets_in_slurm_the_other_compute_nodes_and_ssh_from_where_it_is_needed(cluster):
    ways = _ways(cluster, "hgx001")
    assert ways["SSH: operators and kiln"] == ("22", ("192.0.2.0/24", "10.10.0.2"))
    assert ways["SSH: users' sessions on their jobs' nodes (pam_slurm_adopt)"] == ("22", ("10.10.0.3",))
    assert ways["slurmd"] == ("6818", ("10.10.0.2", "10.10.0.3"))
    everything = ways["the jobs' own traffic and slurmd's fan-out between compute nodes"]
    assert everything == ("", ("10.10.1.2", "2001:db8::11"))  # all ports, from the other compute nodes only
    assert ways["srun and salloc (SrunPortRange)"][0] == "60001-63000"
    assert ways["node_exporter"] == ("9100", ("10.10.0.2",)) and ways["dcgm-exporter"] == ("9400", ("10.10.0.2",))
    # nothing of the management zone's own daemons: no slurmctld, slurmdbd, MariaDB, Prometheus rule
    assert not {"slurmctld", "Prometheus and Alertmanager"} & set(ways)
    assert not any("slurmdbd" in why for why in ways)


def test_the_controller_lets_in_slurmctld_from_every_slurm_host_and_slurmdbd_never_from_compute(cluster):
    ways = _ways(cluster, "ctl01")
    assert set(ways["slurmctld"][1]) == {"10.10.0.2", "10.10.0.3", "10.10.1.1", "10.10.1.2", "2001:db8::11"}
    dbd = next(v for k, v in ways.items() if k.startswith("slurmdbd"))
    assert dbd == ("6819", ("10.10.0.2", "10.10.0.3"))  # slurmctld and sacct here, sacct on the login host
    assert ways["Prometheus and Alertmanager"] == ("9090", ("192.0.2.0/24", "10.10.0.2"))
    assert "3306" not in {ports for ports, _ in ways.values()}  # MariaDB: slurmdbd on its own host only
    assert "SSH: users" not in ways


def test_login_hosts_take_users_ssh_and_storage_servers_their_clients(cluster):
    assert _ways(cluster, "login01")["SSH: users"] == ("22", ("0.0.0.0/0", "::/0"))
    ways = _ways(cluster, "nfs01")
    assert ways["NFS (v4)"][0] == "2049" and "10.10.1.1" in ways["NFS (v4)"][1]
    assert ways["GlusterFS bricks"][0] == "49152-49251"


def test_rules_name_each_family_apart_and_end_in_a_logged_drop(cluster):
    text = ruleset(cluster, cluster.hosts["hgx001"])
    assert "policy drop;" in text and 'log prefix "kiln-firewall drop: "' in text
    assert "ip saddr { 10.10.1.2 } accept" in text and "ip6 saddr { 2001:db8::11 } accept" in text
    assert "ip saddr { 10.10.0.2, 10.10.0.3 } tcp dport 6818 accept" in text
    assert text.index("table inet kiln\ndelete table inet kiln\n") < text.index("policy drop")  # one transaction


def test_srun_ports_are_fixed_in_slurm_conf_only_while_the_firewall_is_on(cluster, tmp_path):
    assert "SrunPortRange=60001-63000" in slurm_config.slurm_conf(cluster)
    off = load_cluster(_inventory(tmp_path, firewall="kiln_firewall: {enabled: false}\n"))
    assert "SrunPortRange" not in slurm_config.slurm_conf(off)


@pytest.mark.parametrize("firewall, hosts, key, words", [
    ("kiln_firewall: {enabled: true}\n", HOSTS, "kiln_firewall", "admin_networks is required"),
    ("kiln_firewall: {enabled: true, admin_networks: [10.0.0.1/24]}\n", HOSTS, "kiln_firewall.admin_networks",
     "host bits set"),
    ("kiln_firewall: {enabled: true, admin_networks: ['10.0.0.0/24 accept']}\n", HOSTS,
     "kiln_firewall.admin_networks", "not an IP network"),
    ("kiln_firewall: {enabled: true, admin_networks: [\"10.0.0.0/24\\n\"]}\n", HOSTS, "kiln_firewall.admin_networks",
     ""),
    ("kiln_firewall: {enabled: true, admin_networks: [10.0.0.0/8], confirm_seconds: 5}\n", HOSTS,
     "kiln_firewall.confirm_seconds", ""),
    (ENABLED, HOSTS.replace("{ansible_host: 10.10.1.2}", "{ansible_host: hgx002.example.org}"), "ansible_host",
     "is a name"),
    (ENABLED, HOSTS.replace("{ansible_host: 10.10.1.2}", "{ansible_host: 10.10.1.2, kiln_storage_mounts: [{path: /data, "
                            "type: nfs, source: '10.10.0.4:/data', options: 'rw,hard,vers=3'}]}"), "kiln_storage_mounts",
     "NFSv4's port 2049 only"),
])
def test_bad_firewall_values_are_refused_naming_the_file_and_key(tmp_path, firewall, hosts, key, words):
    errors = validate(_inventory(tmp_path, firewall, hosts))[1]
    found = [e for e in errors if e.key.startswith(key)]
    assert found, [f"{e.file}: {e.key}: {e.message}" for e in errors]
    assert words in found[0].message and found[0].file.endswith((".yml", ".yaml"))


def test_the_confirmation_runs_on_a_connection_of_its_own_with_strict_host_keys(cluster, tmp_path):
    argv = confirm_argv(cluster.hosts["hgx001"], tmp_path)
    assert argv[:3] == ["ssh", "-o", "ControlMaster=no"]
    assert "StrictHostKeyChecking=yes" in argv and argv[-1] == "/usr/local/sbin/kiln-firewall-apply confirm"


def test_system_firewall_fails_on_each_fault_it_targets():
    loaded = "table inet kiln {\n\tchain input {\n\t\ttype filter hook input priority filter; policy drop;\n\t}\n}\n"
    confirmed = "kiln-firewall-confirmed\n"
    assert system.firewall(loaded + confirmed).severity == "ok"
    missing = system.firewall("Error: No such file or directory\nlist chain inet kiln input\n" + confirmed)
    assert missing.severity == "fail" and "not loaded" in missing.message and "No such file" in missing.message
    accept = system.firewall(loaded.replace("policy drop", "policy accept") + confirmed)
    assert accept.severity == "fail" and "policy accept" in accept.message
    # never confirmed here (kiln deploy has not got this far): a warn, so a node is not drained for it
    assert system.firewall("Error: No such file or directory\n").severity == "warn"
    # a change in progress (the rollback timer runs) is no fault
    assert system.firewall(loaded + "kiln-firewall-pending\n").severity == "ok"
    assert input_policy("") is None


NEEDS_ROOT = "loading rules needs root and nft (a network namespace of its own: the host's rules are untouched)"


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("nft") is None or shutil.which("unshare") is None,
                    reason=NEEDS_ROOT)
def test_nft_loads_every_hosts_rules_and_its_own_listing_reads_as_loaded(cluster, tmp_path):
    """Each host's file as nft itself takes it, twice (a second load replaces the table: the deploy's
    re-apply), in a throwaway network namespace; then SYSTEM_FIREWALL reads nft's listing of it."""
    for name, host in cluster.hosts.items():
        path = tmp_path / f"{name}.nft"
        path.write_text(ruleset(cluster, host))
        script = (f"nft -f {path} && nft -f {path} && nft list tables && nft list chain inet kiln input; "
                  f"echo kiln-firewall-confirmed")
        out = subprocess.run(["unshare", "-n", "sh", "-c", script], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, f"{name}: {out.stderr}"
        assert out.stdout.count("table inet kiln") == 2, out.stdout  # listed once as a table, once with the chain
        assert system.firewall(out.stdout).severity == "ok", out.stdout
    assert firewall_rules.TABLE == "kiln"


def test_each_nodes_probes_follow_the_rules(cluster):
    found = {(p["host"], p["port"]): p["allowed"] for p in probes(cluster, cluster.hosts["hgx001"])}
    assert found[("ctl01", 6817)] and not found[("ctl01", 6819)] and not found[("ctl01", 3306)]
    assert not found[("ctl01", 22)] and found[("login01", 22)]  # a login host's SSH is open to access_networks
    assert found[("hgx002", 6819)]  # another compute node: every port (nothing listens there: a reset)
    assert found[("nfs01", 2049)] and not found[("nfs01", 6817)]
    login = {(p["host"], p["port"]): p["allowed"] for p in probes(cluster, cluster.hosts["login01"])}
    assert login[("ctl01", 6819)] and login[("hgx001", 22)] and login[("hgx001", 6818)]
    assert not login[("hgx001", 9100)]  # node_exporter: the monitoring host's alone
    ipv6 = {(p["host"], p["port"]): p["allowed"] for p in probes(cluster, cluster.hosts["l40s01"])}
    assert ipv6[("hgx001", 6819)] and ipv6[("ctl01", 6817)]


def test_zones_suite_fails_naming_a_port_open_that_should_be_shut_and_one_shut_that_should_be_open():
    wanted = [{"host": "ctl01", "address": "10.0.0.2", "port": 6819, "allowed": False},
              {"host": "ctl01", "address": "10.0.0.2", "port": 6817, "allowed": True},
              {"host": "n2", "address": "10.0.0.3", "port": 6818, "allowed": True}]
    as_ruled = "kiln-probe 10.0.0.2 6819 dropped\nkiln-probe 10.0.0.2 6817 open\nkiln-probe 10.0.0.3 6818 refused\n"
    assert zones.judge(wanted, zones.parse_probes(as_ruled)).severity == "ok"
    leaky = as_ruled.replace("6819 dropped", "6819 open")
    v = zones.judge(wanted, zones.parse_probes(leaky))
    assert v.severity == "fail" and "ctl01:6819 answered" in v.message
    shut = as_ruled.replace("6817 open", "6817 dropped")
    v = zones.judge(wanted, zones.parse_probes(shut))
    assert v.severity == "fail" and "ctl01:6817 went unanswered" in v.message
    assert zones.judge(wanted, {}).severity == "fail"  # no answer at all is no pass
    assert zones.commands({"zones": {}}) == [] and zones.run(None, {"zones": {}}) == []


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("nft") is None or shutil.which("unshare") is None,
                    reason=NEEDS_ROOT)
def test_the_probe_tells_open_reset_and_dropped_apart_against_real_rules(tmp_path):
    """probe_command in a network namespace of its own: a listener, a closed port, and a port nft drops."""
    rules = tmp_path / "rules.nft"
    rules.write_text("table inet t {\n chain input {\n  type filter hook input priority filter; policy accept;\n"
                     "  tcp dport 7003 drop\n }\n}\n")
    wanted = [{"host": "h", "address": "127.0.0.1", "port": port, "allowed": port != 7003} for port in (7001, 7002, 7003)]
    ready = tmp_path / "listening"  # the listener says when it listens: a fixed sleep lost the race on a busy machine
    script = (f"ip link set lo up && nft -f {rules} && (python3 -c 'import socket,time; s=socket.socket(); "
              f"s.bind((\"127.0.0.1\", 7001)); s.listen(); open(\"{ready}\", \"w\").close(); time.sleep(20)' "
              f">/dev/null 2>&1 &) && for i in $(seq 300); do [ -e {ready} ] && break; sleep 0.1; done && "
              + zones.probe_command(wanted))
    out = subprocess.run(["unshare", "-n", "sh", "-c", script], capture_output=True, text=True, timeout=60)
    found = zones.parse_probes(out.stdout)
    assert found == {("127.0.0.1", 7001): "open", ("127.0.0.1", 7002): "refused", ("127.0.0.1", 7003): "dropped"}, out
    assert zones.judge(wanted, found).severity == "ok"


def test_a_confirmation_that_cannot_connect_says_so_and_that_the_node_puts_its_rules_back(cluster, tmp_path):
    import dataclasses
    from kiln.deploy.firewall_confirm import NEXT_STEP, confirm
    shut = dataclasses.replace(cluster.hosts["hgx001"], connection={"ssh_hostname": "127.0.0.1", "ssh_port": 1,
                                                                    "ssh_known_hosts_file": str(tmp_path / "kh")})
    why = confirm(shut, 45, timeout=30)
    assert why is not None and "Connection refused" in why and "within 45 s" in why, why
    assert "admin_networks" in NEXT_STEP.format(node="hgx001")
