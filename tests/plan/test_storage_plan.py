"""Op lists of the storage and storage_server roles for every supported OS, from recorded facts (no
connection): a lab storage server (NFS exports, a GlusterFS volume) and a compute node mounting them.

The expected lists live in tests/plan/expected/storage-<os>.json; a deliberate change is reviewed by
regenerating them (KILN_UPDATE_PLANS=1 pytest tests/plan) and reading the diff.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from kiln.inventory import load_cluster
from roles.platform import PLATFORMS
from tests.conftest import INVENTORIES
from tests.plan.facts import fresh
from tests.plan.harness import assert_reviewed, plan_host
from tests.plan.test_roles_plan import SLURM

HOSTS = ("nas1", "cpu01", "gpu01")
ROLES = ("storage_server", "storage", "lustre", "beegfs")


def cluster_for(os: str):
    cluster = load_cluster(INVENTORIES / "storage")
    if os == "rocky9":  # no glusterfs-server there (validation refuses it): the server exports NFS only
        nas1 = cluster.hosts["nas1"]
        nas1 = replace(nas1, settings=dict(nas1.settings, kiln_storage_gluster_volumes=[]))
        cluster = replace(cluster, hosts={**cluster.hosts, "nas1": nas1})
    return replace(cluster, versions=dict(cluster.versions, slurm=SLURM[os]))


def storage_ops(plan) -> list:
    """The storage roles' operations and slurmd's storage drop-in, the rest of the plan left out."""
    return [[op, cmds] for op, cmds in plan if op.split(":")[0] in ROLES or "network filesystems" in op]



def commands(plan) -> str:
    return "\n".join(c for _, cmds in plan for c in cmds)


@pytest.mark.parametrize("os", sorted(PLATFORMS))
@pytest.mark.proves(tier="plan", plan="storage-{os}.json")
def test_storage_op_list_matches_the_reviewed_one(os, monkeypatch):
    cluster = cluster_for(os)
    actual = {name: storage_ops(plan_host(cluster, name, os, fresh(os), monkeypatch)) for name in HOSTS}
    assert_reviewed(f"storage-{os}", actual)


@pytest.mark.parametrize("os", sorted(PLATFORMS))
def test_server_exports_and_serves_a_volume(os, monkeypatch):
    plan, ctx = plan_host(cluster_for(os), "nas1", os, fresh(os), monkeypatch, with_context=True)
    text = commands(plan)
    server_package = "nfs-kernel-server" if PLATFORMS[os].family == "debian" else "nfs-utils"
    assert server_package in text
    exports = next(f for f in ctx.files if f.path == "/etc/exports.d/kiln.exports").content.decode()
    assert exports.splitlines()[1:] == [
        "/srv/home 10.0.0.0/24(rw,sync,no_subtree_check,no_root_squash) login*.example.org(rw,sync,no_subtree_check,no_root_squash)",
        "/srv/datasets 10.0.0.0/24(ro,no_subtree_check)"]
    assert "systemctl start nfs-server.service" in text and "exportfs -ra" in text
    assert "mkdir -p /srv/home" in text
    if os != "rocky9":
        assert "glusterfs-server" in text and "mkdir -p /srv/gluster/scratch" in text
        assert "gluster --mode=script volume create scratch nas1:/srv/gluster/scratch force" in text
        assert "gluster --mode=script volume start scratch" in text


def test_team_directories_are_made_once_for_a_network_filesystem(monkeypatch):
    """cpu01 and cpu02 mount the same GlusterFS volume: the first of the inventory makes a directory per
    team at its root (root, the team's group, 2770); the second leaves them alone. gpu01's Lustre holds
    them under projects/ and scratch/ (root, 0755)."""
    cluster = cluster_for("debian12")
    cpu01, cpu02, gpu01 = (commands(plan_host(cluster, n, "debian12", fresh("debian12"), monkeypatch)) for n in
                           ("cpu01", "cpu02", "gpu01"))
    for team in ("vision", "language"):
        assert f"mkdir -p /scratch/{team}\nchown root:{team} /scratch/{team}\nchmod 2770 /scratch/{team}" in cpu01
        for d in ("projects", "scratch"):
            assert f"chown root:{team} /lustre/{d}/{team}\nchmod 2770 /lustre/{d}/{team}" in gpu01
    assert "mkdir -p /lustre/projects\nchown root:root /lustre/projects\nchmod 755 /lustre/projects" in gpu01
    assert "/scratch/vision" not in cpu02
    assert cpu01.count("chown root:root /scratch\n") == 1  # the mount point's, before the mount: "." leaves the root alone
    assert cpu01.index("mount /scratch") < cpu01.index("mkdir -p /scratch/vision")


def test_server_in_a_container_writes_the_exports_and_starts_no_kernel_server(monkeypatch):
    plan, ctx = plan_host(cluster_for("debian12"), "nas1", "debian12", fresh("debian12"), monkeypatch,
                          in_container=True, with_context=True)
    text = commands(plan)
    assert any(f.path == "/etc/exports.d/kiln.exports" for f in ctx.files)
    assert "nfs-server" not in text and "exportfs" not in text


def test_a_volume_that_exists_and_runs_is_left_alone(monkeypatch):
    from roles.snapshot import FileState
    snap = fresh("debian12")
    snap.files["/var/lib/glusterd/vols/scratch/info"] = FileState("regular file", "600", "root", "root", "x")
    plan, ctx = plan_host(cluster_for("debian12"), "nas1", "debian12", snap, monkeypatch, with_context=True)
    # started, and its TLS options set: every line kiln reads of the volume's info
    snap.lines.update(i for i, (path, regex) in enumerate(ctx.lines) if path.endswith("scratch/info"))
    text = commands(plan_host(cluster_for("debian12"), "nas1", "debian12", snap, monkeypatch))
    assert "volume create" not in text and "volume start" not in text and "volume set" not in text


def test_a_volume_that_runs_in_clear_text_gets_tls_and_starts_again(monkeypatch):
    """kiln_storage_gluster_tls on a volume that ran without it: its TLS options set, then the volume stopped
    and started (a brick listens with TLS only from its start); clients remount (roles/storage.py)."""
    from roles.snapshot import FileState
    snap = fresh("debian12")
    snap.files["/var/lib/glusterd/vols/scratch/info"] = FileState("regular file", "600", "root", "root", "x")
    plan, ctx = plan_host(cluster_for("debian12"), "nas1", "debian12", snap, monkeypatch, with_context=True)
    snap.lines.add(next(i for i, (path, regex) in enumerate(ctx.lines)
                        if path.endswith("scratch/info") and regex == "^status=1$"))
    text = commands(plan_host(cluster_for("debian12"), "nas1", "debian12", snap, monkeypatch))
    assert "volume create" not in text
    assert "gluster --mode=script volume set scratch server.ssl on" in text
    assert "gluster --mode=script volume set scratch auth.ssl-allow nas1,cpu01,cpu02" in text
    assert text.index("volume set scratch server.ssl on") < text.index("volume stop scratch") < \
        text.index("volume start scratch")


@pytest.mark.parametrize("os", sorted(PLATFORMS))
def test_clients_mount_over_the_network_and_slurmd_waits_for_them(os, monkeypatch):
    plan, ctx = plan_host(cluster_for(os), "cpu01", os, fresh(os), monkeypatch, with_context=True)
    text = commands(plan)
    client = "nfs-common" if PLATFORMS[os].family == "debian" else "nfs-utils"
    gluster = "glusterfs-client" if PLATFORMS[os].family == "debian" else "glusterfs-fuse"
    assert client in text and gluster in text
    assert ("echo 'nas1:/srv/home /home nfs rw,hard,vers=4.2,timeo=600,retrans=2,_netdev 0 0' >> /etc/fstab"
            in text)
    assert ("echo 'nas1:/scratch /scratch glusterfs rw,_netdev,backup-volfile-servers=nas2.example.org 0 0' "
            ">> /etc/fstab" in text)
    assert "mount /home" in text and "mount /scratch" in text
    dropin = next(f for f in ctx.files if f.path == "/etc/systemd/system/slurmd.service.d/kiln-storage.conf")
    assert "RequiresMountsFor=/home /datasets /scratch" in dropin.content.decode()


@pytest.mark.parametrize("os", sorted(PLATFORMS))
def test_parallel_filesystem_clients(os, monkeypatch):
    """Lustre, BeeGFS, CephFS, Weka and GPFS on gpu01: pinned vendor packages from signed repositories,
    LNet from the inventory, BeeGFS's files and its secret, ceph.conf and the keyring, fstab lines only for
    what fstab mounts."""
    plan, ctx = plan_host(cluster_for(os), "gpu01", os, fresh(os), monkeypatch, with_context=True)
    text = commands(plan)
    files = {f.path: f for f in ctx.files}
    redhat = PLATFORMS[os].family == "redhat"
    lustre = ["kmod-lustre-client-2.15.6-1", "lustre-client-2.15.6-1"] if redhat else \
        ["lustre-client-modules-dkms=2.15.6-1", "lustre-client-utils=2.15.6-1"]
    assert all(p in text for p in lustre), text
    assert files["/etc/modprobe.d/lustre.conf"].content.decode().endswith(
        'options lnet networks="o2ib0(ib0),tcp0(eth0)"\n')
    beegfs = ["beegfs-client-7.4.5", "beegfs-helperd-7.4.5"] if redhat else ["beegfs-client=7.4.5", "beegfs-helperd=7.4.5"]
    assert all(p in text for p in beegfs)
    if redhat:
        repo = files["/etc/yum.repos.d/kiln-beegfs.repo"].content.decode()
        assert "gpgcheck=1" in repo and "gpgkey=https://www.beegfs.io/release/beegfs_7.4.5/gpg/GPG-KEY-beegfs" in repo
        assert "gpgcheck=1" in files["/etc/yum.repos.d/kiln-lustre.repo"].content.decode()
    else:
        assert files["/etc/apt/sources.list.d/kiln-beegfs.list"].content.decode().endswith(
            "deb [signed-by=/usr/share/keyrings/kiln-beegfs.gpg] https://www.beegfs.io/release/beegfs_7.4.5 bookworm non-free\n")
        assert "trusted=yes" not in files["/etc/apt/sources.list.d/kiln-lustre.list"].content.decode()
    connauth = files["/etc/beegfs/connauthfile"]
    assert connauth.secret and connauth.mode == "400" and connauth.content == b"plan-test-connauth\n"
    assert "echo 'sysMgmtdHost = beegfs-mgmt.example.org' >> /etc/beegfs/beegfs-client.conf" in text
    assert "echo 'connAuthFile = /etc/beegfs/connauthfile' >> /etc/beegfs/beegfs-helperd.conf" in text
    assert files["/etc/beegfs/beegfs-mounts.conf"].content.decode().endswith("/beegfs /etc/beegfs/beegfs-client.conf\n")
    assert "systemctl start beegfs-client.service" in text
    assert "ceph-fuse" in text
    assert "mon_host = 10.0.0.21,10.0.0.22,10.0.0.23" in files["/etc/ceph/ceph.conf"].content.decode()
    keyring = files["/etc/ceph/ceph.client.hpc.keyring"]
    assert keyring.secret and keyring.mode == "600"
    assert ("echo 'none /ceph fuse.ceph ceph.id=hpc,ceph.client_mountpoint=/volumes/hpc,_netdev 0 0' >> /etc/fstab"
            in text)
    assert "echo '10.0.0.31@o2ib:10.0.0.32@o2ib:/lfs /lustre lustre flock,_netdev 0 0' >> /etc/fstab" in text
    assert "echo 'weka01/default /weka wekafs num_cores=1,_netdev 0 0' >> /etc/fstab" in text
    assert "/gpfs" not in text and "/beegfs /etc/fstab" not in text and "mount /beegfs" not in text
    dropin = files["/etc/systemd/system/slurmd.service.d/kiln-storage.conf"].content.decode()
    assert "RequiresMountsFor=/lustre /ceph /weka" in dropin
    assert "plan-test-key" not in text and "plan-test-connauth" not in text  # secrets never in commands


def test_parallel_filesystems_in_a_container_start_no_kernel_client(monkeypatch):
    text = commands(plan_host(cluster_for("debian12"), "gpu01", "debian12", fresh("debian12"), monkeypatch,
                              in_container=True))
    assert "beegfs-client.service" not in text
