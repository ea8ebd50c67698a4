"""Directory identities (#46): ``kiln_directory`` and directory teams in the inventory, SSSD's configuration
kiln renders, and SYSTEM_DIRECTORY's reading of a node's getent answers (checks/directory.py)."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from checks import directory as check
from kiln.inventory import load_cluster
from kiln.inventory.directory_schema import Directory
from kiln.inventory.errors import InventoryInvalid
from kiln.tls import new_ca
from roles.directory import sssd_conf
from tests.conftest import INVENTORIES

CA_CERT, CA_KEY = new_ca("directory")
CA = CA_CERT.decode()


def directory(**changes) -> Directory:
    return Directory(**{"uris": ["ldap://ldap1.example.org"], "base_dn": "dc=example,dc=org",
                        "ca_file": "files/directory-ca.pem", **changes})


def test_sssd_reads_the_directory_over_tls_and_never_an_id_below_min_id():
    text = sssd_conf(directory(uris=["ldap://ldap1.example.org", "ldap://10.0.0.5:389"], min_id=5000))
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert "ldap_uri = ldap://ldap1.example.org,ldap://10.0.0.5:389" in lines
    assert "ldap_search_base = dc=example,dc=org" in lines
    assert {"ldap_id_use_start_tls = true", "ldap_tls_reqcert = demand", "min_id = 5000", "access_provider = permit",
            "ldap_schema = rfc2307", "cache_credentials = false", "filter_users = root"} <= set(lines)
    assert "ldap_tls_cacert = /etc/sssd/kiln-directory-ca.pem" in lines
    ldaps = sssd_conf(directory(uris=["ldaps://ldap1.example.org:636"]))
    assert "ldap_id_use_start_tls" not in ldaps and "ldap_tls_reqcert = demand" in ldaps


@pytest.mark.parametrize("field, value, said", [
    ("uris", ["http://ldap1"], "not an LDAP URI"),
    ("uris", ["ldap://ldap1/dc=x??sub"], "not an LDAP URI"),
    ("uris", ["ldap://ldap1:70000"], "out of range"),
    ("uris", ["ldap://ldap1\nldap_tls_reqcert = never"], "not an LDAP URI"),
    ("uris", ["ldap://a", "ldaps://b"], "mixes ldap:// and ldaps://"),
    ("uris", [], "at least 1"),
    ("base_dn", "dc=example,dc=org\nldap_tls_reqcert = never", "not a base DN"),
    ("base_dn", "dc=ex\\2cample", "not a base DN"),
    ("base_dn", "example.org", "not a base DN"),
    ("ca_file", "files/ca.pem; rm -rf /", "may hold only"),
    ("min_id", 0, "greater than or equal to 1000"),
])
def test_a_directory_kiln_cannot_read_safely_is_refused(field, value, said):
    with pytest.raises(ValidationError) as raised:
        directory(**{field: value})
    assert said in str(raised.value)


def test_only_the_certificates_reach_the_nodes_not_text_around_them(tmp_path):
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "directory-ca.pem").write_text("ldap_tls_reqcert = never\n" + CA + "# and after\n")
    kept = directory().ca_certificates(tmp_path / "inventory")
    assert kept == CA and "never" not in kept


@pytest.mark.parametrize("content, said", [(None, "cannot be read"), ("not a certificate\n", "is not PEM certificates"),
                                           (CA_KEY.decode() + CA, "holds a private key")])
def test_a_ca_file_without_certificates_or_with_a_key_is_refused(tmp_path, content, said):
    if content is not None:
        (tmp_path / "files").mkdir()
        (tmp_path / "files" / "directory-ca.pem").write_text(content)
    with pytest.raises(ValueError, match=said):
        directory().ca_certificates(tmp_path / "inventory")


def _inventory(tmp_path: Path, cluster_yml: str, ca: str = CA) -> Path:
    inv = tmp_path / "inv"
    shutil.copytree(INVENTORIES / "small", inv)
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "directory-ca.pem").write_text(ca)
    (inv / "group_vars" / "all" / "directory.yml").write_text(textwrap.dedent(cluster_yml))
    return inv


TEAMS = """
kiln_teams:
  - {name: alpha, shares: 70, gpu_limit: 4, users: [{name: ann, uid: 3001}]}
  - {name: gamma, shares: 30, directory: true, users: [{name: cara}, {name: cole}]}
"""


def _directory_yml() -> str:
    return yaml.safe_dump({"kiln_directory": {"uris": ["ldap://10.0.0.1"], "base_dn": "dc=example,dc=org",
                                              "ca_file": "files/directory-ca.pem"}})


def test_a_directory_team_loads_with_no_ids_of_its_own(tmp_path):
    cluster = load_cluster(_inventory(tmp_path, TEAMS + _directory_yml()))
    gamma = next(t for t in cluster.teams if t.name == "gamma")
    assert gamma.directory and gamma.has_group and gamma.gid is None and [u.uid for u in gamma.users] == [None, None]
    assert cluster.setting("directory").uris == ["ldap://10.0.0.1"] and gamma.probe() is None


def test_a_directory_teams_probe_account_is_the_directorys_and_the_isolation_suite_runs_as_it(tmp_path):
    """probe_user: a directory account kiln never makes (no local account on any node), probed like
    kiln-probe-<team> by the isolation suite on the login host."""
    from kiln.check.expectations import node_expectations
    from roles.base import account_specs
    from roles.platform import PLATFORMS
    yml = TEAMS.replace("directory: true,", "directory: true, probe_user: probe-gamma,")
    assert yml != TEAMS
    cluster = load_cluster(_inventory(tmp_path, yml + _directory_yml()))
    gamma = next(t for t in cluster.teams if t.name == "gamma")
    assert gamma.probe().name == "probe-gamma" and gamma.probe().uid is None
    for host in cluster.hosts.values():
        _, users = account_specs(cluster, PLATFORMS["debian12"], host)
        assert "probe-gamma" not in {u["name"] for u in users}, host.name
    login = next(h for h in cluster.user_logins)
    isolation = node_expectations(cluster, login)["isolation"]
    assert "probe-gamma" in isolation["probes"] and isolation["probe_teams"]["probe-gamma"] == "gamma"


@pytest.mark.parametrize("yml, key, said", [
    (TEAMS, "kiln_teams[1].directory", "sets no kiln_directory"),
    (TEAMS, "kiln_directory.ca_file", "is not PEM certificates"),
    ("""
kiln_teams:
  - {name: gamma, shares: 30, directory: true, gid: 4000, users: [{name: cara}]}
""", "kiln_teams", "leave gid unset"),
    ("""
kiln_teams:
  - {name: gamma, shares: 30, directory: true, users: [{name: cara, uid: 4001}]}
""", "kiln_teams", "leave uid unset for cara"),
    ("""
kiln_teams:
  - {name: gamma, shares: 30, users: [{name: cara}]}
""", "kiln_teams", "needs a uid for cara"),
    ("""
kiln_teams:
  - {name: alpha, shares: 70, users: [{name: cara, uid: 3001}]}
  - {name: gamma, shares: 30, directory: true, users: [{name: cara}]}
""", "kiln_teams[1].users[0].name", "one from the directory and one local"),
    (TEAMS + """
kiln_operators: {gid: 2050, users: [cara]}
""", "kiln_operators.users[0]", "comes from the directory"),
    ("""
kiln_teams:
  - {name: gamma, shares: 30, directory: true, probe_user: cara, users: [{name: cara}]}
""", "kiln_teams[0].probe_user", "the probe account 'cara' is a user of team 'gamma'"),
    ("""
kiln_teams:
  - {name: alpha, shares: 70, probe_user: probe-alpha, users: [{name: cara, uid: 3001}]}
""", "kiln_teams", "give probe_uid"),
    ("""
kiln_teams:
  - {name: alpha, shares: 70, users: [{name: cara, uid: 3001}]}
  - {name: gamma, shares: 30, directory: true, probe_user: cara, users: [{name: cole}]}
""", "kiln_teams[1].probe_user", "the probe account 'cara' is a user of team 'alpha'"),
])
def test_a_directory_team_that_cannot_work_is_refused_naming_the_file_and_key(tmp_path, yml, key, said):
    needs_directory = "sets no kiln_directory" not in said
    with pytest.raises(InventoryInvalid) as raised:
        load_cluster(_inventory(tmp_path, yml + (_directory_yml() if needs_directory else ""),
                                ca="" if said == "is not PEM certificates" else CA))
    found = [e for e in raised.value.errors if said in e.message]
    assert found, [str(e) for e in raised.value.errors]
    assert found[0].key.startswith(key) and found[0].file.endswith(".yml"), found[0]


# What getent prints through SSSD (the password field '*') and from the files, as on a Debian 12 node
USERS = {"cara": "gamma", "cole": "gamma"}
EXPECT = {"users": USERS, "groups": ["gamma"]}


def _output(sssd="active", sss_users=("cara:*:4101:4101:Cara:/home/cara:/bin/bash",
                                      "cole:*:4102:4102:Cole:/home/cole:/bin/bash"),
            seen_users=None, local_users=(), sss_groups=("gamma:*:4000:cara,cole",), seen_groups=None, local_groups=()):
    seen_users = sss_users if seen_users is None else seen_users
    seen_groups = sss_groups if seen_groups is None else seen_groups
    out = [f"{check.MARK} sssd", sssd]
    for name, lines in (("passwd-sss", sss_users), ("passwd", seen_users), ("passwd-files", local_users),
                        ("group-sss", sss_groups), ("group", seen_groups), ("group-files", local_groups)):
        out += [f"{check.MARK} {name}", *lines]
    return "\n".join(out) + "\n"


def test_the_command_asks_each_source_for_every_name():
    line = check.command(EXPECT)
    assert "getent -s sss passwd cara cole" in line and "getent -s files group gamma" in line
    assert line.startswith(f"echo {check.MARK} sssd; systemctl is-active sssd")


def test_a_node_that_sees_the_directory_passes_with_the_uids_it_sees():
    verdict = check.judge(EXPECT, _output())
    assert verdict.severity == "ok" and "cara 4101" in verdict.message and "gamma 4000" in verdict.message


def test_sssd_stopped_fails_the_node():
    verdict = check.judge(EXPECT, _output(sssd="inactive", sss_users=(), seen_users=(), sss_groups=(), seen_groups=()))
    assert verdict.severity == "fail" and "sssd is inactive" in verdict.message


def test_a_local_account_hiding_a_directory_user_fails_with_both_uids():
    local = ("cara:x:5000:5000::/home/cara:/bin/sh",)
    verdict = check.judge(EXPECT, _output(local_users=local, seen_users=local + ("cole:*:4102:4102:Cole:/home/cole:/bin/bash",)))
    assert verdict.severity == "fail"
    assert "cara (gamma) is a local account here (uid 5000, the directory's 4101)" in verdict.message


def test_a_local_group_hiding_the_teams_group_fails():
    verdict = check.judge(EXPECT, _output(local_groups=("gamma:x:6000:",), seen_groups=("gamma:x:6000:",)))
    assert verdict.severity == "fail" and "group gamma is a local group here (gid 6000, the directory's 4000)" in verdict.message


def test_nss_that_does_not_ask_sssd_fails():
    verdict = check.judge(EXPECT, _output(seen_users=(), seen_groups=()))
    assert verdict.severity == "fail" and "passwd line of /etc/nsswitch.conf needs sss" in verdict.message


def test_what_the_directory_lacks_is_a_warning_not_a_drain():
    verdict = check.judge(EXPECT, _output(sss_users=("cara:*:4101:4101:Cara:/home/cara:/bin/bash",),
                                          sss_groups=("gamma:*:4000:cara",)))
    assert verdict.severity == "warn" and "no user cole (gamma)" in verdict.message
    outside = check.judge(EXPECT, _output(sss_groups=("gamma:*:4000:cara",)))
    assert outside.severity == "warn" and "cole is not in the directory's group gamma" in outside.message


def test_a_user_whose_primary_group_is_the_team_is_in_it():
    users = ("cara:*:4101:4000:Cara:/home/cara:/bin/bash", "cole:*:4102:4000:Cole:/home/cole:/bin/bash")
    assert check.judge(EXPECT, _output(sss_users=users, sss_groups=("gamma:*:4000:",))).severity == "ok"


def test_output_without_the_marks_fails_as_unreadable():
    verdict = check.judge(EXPECT, "sh: 1: getent: not found\n")
    assert verdict.severity == "fail" and "getent: not found" in verdict.message
