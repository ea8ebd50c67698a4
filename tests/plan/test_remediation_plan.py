"""What the remediation role places on the controller for compute nodes that name their BMC
(``kiln_bmc``): each node's BMC in kiln-remediate's settings (address, user, how its certificate is
trusted, its system), the BMCs' password from kiln's secrets (0600, masked), a CA file by node name; and a
missing password stops the run before any node is touched."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest

from kiln.inventory import load_cluster
from kiln.inventory.remediation_schema import Bmc, Remediation
from kiln.secrets import SecretsError, load_or_create, secrets_path
from tests.conftest import INVENTORIES
from tests.plan import harness
from tests.plan.facts import fresh
from tests.plan.harness import plan_host

FINGERPRINT = ":".join(["5a"] * 32)
CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def cluster_with_bmcs(tmp_path, ipmi_node: str | None = None):
    shutil.copytree(INVENTORIES / "small", tmp_path / "site" / "inventory")
    (tmp_path / "site" / "pki").mkdir()
    (tmp_path / "site" / "pki" / "bmc-ca.pem").write_text(CA)
    cluster = load_cluster(tmp_path / "site" / "inventory")
    bmcs = {"gpu01": Bmc(host="10.9.0.11", user="kiln", fingerprint=FINGERPRINT),
            "cpu01": Bmc(host="bmc-cpu01.mgmt", port=8443, user="kiln", ca_file="../pki/bmc-ca.pem",
                         system="/redfish/v1/Systems/1")}
    if ipmi_node:
        bmcs[ipmi_node] = Bmc(protocol="ipmi", host="10.9.0.12", user="kiln", cipher_suite=3)
    hosts = {n: replace(h, settings={**h.settings, "kiln_bmc": bmcs.get(n)}) for n, h in cluster.hosts.items()}
    return replace(cluster, hosts=hosts, settings={**cluster.settings, "kiln_remediation": Remediation(enabled=True)})


def test_the_controller_gets_each_nodes_bmc_its_password_and_its_ca(tmp_path, monkeypatch):
    cluster = cluster_with_bmcs(tmp_path)
    secrets = replace(harness.SECRETS, site={**harness.SECRETS.site, "bmc.password": b"plan-bmc-password\nsecond line\n"})
    monkeypatch.setattr(harness, "SECRETS", secrets)
    plan, ctx = plan_host(cluster, "ctl1", "debian12", fresh("debian12"), monkeypatch, with_context=True)
    files = {f.path: f for f in ctx.files}
    config = json.loads(files["/etc/kiln/remediation.json"].content)
    assert config["bmc_password_file"] == "/etc/kiln/remediation/bmc.password"
    nodes = config["nodes"]
    assert nodes["gpu01"]["bmc"] == {"address": "10.9.0.11:443", "user": "kiln", "fingerprint": FINGERPRINT}
    assert nodes["cpu01"]["bmc"] == {"address": "bmc-cpu01.mgmt:8443", "user": "kiln", "system": "/redfish/v1/Systems/1",
                                     "ca_file": "/etc/kiln/remediation/bmc-ca/cpu01.pem"}
    assert "bmc" not in nodes["gpu02"]
    password = files["/etc/kiln/remediation/bmc.password"]
    assert (password.content, password.mode) == (b"plan-bmc-password\n", "600")
    assert files["/etc/kiln/remediation/bmc-ca/cpu01.pem"].content.decode() == CA
    shown = "\n".join(c for _, cmds in plan for c in cmds) + "\n".join(op for op, _ in plan)
    assert "plan-bmc-password" not in shown
    assert "ipmitool" not in shown  # every BMC speaks Redfish: no IPMI client


def test_a_bmc_without_redfish_gets_ipmi_settings_and_ipmitool_on_the_controller(tmp_path, monkeypatch):
    cluster = cluster_with_bmcs(tmp_path, ipmi_node="gpu02")
    secrets = replace(harness.SECRETS, site={**harness.SECRETS.site, "bmc.password": b"plan-bmc-password\n"})
    monkeypatch.setattr(harness, "SECRETS", secrets)
    plan, ctx = plan_host(cluster, "ctl1", "debian12", fresh("debian12"), monkeypatch, with_context=True)
    config = json.loads({f.path: f for f in ctx.files}["/etc/kiln/remediation.json"].content)
    assert config["nodes"]["gpu02"]["bmc"] == {"protocol": "ipmi", "host": "10.9.0.12", "port": 623, "user": "kiln",
                                               "cipher_suite": 3}
    shown = "\n".join(c for _, cmds in plan for c in cmds)
    assert "ipmitool" in shown and "plan-bmc-password" not in shown


def test_a_missing_bmc_password_stops_the_run_naming_the_file(tmp_path):
    cluster = cluster_with_bmcs(tmp_path)
    with pytest.raises(SecretsError, match=r"bmc.password is missing: the password of the BMC account"):
        load_or_create(cluster)
    assert not (secrets_path(cluster) / "bmc.password").exists()


def test_a_bmc_password_too_long_for_ipmi_stops_the_run_naming_the_file(tmp_path):
    """IPMI v2.0 takes at most 20 bytes of password: with an IPMI BMC in the inventory a longer one is refused
    before any node is touched (a Redfish-only cluster takes any length)."""
    for ipmi_node, refused in ((None, False), ("gpu02", True)):
        cluster = cluster_with_bmcs(tmp_path / str(ipmi_node), ipmi_node=ipmi_node)
        path = secrets_path(cluster)
        path.mkdir(parents=True, mode=0o700, exist_ok=True)
        (path / "bmc.password").write_text("a-password-of-32-characters-long\n")
        (path / "bmc.password").chmod(0o600)
        if refused:
            with pytest.raises(SecretsError, match=r"bmc.password: its first line is longer than 20 bytes"):
                load_or_create(cluster)
        else:
            assert load_or_create(cluster).site["bmc.password"].startswith(b"a-password-of-32")
