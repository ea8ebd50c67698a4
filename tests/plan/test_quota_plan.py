"""Op list of a team quota on a GlusterFS volume (roles/storage_server.py), from recorded facts: the volume's
server turns quotas on, makes the team's directory through its own mount, sets the limit and records it;
with that record on the node, a deploy asks nothing of gluster."""

from __future__ import annotations

import shutil
from hashlib import sha1

import yaml

from kiln.inventory import load_cluster
from kiln.inventory.quotas import team_quotas
from roles.snapshot import FileState
from roles.storage_server import QUOTAS_DIR, quota_record
from tests.conftest import INVENTORIES
from tests.plan.facts import fresh
from tests.plan.harness import plan_host

OP = "storage_server: team quotas on GlusterFS volume scratch"


def _cluster(tmp_path):
    inv = tmp_path / "inv"
    shutil.copytree(INVENTORIES / "storage", inv)
    path = inv / "group_vars" / "all" / "cluster.yml"
    data = yaml.safe_load(path.read_text())
    data["kiln_teams"][0]["quotas"] = {"/scratch": "2TB"}
    path.write_text(yaml.safe_dump(data))
    return load_cluster(inv)


def test_the_server_sets_the_quota_once_and_records_it(tmp_path, monkeypatch):
    cluster = _cluster(tmp_path)
    commands = dict(plan_host(cluster, "nas1", "debian12", fresh("debian12"), monkeypatch))[OP]
    assert "gluster --mode=script pool list" in commands[0]  # glusterd answers first (the role's wait)
    assert "gluster --mode=script volume quota scratch enable" in commands[1]
    assert "mount -t glusterfs localhost:/scratch" in commands[2]
    assert 'install -d -o root -g vision -m 2770 "$m"/vision' in commands[2] and 'umount "$m"' in commands[2]
    assert commands[3:6] == ["gluster --mode=script volume quota scratch soft-timeout 60",
                             "gluster --mode=script volume quota scratch hard-timeout 5",
                             "gluster --mode=script volume quota scratch limit-usage /vision 2TB"]
    assert commands[6].startswith(f"install -d -m 755 {QUOTAS_DIR} && printf %s ")
    snapshot = fresh("debian12")
    record = quota_record(cluster.hosts["nas1"].setting("storage_gluster_volumes")[0], team_quotas(cluster))
    snapshot.files[f"{QUOTAS_DIR}/scratch"] = FileState("regular file", "644", "root", "root",
                                                        sha1(record.encode()).hexdigest())
    assert dict(plan_host(cluster, "nas1", "debian12", snapshot, monkeypatch))[OP] == []
    assert OP not in dict(plan_host(cluster, "cpu01", "debian12", fresh("debian12"), monkeypatch))


def _client_cluster(tmp_path):
    inv = tmp_path / "inv"
    shutil.copytree(INVENTORIES / "storage", inv)
    path = inv / "group_vars" / "all" / "cluster.yml"
    data = yaml.safe_load(path.read_text())
    data["kiln_teams"][0]["quotas"] = {"/lustre/projects": "500GB", "/beegfs/projects": "2TB"}
    path.write_text(yaml.safe_dump(data))
    hosts = inv / "hosts.yml"
    hosts.write_text(hosts.read_text().replace("- {path: /beegfs, type: beegfs, source: beegfs_nodev}",
                                               "- {path: /beegfs, type: beegfs, source: beegfs_nodev, "
                                               "team_directories: [projects]}"))
    return load_cluster(inv)


def test_lustre_and_beegfs_quotas_are_set_by_the_client_that_makes_the_team_directories(tmp_path, monkeypatch):
    cluster = _client_cluster(tmp_path)
    ops = dict(plan_host(cluster, "gpu01", "debian12", fresh("debian12"), monkeypatch))
    assert ops["storage: team quotas on /lustre (lustre)"][:2] == [
        "lfs project -p 3001 -s -r /lustre/projects/vision", "lfs setquota -p 3001 -B 500G /lustre"]
    assert ops["storage: team quotas on /beegfs (beegfs)"][0] == \
        "beegfs-ctl --setquota --mount=/beegfs --gid 3001 --sizelimit=2T --inodelimit=unlimited"
    assert ops["storage: team quotas on /lustre (lustre)"][2].startswith("install -d -m 755 /etc/kiln/client-quotas")
    assert not [op for op in dict(plan_host(cluster, "nas1", "debian12", fresh("debian12"), monkeypatch))
                if "team quotas on /lustre" in op]
