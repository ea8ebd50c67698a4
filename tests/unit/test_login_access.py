"""Who may log in where over SSH (#46): kiln's pam_access rules per host (roles/login_access.py), a
team's login_hosts validated against the hosts where users log in, no shell for users where they do not,
and SYSTEM_LOGIN_ACCESS, which asks sshd's own PAM stack (checks/logins.py): here against the real
pam_access module reading kiln's rendered rules, in a mount namespace of its own."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from checks import logins
from kiln.check.expectations import node_expectations
from kiln.inventory import load_cluster, validate
from roles import login_access
from roles.base import account_specs
from roles.platform import PLATFORMS
from tests.conftest import INVENTORIES

PAM_ACCESS = [Path(d) / "pam_access.so" for d in ("/lib/x86_64-linux-gnu/security", "/usr/lib/x86_64-linux-gnu/security",
                                                  "/usr/lib64/security")]


def _inventory(tmp_path, login_hosts=None, operators=False, user=None) -> Path:
    """The storage inventory (a controller, a storage server, compute nodes) with a login host login1,
    vision (alice) and language (bob and bea)."""
    root = tmp_path / "inv"
    shutil.copytree(INVENTORIES / "storage", root)
    hosts = yaml.safe_load((root / "hosts.yml").read_text())
    hosts["all"]["children"]["login"] = {"hosts": {"login1": {"ansible_host": "10.0.0.9",
                                                              **({"ansible_user": user} if user else {})}}}
    (root / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    path = root / "group_vars" / "all" / "cluster.yml"
    data = yaml.safe_load(path.read_text())
    data["kiln_teams"] = [{"name": "vision", "shares": 60, "gid": 3001, "users": [{"name": "alice", "uid": 3101}]},
                          {"name": "language", "shares": 40, "gid": 3002, "users": [{"name": "bob", "uid": 3102},
                                                                       {"name": "bea", "uid": 3103}]}]
    if login_hosts is not None:
        data["kiln_teams"][1]["login_hosts"] = login_hosts
    if operators:
        data["kiln_operators"] = {"gid": 3900, "users": ["bob"], "password": False}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return root


def test_each_host_gets_its_own_rules_first_match_wins(tmp_path):
    cluster = load_cluster(_inventory(tmp_path, operators=True, user="admin"))
    login = login_access.rules(cluster, cluster.hosts["login1"])
    assert login == ["+ : root : ALL", "+ : admin : ALL", "+ : (kiln-operators) : ALL", "+ : (vision) : ALL",
                     "+ : (language) : ALL", "- : ALL : ALL"]
    for name in ("ctl1", "nas1"):  # no login host: nobody but root, kiln's user and operators
        assert login_access.rules(cluster, cluster.hosts[name]) == ["+ : root : ALL", "+ : (kiln-operators) : ALL",
                                                                    "- : ALL : ALL"]
    assert login_access.rules(cluster, cluster.hosts["gpu01"])[-1] == "+ : ALL : ALL"  # pam_slurm_adopt decides
    text = login_access.access_file(cluster, cluster.hosts["login1"])
    assert text.startswith("# Written by kiln") and text.endswith("- : ALL : ALL\n")
    small = load_cluster(INVENTORIES / "small")  # teams without a gid (no group of their own): by users' names
    assert login_access.rules(small, small.hosts["ctl1"]) == ["+ : root : ALL", "+ : ann : ALL", "+ : ben : ALL",
                                                              "- : ALL : ALL"]


def test_a_teams_login_hosts_narrow_where_it_logs_in_and_users_have_no_shell_where_they_do_not(tmp_path):
    cluster = load_cluster(_inventory(tmp_path, login_hosts=[]))
    assert login_access.rules(cluster, cluster.hosts["login1"])[-2:] == ["+ : (vision) : ALL", "- : ALL : ALL"]
    platform = PLATFORMS["debian12"]
    for name, shell in (("login1", "/bin/bash"), ("gpu01", "/bin/bash"), ("ctl1", platform.nologin),
                        ("nas1", platform.nologin)):
        _, users = account_specs(cluster, platform, cluster.hosts[name])
        assert {u["name"]: u["shell"] for u in users if not u["system"]}["alice"] == shell, name
    # kiln check asks sshd's PAM on the login host for one user of each team; on compute nodes only the teams'
    # probe accounts (none here)
    expect = node_expectations(cluster, cluster.hosts["login1"])["system"]["logins"]
    assert expect == [{"user": "alice", "team": "vision", "allowed": True},
                      {"user": "bob", "team": "language", "allowed": False}]
    assert node_expectations(cluster, cluster.hosts["gpu01"])["system"]["logins"] == []
    assert all(not e["allowed"] for e in node_expectations(cluster, cluster.hosts["ctl1"])["system"]["logins"])


def test_on_compute_nodes_each_teams_probe_account_is_asked_and_must_be_kept_out_for_want_of_a_job(tmp_path):
    """pam_slurm_adopt decides on compute nodes by the user's jobs there: the probe accounts never run one, so
    PAM must refuse them; one let in fails naming pam_slurm_adopt (what lets a user without a job in)."""
    inventory = _inventory(tmp_path)
    path = inventory / "group_vars" / "all" / "cluster.yml"
    data = yaml.safe_load(path.read_text())
    data["kiln_teams"][0]["probe_uid"] = 3191
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    cluster = load_cluster(inventory)
    expect = node_expectations(cluster, cluster.hosts["gpu01"])["system"]["logins"]
    assert expect == [{"user": "kiln-probe-vision", "team": "vision", "allowed": False, "no_job": True}]
    assert {"user": "alice", "team": "vision", "allowed": True} in \
        node_expectations(cluster, cluster.hosts["login1"])["system"]["logins"]  # a team's own user off compute nodes
    kept_out = logins.judge(expect, f"kiln-login kiln-probe-vision {logins.PAM_PERM_DENIED}\n")
    assert (kept_out.severity, kept_out.message) == ("ok", "sshd keeps out kiln-probe-vision, with no job on this node "
                                                           "(pam_slurm_adopt)")
    let_in = logins.judge(expect, "kiln-login kiln-probe-vision 0\n")
    assert let_in.severity == "fail" and let_in.message.startswith(
        "kiln-probe-vision (vision) is let in with no job on this node: pam_slurm_adopt must be in the account stack")
    assert logins.judge(expect, "").severity == "fail"  # nothing asked is nothing kept out


def test_an_operator_is_not_the_user_asked_for_a_team(tmp_path):
    cluster = load_cluster(_inventory(tmp_path, login_hosts=[], operators=True))
    expect = node_expectations(cluster, cluster.hosts["login1"])["system"]["logins"]
    assert {"user": "bea", "team": "language", "allowed": False} in expect  # bob is an operator: let in anywhere


def test_login_hosts_naming_a_host_where_users_do_not_log_in_is_refused_naming_the_key(tmp_path):
    cluster, errors = validate(_inventory(tmp_path, login_hosts=["login1", "ctl1"]))
    assert cluster is None
    assert any("cluster.yml" in str(e) and "kiln_teams[1].login_hosts[1]" in str(e) and "'ctl1'" in str(e)
               for e in errors), errors
    cluster, errors = validate(_inventory(tmp_path / "b", login_hosts=["login1;id"]))
    assert cluster is None and any("kiln_teams" in str(e) for e in errors), errors


def test_the_check_fails_on_a_user_let_in_or_kept_out_against_the_rules():
    expect = [{"user": "alice", "team": "vision", "allowed": True}, {"user": "bob", "team": "language", "allowed": False}]
    assert logins.judge(expect, "kiln-login alice 0\nkiln-login bob 6\n").severity == "ok"
    let_in = logins.judge(expect, "kiln-login alice 0\nkiln-login bob 0\n")
    assert let_in.severity == "fail" and "bob (language) is let in" in let_in.message
    kept_out = logins.judge(expect, "kiln-login alice 6\nkiln-login bob 6\n")
    assert kept_out.severity == "fail" and "alice (vision) is refused (PAM 6)" in kept_out.message
    unknown = logins.judge(expect, "kiln-login alice 10\nkiln-login bob 6\n")  # PAM_USER_UNKNOWN: not admitted
    assert unknown.severity == "fail"
    broken = logins.judge(expect, "Traceback (most recent call last):\nOSError: libpam.so.0: cannot open\n")
    assert broken.severity == "fail" and "could not be asked" in broken.message
    assert logins.command([{"user": "a'b"}]).endswith(" 'a'\"'\"'b'")  # every word quoted


def _pam_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root (a mount namespace with its own /etc/pam.d)"
    if not any(p.exists() for p in PAM_ACCESS) or shutil.which("unshare") is None:
        return "needs pam_access.so (libpam-modules) and unshare"
    return None


@pytest.mark.skipif(_pam_unavailable() is not None, reason=str(_pam_unavailable()))
def test_the_real_pam_access_reads_kilns_rules_as_the_check_expects(tmp_path):
    """kiln's rules for a login host where only one team may log in, its group made this machine's group
    65534 (nobody's), read read by the real pam_access through the check's own command: root and nobody admitted, bin
    (no team) refused; with kiln's line gone from sshd's stack, bin is let in and the check fails."""
    inventory = _inventory(tmp_path)
    path = inventory / "group_vars" / "all" / "cluster.yml"
    data = yaml.safe_load(path.read_text())
    data["kiln_teams"] = [{"name": "kilnpam", "shares": 1, "gid": 3001, "users": []}]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    cluster = load_cluster(inventory)
    rules = tmp_path / "kiln-access.conf"
    text = login_access.access_file(cluster, cluster.hosts["login1"])
    assert "+ : (kilnpam) : ALL\n" in text
    rules.write_text(text.replace("(kilnpam)", "(nogroup)"))  # a group this machine has (kiln refuses system names)
    pam = tmp_path / "pam.d"
    pam.mkdir()
    (pam / "other").write_text("".join(f"{kind} required pam_deny.so\n" for kind in ("auth", "account", "password",
                                                                                    "session")))
    stack = "account required pam_permit.so\n"
    expect = [{"user": "nobody", "team": "nogroup", "allowed": True}, {"user": "bin", "team": "none", "allowed": False}]

    def ask() -> str:
        (pam / "sshd").write_text(stack)
        out = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind {pam} /etc/pam.d && "
                              + logins.command([{"user": "root"}, *expect])], capture_output=True, text=True, timeout=60)
        return out.stdout + out.stderr

    without = ask()  # sshd's stack without kiln's line: everyone with an account is let in
    assert "kiln-login bin 0" in without and logins.judge(expect, without).severity == "fail"
    stack = login_access.PAM_LINE.replace(login_access.ACCESS_FILE, str(rules)) + "\n" + stack
    answered = ask()
    assert "kiln-login root 0" in answered and "kiln-login nobody 0" in answered, answered
    assert f"kiln-login bin {logins.PAM_PERM_DENIED}" in answered, answered
    assert logins.judge(expect, answered).severity == "ok"
