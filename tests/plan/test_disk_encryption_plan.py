"""Op lists of the disk_encryption role for every supported OS, from recorded facts (no connection): the
controller serves tang with kiln's keys on kiln_tang_port; a compute node's scratch disk is made LUKS2 with
its recovery passphrase (never in a command), bound to tang by the key's thumbprint, in crypttab and fstab,
opened and mounted; with its record, lines and mount in place a deploy asks nothing more of it.

The expected lists live in tests/plan/expected/disk-encryption-<os>.json (KILN_UPDATE_PLANS=1 regenerates them).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from hashlib import sha1

import pytest
import yaml

from kiln.disk_keys import EXCHANGE, SIGNING, DiskKeys
from kiln.inventory import load_cluster
from roles import disk_encryption
from roles.platform import PLATFORMS
from roles.snapshot import FileState, UnitState
from tests.conftest import INVENTORIES
from tests.plan.facts import fresh
from tests.plan.harness import SECRETS, assert_reviewed, converged, plan_host, role_ops
from tests.plan.test_roles_plan import SLURM

PASSPHRASE = "plan-recovery-passphrase-0123456789abcdefghij"
DISKS = DiskKeys(tang_keys={SIGNING: b'{"d":"plan-signing-private"}', EXCHANGE: b'{"d":"plan-exchange-private"}'},
                 thumbprint="plan-thumbprint", passphrases={"cpu01.scratch": PASSPHRASE})
VOLUME = {"name": "scratch", "device": "/dev/disk/by-id/nvme-scratch0", "path": "/local/scratch"}


def _cluster(tmp_path, os: str = "debian12"):
    inv = tmp_path / "inv"
    shutil.copytree(INVENTORIES / "storage", inv)
    (inv / "host_vars").mkdir()
    (inv / "host_vars" / "cpu01.yml").write_text(yaml.safe_dump({"kiln_encrypted_volumes": [VOLUME]}))
    cluster = load_cluster(inv)
    return replace(cluster, versions=dict(cluster.versions, slurm=SLURM[os]))


def _plan(cluster, host, os, monkeypatch, snapshot=None, with_context=False):
    return plan_host(cluster, host, os, snapshot or fresh(os), monkeypatch, with_context=with_context,
                     secrets=replace(SECRETS, disks=DISKS))


def _ours(plan) -> list:
    return role_ops(plan, "disk encryption:")


@pytest.mark.parametrize("os", sorted(PLATFORMS))
@pytest.mark.proves(tier="plan", plan="disk-encryption-{os}.json")
def test_disk_encryption_op_list_matches_the_reviewed_one(os, tmp_path, monkeypatch):
    cluster = _cluster(tmp_path, os)
    actual = {name: _ours(_plan(cluster, name, os, monkeypatch)) for name in ("ctl1", "cpu01", "cpu02")}
    assert actual["cpu02"] == []  # no volume of its own, and no tang
    assert_reviewed(f"disk-encryption-{os}", actual)


def test_the_controller_serves_kilns_keys_on_its_port_and_never_port_80_first(tmp_path, monkeypatch):
    plan, ctx = _plan(_cluster(tmp_path), "ctl1", "debian12", monkeypatch, with_context=True)
    ops = dict(_ours(plan))
    # the package's own start (port 80) never happens: the socket is masked before tang is installed
    names = [op for op, _ in _ours(plan)]
    assert names.index("disk encryption: tangd.socket kept stopped until configured") < names.index("disk encryption: tang")
    assert ops["disk encryption: tangd.socket kept stopped until configured"] == ["systemctl mask tangd.socket"]
    keys = {f.path: f for f in ctx.files if f.path.startswith("/var/lib/tang/")}
    assert sorted(keys) == ["/var/lib/tang/kiln-exc.jwk", "/var/lib/tang/kiln-sig.jwk"]
    assert all(f.secret and (f.mode, f.user, f.group) == ("440", "_tang", "_tang") for f in keys.values())
    drop_in = next(f for f in ctx.files if f.path == disk_encryption.SOCKET_DROP_IN).content.decode()
    assert "ListenStream=\nListenStream=7500\n" in drop_in
    started = ops["disk encryption: tangd.socket enabled and listening"]
    assert started[0] == "systemctl unmask tangd.socket" and started[-1] == "systemctl start tangd.socket"
    assert not any("plan-signing-private" in c for _, cmds in plan for c in cmds)


def test_a_blank_disk_is_made_luks2_bound_by_thumbprint_and_the_passphrase_is_in_no_command(tmp_path, monkeypatch):
    plan = _plan(_cluster(tmp_path), "cpu01", "debian12", monkeypatch)
    ops = dict(_ours(plan))
    assert ops["disk encryption: cryptsetup and clevis"][-1].endswith(" cryptsetup-bin clevis clevis-luks clevis-systemd")
    setup = ops["disk encryption: scratch on /dev/disk/by-id/nvme-scratch0 LUKS2, bound to tang"][0]
    assert "cryptsetup luksFormat --batch-mode --type luks2" in setup
    assert "--key-file /run/kiln-luks-scratch.key /dev/disk/by-id/nvme-scratch0" in setup
    # refused, not formatted, when blkid finds anything on it
    assert setup.index("blkid -p -o value -s TYPE /dev/disk/by-id/nvme-scratch0") < setup.index("luksFormat")
    config = json.dumps({"url": "http://10.0.0.2:7500", "thp": "plan-thumbprint"}, separators=(",", ":"))
    assert f"clevis luks bind -d /dev/disk/by-id/nvme-scratch0 -k /run/kiln-luks-scratch.key tang '{config}'" in setup
    assert setup.startswith("trap 'rm -f /run/kiln-luks-scratch.key' EXIT")
    assert setup.index("clevis luks bind") < setup.index("clevis luks unbind")  # the new binding first
    assert not any(PASSPHRASE in c for _, cmds in plan for c in cmds)
    assert ops["disk encryption: /etc/crypttab entry for scratch"][-1] == \
        "echo 'scratch /dev/disk/by-id/nvme-scratch0 none luks,_netdev,nofail' >> /etc/crypttab"
    assert ops["disk encryption: /etc/fstab entry for scratch"][-1] == \
        ("echo '/dev/mapper/scratch /local/scratch ext4 noatime,nofail,_netdev 0 2' "
         ">> /etc/fstab")
    opened = ops["disk encryption: scratch open and mounted on /local/scratch"]
    assert opened[1] == "systemctl --no-block start systemd-cryptsetup@scratch.service"  # systemd's own unit
    assert opened[-1] == "systemctl start local-scratch.mount"
    assert not any("cryptsetup open --key-file /run/kiln-luks-scratch.key /dev/disk/by-id/nvme-scratch0 scratch" in c
                   for _, cmds in plan for c in cmds)  # the setup opens it under another name, only for mkfs


def test_a_set_up_volume_asks_nothing_and_a_second_controller_makes_the_pin_sss(tmp_path, monkeypatch):
    """The node after its first deploy (packages, files, the volume's record, its crypttab and fstab lines and its
    mount in place): the next deploy runs nothing of the role. Another passphrase (a restored backup) makes the
    record differ, so the setup runs and tries it on the volume."""
    cluster = _cluster(tmp_path)
    plan, ctx = _plan(cluster, "cpu01", "debian12", monkeypatch, with_context=True)
    snapshot = converged(plan, ctx, fresh("debian12"))
    snapshot.packages.update(dict.fromkeys(disk_encryption.node_packages(ctx), "19-2"))  # the OS's own versions
    volume = cluster.hosts["cpu01"].setting("encrypted_volumes")[0]
    pin, config = disk_encryption.pin(["http://10.0.0.2:7500"], "plan-thumbprint")
    record = disk_encryption.record(volume, pin, config, PASSPHRASE)
    snapshot.files[f"{disk_encryption.RECORDS}/scratch"] = FileState("regular file", "644", "root", "root",
                                                                     sha1(record.encode()).hexdigest())
    snapshot.files["/local/scratch"] = FileState("directory", "755", "root", "root", "")
    snapshot.files["/etc/crypttab"] = FileState("regular file", "644", "root", "root", "")
    snapshot.files["/etc/systemd/system/systemd-cryptsetup@scratch.service.d"] = FileState("directory", "755", "root",
                                                                                          "root", "")
    for unit in ("remote-cryptsetup.target", "clevis-luks-askpass.path"):
        snapshot.units[unit] = UnitState("loaded", "active", "enabled")
    snapshot.lines |= {i for i, (path, _) in enumerate(ctx.lines) if path in ("/etc/crypttab", "/etc/fstab",
                                                                               "/proc/self/mounts")}
    again = _ours(_plan(cluster, "cpu01", "debian12", monkeypatch, snapshot=snapshot))
    assert [op for op, cmds in again if cmds] == []
    assert disk_encryption.record(volume, pin, config, "other") != record
    assert disk_encryption.pin(["http://a:7500", "http://b:7500"], "t") == (
        "sss", '{"t":1,"pins":{"tang":[{"url":"http://a:7500","thp":"t"},{"url":"http://b:7500","thp":"t"}]}}')
