"""Op lists of directory identities (roles/directory.py, part of the base role) for every supported OS,
from recorded facts: SSSD installed and configured where the inventory sets kiln_directory, no local
account for a directory team's users, and nothing of SSSD where it does not."""

from __future__ import annotations

import shutil

import pytest
import yaml

from kiln.inventory import load_cluster
from kiln.tls import new_ca
from roles.directory import CA_FILE, MKHOMEDIR, SSSD_CONF
from roles.platform import PLATFORMS
from tests.conftest import INVENTORIES
from tests.plan.facts import fresh
from tests.plan.harness import plan_host

CA = new_ca("directory-plan")[0].decode()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("directory")
    inv = root / "inventory"
    shutil.copytree(INVENTORIES / "small", inv)
    (root / "directory-ca.pem").write_text(CA)
    (inv / "group_vars" / "all" / "directory.yml").write_text(yaml.safe_dump({
        "kiln_directory": {"uris": ["ldap://10.0.0.1"], "base_dn": "dc=example,dc=org", "ca_file": "directory-ca.pem"},
        "kiln_teams": [{"name": "alpha", "shares": 70, "gid": 3000, "users": [{"name": "ann", "uid": 3001}]},
                       {"name": "gamma", "shares": 30, "directory": True, "users": [{"name": "cara"}]}]}))
    return load_cluster(inv)


def _commands(plan) -> str:
    return "\n".join(c for _, cmds in plan for c in cmds)


@pytest.mark.parametrize("os", sorted(PLATFORMS))
@pytest.mark.proves("base", tier="plan")
def test_sssd_is_installed_configured_and_started_and_no_local_account_is_made_for_the_directory(cluster, os, monkeypatch):
    plan, ctx = plan_host(cluster, "gpu01", os, fresh(os), monkeypatch, with_context=True)
    ops = dict(plan)
    text = _commands(plan)
    wanted = ["sssd-ldap", "libnss-sss", "libpam-sss"] if PLATFORMS[os].uses_apt else ["sssd-ldap", "sssd-client"]
    install = ops["base: SSSD (users and groups from the directory)"]
    assert all(name in " ".join(install) for name in wanted), install
    assert ops["base: sssd kept stopped until kiln configures it"] == ["systemctl mask sssd.service"]
    files = {f.path: f for f in ctx.files}
    conf = files[SSSD_CONF]
    assert conf.mode == "600" and conf.user == "root" and b"ldap_uri = ldap://10.0.0.1" in conf.content
    assert files[CA_FILE].content.decode() == CA
    assert "systemctl start sssd.service" in text and "systemctl unmask sssd.service" in text
    assert "sss_cache" not in text  # a first start: no cache to expire
    for database in ("passwd", "group"):
        assert any(c.startswith(f"echo '{database}:") and c.endswith(" files systemd sss' >> /etc/nsswitch.conf")
                   for c in ops[f"base: NSS asks SSSD for {database} entries"])
    assert any(MKHOMEDIR in c for c in ops["base: a directory user's home made at the first login"])  # jobs run here
    assert "ann" in text and "cara" not in text and "gamma" not in text  # ann's local account; none of the directory's


@pytest.mark.parametrize("os", sorted(PLATFORMS))
def test_without_a_directory_there_is_no_sssd(os, monkeypatch):
    plain = load_cluster(INVENTORIES / "small")
    plan = plan_host(plain, "gpu01", os, fresh(os), monkeypatch)
    assert not [op for op, _ in plan if "SSSD" in op or "sssd" in op]
    assert "sssd" not in _commands(plan)
