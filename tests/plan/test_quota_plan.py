"""Op list of a team quota on a GlusterFS volume (roles/storage_server.py), from recorded facts: the volume's
server turns quotas on, makes the team's directory through its own mount, sets the limit and records it;
with that record on the node, a deploy asks nothing of gluster."""

from __future__ import annotations

import shutil
from dataclasses import replace

import pytest
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


def _cluster(tmp_path, **settings):
    inv = tmp_path / "inv"
    shutil.copytree(INVENTORIES / "storage", inv)
    path = inv / "group_vars" / "all" / "cluster.yml"
    data = yaml.safe_load(path.read_text())
    data["kiln_teams"][0]["quotas"] = {"/scratch": "2TB"}
    data.update(settings)
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


QUOTAD = "storage_server: quotad serving (team quotas enforced)"


def test_quotad_is_asked_to_serve_where_it_is_not_listening_or_was_restarted(tmp_path, monkeypatch):
    """Without quotad a brick fails every write under a limit with ENOTCONN: a fresh server waits for it (and
    restarts glusterd when it does not come); a server with quotad listening and nothing restarted asks nothing;
    one where only a socket file is left (a killed quotad) is asked again."""
    # TLS off: its files, absent from these recorded facts, would restart glusterd (and quotad with it)
    cluster = _cluster(tmp_path, kiln_storage_gluster_tls=False)
    [command] = dict(plan_host(cluster, "nas1", "debian12", fresh("debian12"), monkeypatch))[QUOTAD]
    assert "grep -qE '^[0-9a-f]+: [0-9A-F]+ [0-9A-F]+ 00010000 0001 01 [0-9]+ /var/run/gluster/quotad\\.socket$' " \
        "/proc/net/unix" in command and "systemctl restart glusterd.service" in command
    assert "exit 1" in command and "team quotas are not enforced" in command
    snapshot = fresh("debian12")
    record = quota_record(cluster.hosts["nas1"].setting("storage_gluster_volumes")[0], team_quotas(cluster))
    snapshot.files[f"{QUOTAS_DIR}/scratch"] = FileState("regular file", "644", "root", "root",
                                                        sha1(record.encode()).hexdigest())
    snapshot.files["/var/run/gluster/quotad.socket"] = FileState("socket", "755", "root", "root", "")
    _, ctx = plan_host(cluster, "nas1", "debian12", snapshot, monkeypatch, with_context=True)
    # everything kiln reads of the volume is there: created and started, glusterd running
    snapshot.lines.update(i for i, (path, _) in enumerate(ctx.lines) if path.endswith("scratch/info"))
    for unit in ("glusterd.service",):
        snapshot.units[unit] = replace(snapshot.unit(unit), load="loaded", active="active", enabled="enabled")
    assert dict(plan_host(cluster, "nas1", "debian12", snapshot, monkeypatch))[QUOTAD] != []  # a file, no listener
    snapshot.lines.add(next(i for i, (path, _) in enumerate(ctx.lines) if path == "/proc/net/unix"))
    assert dict(plan_host(cluster, "nas1", "debian12", snapshot, monkeypatch))[QUOTAD] == []


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


def _nfs_cluster(tmp_path, os="debian12"):
    inv = tmp_path / "inv"
    shutil.copytree(INVENTORIES / "storage", inv)
    if os == "rocky9":  # no glusterfs-server there (validation refuses it): the server exports NFS only
        hosts = inv / "hosts.yml"
        hosts.write_text(hosts.read_text().replace("          kiln_storage_gluster_volumes:\n"
                                                   "            - {name: scratch, brick: /srv/gluster/scratch}\n", ""))
    path = inv / "group_vars" / "all" / "cluster.yml"
    data = yaml.safe_load(path.read_text())
    data["kiln_teams"][0]["quotas"] = {"/home/projects": "100GB"}
    path.write_text(yaml.safe_dump(data))
    cpu = inv / "group_vars" / "cpu.yml"
    cpu.write_text(cpu.read_text().replace('timeo=600,retrans=2"}', 'timeo=600,retrans=2", team_directories: [projects]}'))
    return load_cluster(inv)


@pytest.mark.parametrize("os", ["debian12", "rocky9"])
def test_an_nfs_quota_is_a_project_quota_set_by_the_exporting_server(tmp_path, monkeypatch, os):
    cluster = _nfs_cluster(tmp_path, os)
    ops = dict(plan_host(cluster, "nas1", os, fresh(os), monkeypatch))
    [install] = [cmds for op, cmds in ops.items() if op.startswith("storage_server: nfs-") and "xfsprogs, quota" in op]
    assert "xfsprogs" in " ".join(install) and "quota" in " ".join(install)
    [line, record] = ops["storage_server: NFS team quotas (project quotas)"]
    assert line.startswith("install -d -o root -g 3001 -m 2770 /srv/home/projects/vision && ")
    assert 'xfs_quota -x -c "project -s -p /srv/home/projects/vision 3001" "$mnt"' in line
    assert 'xfs_quota -x -c "limit -p bhard=104857600k 3001" "$mnt"' in line
    assert 'chattr -R -p 3001 +P /srv/home/projects/vision && setquota -P 3001 0 104857600 0 0 "$mnt"' in line
    assert record.startswith("install -d -m 755 /etc/kiln/nfs-quotas && printf %s ")


def test_the_nfs_quota_line_refuses_a_filesystem_without_project_quotas(tmp_path):
    """The line run for real against this machine's own filesystem (a temporary directory): its filesystem
    is neither XFS nor ext4 with prjquota here, so it stops naming what to change, and makes nothing else."""
    import os as os_module
    import subprocess

    from roles.storage_server import nfs_quota_command
    target = tmp_path / "projects" / "vision"
    run = subprocess.run(["sh", "-c", nfs_quota_command(str(target), os_module.getgid(), "1GB")],
                         capture_output=True, text=True)
    assert run.returncode == 1, run
    assert ("mounted without prjquota" in run.stderr or "kiln sets NFS team quotas on xfs or ext4" in run.stderr), run.stderr
