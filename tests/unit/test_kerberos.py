"""kiln's Kerberos realm without a node: the key derivation against RFC 3961/3962's vectors and a keytab MIT's
ktutil wrote, the inventory's checks of NFS with Kerberos (file and key named), the passwords kept 0600 and
reused, which hosts get which principals, and the firewall opening the KDC to the realm's hosts only."""

from __future__ import annotations

import shutil
import stat

import pytest
import yaml

from checks.parsers.mounts import options_match
from kiln import kerberos_keys as kk
from kiln.inventory import kerberos, load_cluster
from kiln.inventory.errors import InventoryInvalid
from kiln.secrets import load_or_create
from roles import firewall_rules
from roles import kerberos as role
from tests.conftest import INVENTORIES

# ktutil (MIT Kerberos 1.20.1, Debian 12): addent -password -p nfs/kilnvm01@KILN -k 1 -e aes256-cts-hmac-sha1-96
# with the password "secretpw", then wkt: the whole file (its timestamp, 0x6b169011, aside)
MIT_KEYTAB = bytes.fromhex(
    "050200000048000200044b494c4e00036e667300086b696c6e766d3031000000016b169011010012002058d0aafd396e6809648b5d0d237f"
    "7034c0bdc9fb8bcf0c38af2cb4afd132a4d100000001")


def test_n_fold_and_string_to_key_match_the_rfcs_vectors():
    # RFC 3961, appendix A.1
    assert kk.nfold(b"012345", 8).hex() == "be072631276b1955"
    assert kk.nfold(b"password", 7).hex() == "78a07b6caf85fa"
    assert kk.nfold(b"kerberos", 16).hex() == "6b65726265726f737b9b5b2b93132b93"
    assert kk.nfold(b"Rough Consensus, and Running Code", 8).hex() == "bb6ed30870b7f0e0"
    # RFC 3962, appendix B: 256-bit AES keys
    assert kk.string_to_key("password", "ATHENA.MIT.EDUraeburn", 1).hex() == \
        "fe697b52bc0d3ce14432ba036a92e65bbb52280990a2fa27883998d72af30161"
    assert kk.string_to_key("password", "ATHENA.MIT.EDUraeburn", 1200).hex() == \
        "55a6ac740ad17b4846941051e1e8b0a7548d93b0ab30a8bc3ff16280382b8c2a"


def test_the_keytab_kiln_writes_is_the_one_mit_ktutil_writes():
    principal = "nfs/kilnvm01@KILN"
    assert kk.salt(principal) == "KILNnfskilnvm01"
    mine = kk.keytab([(principal, kk.string_to_key("secretpw", kk.salt(principal)))], timestamp=0x6b169011)
    assert mine == MIT_KEYTAB
    assert kk.read_keytab(MIT_KEYTAB) == [(principal, 1, 18, bytes.fromhex(
        "58d0aafd396e6809648b5d0d237f7034c0bdc9fb8bcf0c38af2cb4afd132a4d1"))]
    two = kk.keytab([("alice@KILN", b"a" * 32), ("host/cpu01@KILN", b"b" * 32)])
    assert [(p, key) for p, _, _, key in kk.read_keytab(two)] == [("alice@KILN", b"a" * 32),
                                                                  ("host/cpu01@KILN", b"b" * 32)]


def _inventory(tmp_path, cpu_mounts=None, exports=None, extra=None, backports=True):
    inv = tmp_path / "inv"
    shutil.copytree(INVENTORIES / "storage", inv)
    cpu = yaml.safe_load((inv / "group_vars" / "cpu.yml").read_text())
    if cpu_mounts is not None:
        cpu["kiln_storage_mounts"] = cpu_mounts
    (inv / "group_vars" / "cpu.yml").write_text(yaml.safe_dump(cpu))
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    nas = hosts["all"]["children"]["storage_servers"]["hosts"]["nas1"]
    # gpu01's site filesystems need secrets of the site's (BeeGFS, Ceph): not this test's
    hosts["all"]["children"]["compute"]["children"]["gpu"]["hosts"]["gpu01"].pop("kiln_storage_mounts")
    if exports is not None:
        nas["kiln_storage_nfs_exports"] = exports
    nas["kiln_storage_backports_kernel"] = backports
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts))
    if extra:
        (inv / "group_vars" / "all" / "extra.yml").write_text(yaml.safe_dump(extra))
    return inv


HOME_KRB5P = {"path": "/srv/home", "clients": ["10.0.0.0/24"], "options": "rw,sync,no_subtree_check,sec=krb5p"}
MOUNT_KRB5P = {"path": "/home", "type": "nfs", "source": "nas1:/srv/home", "options": "rw,hard,vers=4.2,sec=krb5p"}


def _errors(inv) -> list:
    with pytest.raises(InventoryInvalid) as e:
        load_cluster(inv)
    return e.value.errors


@pytest.mark.parametrize("mount, wanted", [
    (dict(MOUNT_KRB5P, source="10.0.0.5:/srv/home"), "by address"),
    (dict(MOUNT_KRB5P, source="nas9.example.org:/srv/home"), "no host of the inventory is named"),
    (dict(MOUNT_KRB5P, source="nas1:/srv/datasets"), "exports /srv/datasets without sec=krb5"),
])
def test_a_kerberos_mount_of_a_server_kilns_kdc_holds_no_key_for_is_refused_naming_file_and_key(tmp_path, mount, wanted):
    errors = _errors(_inventory(tmp_path, cpu_mounts=[mount], exports=[HOME_KRB5P, {
        "path": "/srv/datasets", "clients": ["10.0.0.0/24"], "options": "ro,no_subtree_check"}]))
    assert [(str(e.file).rsplit("/", 1)[-1], e.key) for e in errors] == [("cpu.yml", "kiln_storage_mounts")] * 2, errors  # cpu01, cpu02
    assert wanted in errors[0].message


@pytest.mark.parametrize("options", ["rw,sec=krb5q", "rw,sec=krb5p;reboot", "rw,sec=krb5p:krb5i"])
def test_an_unknown_or_doubled_security_flavour_on_a_mount_is_refused(tmp_path, options):
    errors = _errors(_inventory(tmp_path, cpu_mounts=[dict(MOUNT_KRB5P, options=options)], exports=[HOME_KRB5P]))
    assert errors and all(e.key.startswith("kiln_storage_mounts") for e in errors), errors


def test_krb5p_from_a_debian_12_server_asks_for_the_backports_kernel_and_krb5i_does_not(tmp_path):
    errors = _errors(_inventory(tmp_path, exports=[HOME_KRB5P], cpu_mounts=[MOUNT_KRB5P], backports=False))
    assert [(str(e.file).rsplit("/", 1)[-1], e.key) for e in errors] == [("hosts.yml", "kiln_storage_nfs_exports")]
    assert "set kiln_storage_backports_kernel: true for nas1" in errors[0].message
    krb5i = [dict(HOME_KRB5P, options="rw,sec=krb5i")], [dict(MOUNT_KRB5P, options="rw,hard,sec=krb5i")]
    assert load_cluster(_inventory(tmp_path / "b", exports=krb5i[0], cpu_mounts=krb5i[1], backports=False))


def test_an_unknown_flavour_on_an_export_is_refused_and_several_known_ones_are_taken(tmp_path):
    errors = _errors(_inventory(tmp_path, exports=[dict(HOME_KRB5P, options="rw,sec=krb5p:ntlm")]))
    assert errors and "not a security flavour" in errors[0].message and "kiln_storage_nfs_exports" in errors[0].key
    cluster = load_cluster(_inventory(tmp_path / "b", exports=[dict(HOME_KRB5P, options="rw,sec=krb5p:krb5i")],
                                      cpu_mounts=[MOUNT_KRB5P]))
    assert [h.name for h in kerberos.nfs_servers(cluster.hosts)] == ["nas1"]


def test_principals_keytabs_and_the_kdc_follow_the_inventory_and_the_passwords_are_kept_0600(tmp_path):
    cluster = load_cluster(_inventory(tmp_path, cpu_mounts=[MOUNT_KRB5P], exports=[HOME_KRB5P]))
    hosts = cluster.hosts
    assert kerberos.kdc(hosts).name == "ctl1"
    assert kerberos.principals(hosts, cluster.setting("teams"), "STORAGE") == [
        "nfs/nas1@STORAGE", "host/cpu01@STORAGE", "host/cpu02@STORAGE", "alice@STORAGE"]
    assert "kerberos" in hosts["cpu01"].roles and "kerberos" in hosts["nas1"].roles
    assert "kerberos" not in hosts["gpu01"].roles  # mounts no NFS with Kerberos
    secrets = load_or_create(cluster)
    keys = secrets.kerberos
    assert keys.realm == "STORAGE" and set(keys.passwords) == {"nfs/nas1@STORAGE", "host/cpu01@STORAGE", "host/cpu02@STORAGE",
                                                            "alice@STORAGE"}
    kept = tmp_path / "secrets" / "storage" / "kerberos"
    assert stat.S_IMODE((kept / "users" / "alice").stat().st_mode) == 0o600
    assert stat.S_IMODE(kept.stat().st_mode) == stat.S_IMODE((kept / "host").stat().st_mode) == 0o700
    assert load_or_create(cluster).kerberos.passwords == keys.passwords  # made once, then read back
    password = keys.passwords["alice@STORAGE"]
    assert "********" in secrets.mask(f"kadmin: addprinc -pw {password} alice") and password not in repr(keys)
    entries = kk.read_keytab(keys.keytab("host/cpu01@STORAGE"))
    assert entries == [("host/cpu01@STORAGE", 1, 18, kk.string_to_key(keys.passwords["host/cpu01@STORAGE"],
                                                                   "STORAGEhostcpu01"))]
    (kept / "users" / "alice").write_text("short")
    with pytest.raises(Exception, match="is not a password kiln made"):
        load_or_create(cluster)


def test_the_realm_is_the_setting_or_the_cluster_name_in_capitals_and_a_bad_one_is_refused(tmp_path):
    assert kerberos.realm("gpu-a", "") == "GPU-A" and kerberos.realm("gpu-a", "HPC.EXAMPLE.ORG") == "HPC.EXAMPLE.ORG"
    errors = _errors(_inventory(tmp_path, extra={"kiln_kerberos_realm": "hpc.example.org"}))
    assert [e.key for e in errors] == ["kiln_kerberos_realm"]
    assert "[A-Z0-9]" in errors[0].message  # the pattern as it is: a lowered one would ask for what it refuses


def test_the_kdc_admits_the_realms_hosts_only_and_krb5_conf_names_it_by_address(tmp_path):
    cluster = load_cluster(_inventory(tmp_path, cpu_mounts=[MOUNT_KRB5P], exports=[HOME_KRB5P]))
    [allow] = [a for a in firewall_rules.allows(cluster, cluster.hosts["ctl1"]) if a.why.startswith("Kerberos")]
    assert allow.ports == "88" and set(allow.sources) == {cluster.hosts[h].address for h in ("nas1", "cpu01", "cpu02")}
    assert not any(a.why.startswith("Kerberos") for a in firewall_rules.allows(cluster, cluster.hosts["nas1"]))
    conf = role.krb5_conf("KILN", "fd00::2")
    assert "kdc = [fd00::2]:88" in conf and "udp_preference_limit = 1" in conf and "rdns = false" in conf
    plain = load_cluster(_inventory(tmp_path / "b"))
    assert kerberos.kdc(plain.hosts) is None and load_or_create(plain).kerberos is None
    assert not any(a.why.startswith("Kerberos") for a in firewall_rules.allows(plain, plain.hosts["ctl1"]))


def test_the_kdcs_input_sets_each_key_at_version_one_and_its_record_holds_no_password():
    keys = kk.RealmKeys("KILN", {"nfs/nas1@KILN": "p" * 43, "alice@KILN": "q" * 43})
    script = role.kadmin_script(keys)
    assert script.splitlines()[:3] == [f"addprinc -pw {'p' * 43} nfs/nas1@KILN", f"cpw -pw {'p' * 43} nfs/nas1@KILN",
                                       "modprinc -kvno 1 nfs/nas1@KILN"]
    record = role.record(keys)
    assert "p" * 43 not in record and "q" * 43 not in record and "alice@KILN " in record
    command = role.principals_command(keys, "debian")
    assert "p" * 43 not in command and "rm -f /run/kiln-kadmin-principals" in command
    assert "kdb5_util create -s -r KILN" in command


# /proc/self/mounts options of the VM tier's /nfs, seen live on a compute VM (Debian 12, kernel 6.1) mounted before
# its server asked for Kerberos
LIVE_SYS_OPTIONS = ("rw,relatime,vers=4.2,rsize=262144,wsize=262144,namlen=255,hard,proto=tcp,timeo=50,retrans=2,"
                    "sec=sys,clientaddr=10.213.172.12,local_lock=none,addr=10.213.172.11")


def test_the_storage_check_fails_an_nfs_mount_made_without_the_kerberos_flavour_the_inventory_asks_for():
    wanted = "rw,hard,vers=4.2,timeo=50,retrans=2,sec=krb5p"
    assert options_match(wanted, tuple(LIVE_SYS_OPTIONS.split(","))) == ["sec=krb5p"]
    assert options_match(wanted, tuple(LIVE_SYS_OPTIONS.replace("sec=sys", "sec=krb5p").split(","))) == []
