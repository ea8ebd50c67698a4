"""Op lists of the kerberos role for every supported OS, from recorded facts (no connection): the controller
runs the KDC (kept stopped until configured, its database made once, every principal's key from kiln's
secrets through a file in /run, never a command line); the NFS server gets its nfs/ keytab and gssproxy; an
NFS client its host/ keytab, each user's keytab for gssproxy, rpc.gssd told to ask gssproxy, and a wait for
the KDC's ticket; a node that mounts nothing with Kerberos gets none of it.

The expected lists live in tests/plan/expected/kerberos-<os>.json (KILN_UPDATE_PLANS=1 regenerates them).
"""

from __future__ import annotations

import shutil
from dataclasses import replace

import pytest
import yaml

from kiln import kerberos_keys
from kiln.inventory import load_cluster
from roles.platform import PLATFORMS
from tests.conftest import INVENTORIES
from tests.plan.facts import fresh
from tests.plan.harness import SECRETS, assert_reviewed, plan_host, role_ops
from tests.plan.test_roles_plan import SLURM

PASSWORDS = {"nfs/nas1@STORAGE": "plan-nfs-password-0123456789abcdefghijklmno",
             "host/cpu01@STORAGE": "plan-cpu01-password-0123456789abcdefghijklm",
             "host/cpu02@STORAGE": "plan-cpu02-password-0123456789abcdefghijklm",
             "alice@STORAGE": "plan-alice-password-0123456789abcdefghijklm"}
REALM = kerberos_keys.RealmKeys("STORAGE", PASSWORDS)


def _cluster(tmp_path, os: str = "debian12"):
    inv = tmp_path / "inv"
    shutil.copytree(INVENTORIES / "storage", inv)
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    nas = hosts["all"]["children"]["storage_servers"]["hosts"]["nas1"]
    nas["kiln_storage_nfs_exports"][0]["options"] += ",sec=krb5p"
    nas.pop("kiln_storage_gluster_volumes")  # Rocky's repositories carry no GlusterFS server
    nas["kiln_storage_backports_kernel"] = True  # krb5p from Debian 12 (the other OSes ignore it)
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts))
    cpu = yaml.safe_load((inv / "group_vars" / "cpu.yml").read_text())
    cpu["kiln_storage_mounts"][0]["options"] += ",sec=krb5p"
    cpu["kiln_storage_mounts"] = [m for m in cpu["kiln_storage_mounts"] if m["type"] == "nfs"]
    (inv / "group_vars" / "cpu.yml").write_text(yaml.safe_dump(cpu))
    cluster = load_cluster(inv)
    return replace(cluster, versions=dict(cluster.versions, slurm=SLURM[os]))


def _plan(cluster, host, os, monkeypatch, with_context=False):
    return plan_host(cluster, host, os, fresh(os), monkeypatch, with_context=with_context,
                     secrets=replace(SECRETS, kerberos=REALM))


def _ours(plan) -> list:
    return role_ops(plan, "kerberos:")


@pytest.mark.parametrize("os", sorted(PLATFORMS))
@pytest.mark.proves(tier="plan", plan="kerberos-{os}.json")
def test_kerberos_op_list_matches_the_reviewed_one(os, tmp_path, monkeypatch):
    cluster = _cluster(tmp_path, os)
    actual = {name: _ours(_plan(cluster, name, os, monkeypatch)) for name in ("ctl1", "nas1", "cpu01", "gpu01")}
    assert actual["gpu01"] == []  # mounts nothing with Kerberos
    assert not any(pw in c for ops in actual.values() for _, cmds in ops for c in cmds for pw in PASSWORDS.values())
    assert_reviewed(f"kerberos-{os}", actual)


def test_the_kdc_is_masked_before_its_install_and_takes_the_passwords_from_a_private_file(tmp_path, monkeypatch):
    plan, ctx = _plan(_cluster(tmp_path), "ctl1", "debian12", monkeypatch, with_context=True)
    names = [op for op, _ in _ours(plan)]
    assert names.index("kerberos: the KDC kept stopped until configured") < names.index("kerberos: the KDC")
    ops = dict(_ours(plan))
    uploaded = ops["kerberos: the principals' passwords for this run (in /run)"]
    assert uploaded[0].startswith("umask 077") and "chmod 600" in uploaded[-1]  # never readable, not for an instant
    assert "trap 'rm -f /run/kiln-kadmin-principals' EXIT" in ops["kerberos: the KDC's database and kiln's principals"][0]
    assert not any(f.path == "/etc/krb5.keytab" for f in ctx.files)  # the KDC mounts and serves nothing here


def test_a_client_gets_its_host_key_each_users_key_and_rpc_gssd_asks_gssproxy(tmp_path, monkeypatch):
    plan, ctx = _plan(_cluster(tmp_path), "cpu01", "debian12", monkeypatch, with_context=True)
    files = {f.path: f for f in ctx.files}
    keytab = files["/etc/krb5.keytab"]
    assert keytab.secret and keytab.mode == "600"
    assert [e[0] for e in kerberos_keys.read_keytab(keytab.content)] == ["host/cpu01@STORAGE"]
    alice = files["/var/lib/kiln/krb5-users/alice.keytab"]
    assert kerberos_keys.read_keytab(alice.content)[0][3] == REALM.key("alice@STORAGE")
    assert "use-gss-proxy=1" in files["/etc/nfs.conf.d/kiln-kerberos.conf"].content.decode()
    ops = dict(_ours(plan))
    assert "id -u alice" in ops["kerberos: each user's keytab where gssproxy finds it (by uid)"][0]
    assert "kinit -k -t /etc/krb5.keytab" in ops["kerberos: this host's key gets a ticket from the KDC"][0]
    server = _plan(_cluster(tmp_path / "b"), "nas1", "debian12", monkeypatch, with_context=True)[1]
    assert [e[0] for e in kerberos_keys.read_keytab(next(f for f in server.files if f.path == "/etc/krb5.keytab")
                                                    .content)] == ["nfs/nas1@STORAGE"]


@pytest.mark.parametrize("os", ["debian12", "debian13"])
def test_a_debian_12_server_of_krb5p_takes_debians_backports_kernel_alone(os, tmp_path, monkeypatch):
    plan = _plan(_cluster(tmp_path, os), "nas1", os, monkeypatch)
    kernel = [cmds for op, cmds in plan if op == "storage_server: Debian's bookworm-backports kernel (runs from the next boot)"]
    if os != "debian12":
        assert kernel == []  # its own kernel serves krb5p
        return
    # the kernel alone from backports (-t bookworm-backports took systemd 254 along in an image build)
    assert kernel == [["apt-get update -q", "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "
                       "linux-image-amd64/bookworm-backports"]]


def test_a_mount_naming_its_flavour_is_made_again_when_mounted_with_another_and_one_without_never(tmp_path, monkeypatch):
    plan = _plan(_cluster(tmp_path), "cpu01", "debian12", monkeypatch)
    again = [op for op, _ in plan if op.startswith("storage:") and "again (mounted with another security flavour)" in op]
    # /home names sec=krb5p; /datasets names none (an NFSv4 client takes what the server offers: any is its own)
    assert again == ["storage: mount /home again (mounted with another security flavour)"]
