"""Network-bound disk encryption without a node: the inventory's checks (file and key named), tang's keys and
their thumbprint, the secrets kept 0600 and reused, the storage suite's STORAGE_LOCKED on a locked volume
(and the mount it leaves unjudged), kiln-remediate holding such a node without escalating it, and the
firewall opening tang to the hosts with encrypted volumes only."""

from __future__ import annotations

import base64
import json
import shutil
import stat

import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric import ec

from checks import remediation_policy as policy
from checks import repairs
from checks.node import Result
from checks.suites import run_suites
from kiln import disk_keys
from kiln.check.expectations import node_expectations
from kiln.inventory import load_cluster
from kiln.inventory.errors import InventoryInvalid
from kiln.secrets import load_or_create, site_secrets, write_new_private
from roles import firewall_rules
from tests.conftest import INVENTORIES
from tests.unit.test_checks import EXPECT, node  # noqa: F401 - the simulated node's fixture

VOLUME = {"name": "scratch", "device": "/dev/disk/by-id/nvme-scratch0", "path": "/local/scratch"}


def _inventory(tmp_path, host_vars: dict[str, dict]):
    inv = tmp_path / "inv"
    shutil.copytree(INVENTORIES / "storage", inv)
    (inv / "host_vars").mkdir()
    for host, values in host_vars.items():
        (inv / "host_vars" / f"{host}.yml").write_text(yaml.safe_dump(values))
    return inv


def _errors(tmp_path, host_vars) -> list:
    with pytest.raises(InventoryInvalid) as e:
        load_cluster(_inventory(tmp_path, host_vars))
    return e.value.errors


def test_a_controller_with_an_encrypted_volume_and_clashing_volumes_are_refused_naming_file_and_key(tmp_path):
    errors = _errors(tmp_path, {"ctl1": {"kiln_encrypted_volumes": [VOLUME]}})
    assert [(str(e.file).rsplit("/", 1)[-1], e.key) for e in errors] == [("ctl1.yml", "kiln_encrypted_volumes")]
    assert "controllers serve tang" in errors[0].message
    twice = [VOLUME, dict(VOLUME, name="ckpt", path="/local/ckpt")]
    errors = _errors(tmp_path / "b", {"cpu01": {"kiln_encrypted_volumes": twice,
                                                "kiln_storage_mounts": [{"path": "/local/ckpt", "type": "tmpfs",
                                                                         "source": "tmpfs"}]}})
    messages = " | ".join(e.message for e in errors)
    assert "device /dev/disk/by-id/nvme-scratch0 is listed twice" in messages
    assert "/local/ckpt is also in kiln_storage_mounts" in messages


@pytest.mark.parametrize("device", ["/dev/../etc/passwd", "/dev/sdb; reboot", "sdb", "/dev/disk by-id/x",
                                    "/dev/sdb\nx", "/etc/shadow"])
def test_a_device_that_is_no_plain_path_under_dev_is_refused(tmp_path, device):
    errors = _errors(tmp_path, {"cpu01": {"kiln_encrypted_volumes": [dict(VOLUME, device=device)]}})
    assert errors and all(e.key.startswith("kiln_encrypted_volumes") for e in errors), errors


def test_tangs_keys_are_p521_their_thumbprint_is_rfc7638s_and_a_wrong_file_is_refused(tmp_path):
    key = json.loads(disk_keys.new_jwk(disk_keys.SIGNING))
    assert (key["kty"], key["crv"], key["alg"], key["key_ops"]) == ("EC", "P-521", "ES512", ["sign", "verify"])
    # the public point is the private key's (what tangd signs with is what clevis verifies)
    d = int.from_bytes(base64.urlsafe_b64decode(key["d"] + "=="), "big")
    public = ec.derive_private_key(d, ec.SECP521R1()).public_key().public_numbers()
    assert public.x == int.from_bytes(base64.urlsafe_b64decode(key["x"] + "=="), "big")
    # RFC 7638: SHA-256 over the required members only, sorted, no spaces; the private part changes nothing
    thp = disk_keys.thumbprint(json.dumps(key).encode())
    assert thp == disk_keys.thumbprint(json.dumps(dict(key, d="other", alg="x")).encode()) and len(thp) == 43
    exchange = json.loads(disk_keys.new_jwk(disk_keys.EXCHANGE))
    assert (exchange["alg"], exchange["key_ops"]) == ("ECMR", ["deriveKey"])
    bad = tmp_path / disk_keys.SIGNING
    with pytest.raises(disk_keys.DiskKeysError, match="kiln-sig.jwk is not a P-521 ES512 JWK"):
        disk_keys.check_jwk(bad, disk_keys.new_jwk(disk_keys.EXCHANGE))


def test_the_keys_and_passphrases_are_made_once_0600_and_masked(tmp_path):
    cluster = load_cluster(_inventory(tmp_path, {"cpu01": {"kiln_encrypted_volumes": [VOLUME]}}))
    kept = tmp_path / "secrets" / cluster.name
    kept.mkdir(parents=True, mode=0o700)
    for name in site_secrets(cluster):  # what the site places (BeeGFS, Ceph): kiln never makes those
        write_new_private(kept / name, b"site secret\n")
    first = load_or_create(cluster).disks
    again = load_or_create(cluster).disks
    assert first.thumbprint == again.thumbprint and first.passphrases == again.passphrases
    phrase = first.passphrase("cpu01", "scratch")
    assert len(phrase) >= 43
    for f in (kept / "tang" / "kiln-sig.jwk", kept / "tang" / "kiln-exc.jwk", kept / "luks" / "cpu01.scratch"):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    secrets = load_or_create(cluster)
    private = json.loads(first.tang_keys[disk_keys.SIGNING])["d"]
    assert secrets.mask(f"x {phrase} y {private}") == "x ******** y ********"
    (kept / "luks" / "cpu01.scratch").write_text("short")
    with pytest.raises(Exception, match="is not a passphrase kiln made"):
        load_or_create(cluster)


def _expect(tmp_path):
    cluster = load_cluster(_inventory(tmp_path, {"cpu01": {"kiln_encrypted_volumes": [VOLUME]}}))
    return node_expectations(cluster, cluster.hosts["cpu01"])


def test_the_storage_suite_fails_a_locked_volume_and_leaves_its_mount_unjudged(tmp_path, node):  # noqa: F811
    expect = _expect(tmp_path)
    assert expect["encrypted_volumes"] == [dict(VOLUME, tang=["http://10.0.0.2:7500"])]
    mount = next(m for m in expect["storage"] if m["path"] == "/local/scratch")
    assert (mount["type"], mount["source"]) == ("ext4", "/dev/mapper/scratch")
    expect = dict(EXPECT, storage=[mount], encrypted_volumes=expect["encrypted_volumes"])
    from checks.storage import MAPPER, probe_command
    healthy = {}
    healthy["findmnt --json --list -o TARGET,SOURCE,FSTYPE,OPTIONS"] = Result(0, (
        '{"filesystems": [{"target": "/local/scratch", "source": "/dev/mapper/scratch", "fstype": "ext4", '
        '"options": "rw,noatime"}]}'))
    healthy["cat /etc/fstab"] = Result(0, "/dev/mapper/scratch /local/scratch ext4 noatime,nofail,_netdev 0 2\n")
    healthy[probe_command([mount], "gpu01")] = Result(0, "@@kiln-mount 0 0\nMounted on Use% IUse%\n/local/scratch 3% 1%\n")
    healthy[MAPPER] = Result(0, "control\nscratch\n")
    node.answers.update(healthy)
    verdicts = run_suites(node, expect, ["storage"])
    assert [v.id for v in verdicts if v.failed] == [], verdicts
    assert any(v.id == "STORAGE_LOCKED" and not v.failed for v in verdicts)
    # locked: no tang answered at boot; the mount is absent, and only the lock is the fault
    node.answers[MAPPER] = Result(0, "control\n")
    node.answers["findmnt --json --list -o TARGET,SOURCE,FSTYPE,OPTIONS"] = Result(0, '{"filesystems": []}')
    node.answers[probe_command([mount], "gpu01")] = Result(0, "@@kiln-mount 0 3\n")
    failed = [v for v in run_suites(node, expect, ["storage"]) if v.failed]
    assert [v.id for v in failed] == ["STORAGE_LOCKED"]
    assert failed[0].message.startswith("/local/scratch: scratch (/dev/disk/by-id/nvme-scratch0) locked: no tang "
                                        "answered (http://10.0.0.2:7500)")
    # opened but not mounted: the storage suite's own STORAGE_MOUNTED
    node.answers[MAPPER] = Result(0, "control\nscratch\n")
    assert [v.id for v in run_suites(node, expect, ["storage"]) if v.failed] == ["STORAGE_MOUNTED"]


def test_kiln_remediate_holds_a_locked_node_and_never_escalates_it():
    assert repairs.check_of("kiln: STORAGE_LOCKED /local/scratch: encrypted volume scratch is locked") == "STORAGE_LOCKED"
    assert repairs.ladder("STORAGE_LOCKED") == (repairs.WAIT,)
    view = policy.NodeView(name="cpu01", state="drained", reason="kiln: STORAGE_LOCKED /local/scratch: locked",
                           drained_at=0.0)
    episode = policy.Episode(check="STORAGE_LOCKED", opened=0.0)
    history = policy.NodeHistory(episode=episode)
    for now in (10_000.0, 500_000.0):
        decision = policy.decide(view, history, policy.Settings(), now, breaker_open=False)
        assert decision.action == "hold" and "returns by itself" in decision.why, decision


def test_tang_is_open_to_the_hosts_with_encrypted_volumes_only(tmp_path):
    cluster = load_cluster(_inventory(tmp_path, {"cpu01": {"kiln_encrypted_volumes": [VOLUME],
                                                           "ansible_host": "10.0.0.11"},
                                                 "cpu02": {"ansible_host": "10.0.0.12"}}))
    tang = [a for a in firewall_rules.allows(cluster, cluster.hosts["ctl1"]) if a.why.startswith("tang")]
    assert len(tang) == 1 and tang[0].ports == "7500" and tang[0].sources == ("10.0.0.11",)
    assert not any(a.why.startswith("tang") for a in firewall_rules.allows(cluster, cluster.hosts["cpu02"]))


@pytest.mark.skipif(shutil.which("systemd-escape") is None, reason="systemd-escape (systemd) is not on this machine")
def test_the_mount_unit_name_is_systemds_for_every_character_a_mount_point_may_hold():
    import random
    import subprocess
    from kiln.inventory.formats import check_mount_point
    from roles.disk_encryption import mount_unit, unit_drop_in
    rng = random.Random(7)
    alphabet = "abcXYZ019_.@+,=:~-"
    paths = ["/local", "/local/scratch", "/a-b/c.d", "/x/.hidden", "/m@n+o,p=q~r:s_t"]
    while len(paths) < 60:
        path = "/" + "/".join("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))) for _ in range(rng.randint(1, 3)))
        try:
            paths.append(check_mount_point(path))
        except ValueError:
            continue
    for path in paths:
        real = subprocess.run(["systemd-escape", "--path", "--suffix=mount", path], capture_output=True, text=True)
        assert mount_unit(path) == real.stdout.strip(), path
    from kiln.inventory.encryption_schema import EncryptedVolume
    drop_in = unit_drop_in(EncryptedVolume(name="ckpt", device="/dev/vdc", path="/a-b/c"))
    assert "ExecStartPost=/bin/systemctl --no-block start a\\\\x2db-c.mount\n" in drop_in
