"""Secrets are generated once per cluster, kept 0600 outside git, and masked in anything kiln prints."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from kiln.inventory import load_cluster
from kiln.secrets import SecretsError, load_or_create, secrets_path
from tests.conftest import INVENTORIES


@pytest.fixture
def cluster(tmp_path):
    shutil.copytree(INVENTORIES / "small", tmp_path / "site" / "inventory")
    return load_cluster(tmp_path / "site" / "inventory")


def test_generated_once_and_reused(cluster):
    first = load_or_create(cluster)
    second = load_or_create(cluster)
    assert first == second and len(first.munge_key) == 1024 and len(first.dbd_password) >= 32
    path = secrets_path(cluster)
    assert path == cluster.path.parent / "secrets" / cluster.name
    assert path.stat().st_mode & 0o777 == 0o700
    assert {f.name: f.stat().st_mode & 0o777 for f in path.iterdir()} == {"munge.key": 0o600,
                                                                         "slurmdbd.password": 0o600}


def test_dry_run_never_writes_secrets(cluster):
    made_up = load_or_create(cluster, create=False)
    assert not secrets_path(cluster).exists() and len(made_up.munge_key) == 1024


def test_refused_inside_a_git_tree_unless_ignored(cluster):
    site = cluster.path.parent
    subprocess.run(["git", "init", "-q", str(site)], check=True)
    with pytest.raises(SecretsError, match="inside a git work tree and not ignored"):
        load_or_create(cluster)
    (site / ".gitignore").write_text("secrets/\n")
    assert load_or_create(cluster).munge_key


def test_a_broken_secret_says_how_to_fix_it(cluster):
    load_or_create(cluster)
    (secrets_path(cluster) / "munge.key").write_bytes(b"short")
    with pytest.raises(SecretsError, match="delete it to regenerate"):
        load_or_create(cluster)


def test_masking_and_repr(cluster):
    secrets = load_or_create(cluster)
    assert secrets.dbd_password not in repr(secrets)
    assert secrets.mask(f"StoragePass={secrets.dbd_password}\n") == "StoragePass=********\n"


@pytest.mark.parametrize("make_it_unsafe, message", [
    (lambda d: d.chmod(0o777), "writable by others than its owner .mode 777"),
    (lambda d: d.chmod(0o770), "writable by others than its owner .mode 770"),
    (lambda d: (d / "munge.key").chmod(0o666), "writable by others"),
    (lambda d: os.chown(d, 4242, -1), "belongs to uid 4242"),
])
def test_a_secrets_directory_others_can_write_is_refused(cluster, make_it_unsafe, message):
    load_or_create(cluster)
    make_it_unsafe(secrets_path(cluster))
    with pytest.raises(SecretsError, match=message):
        load_or_create(cluster)


def test_secrets_behind_links_are_refused(cluster, tmp_path):
    load_or_create(cluster)
    path = secrets_path(cluster)
    elsewhere = tmp_path / "elsewhere"
    path.rename(elsewhere)
    path.symlink_to(elsewhere)
    with pytest.raises(SecretsError, match="is a symbolic link"):
        load_or_create(cluster)
    path.unlink()
    elsewhere.rename(path)
    (path / "munge.key").rename(tmp_path / "key")
    (path / "munge.key").symlink_to(tmp_path / "key")
    with pytest.raises(SecretsError, match="is a symbolic link"):
        load_or_create(cluster)


def test_site_secrets_are_read_never_made_up(tmp_path):
    """BeeGFS's connAuthFile and a CephX keyring come from the site's own services: a missing one stops the
    run before anything is touched, naming the file and where it comes from; a present one is read (and
    checked like kiln's own), and a dry run goes on without it."""
    shutil.copytree(INVENTORIES / "storage", tmp_path / "site" / "inventory")
    cluster = load_cluster(tmp_path / "site" / "inventory")
    path = secrets_path(cluster)
    with pytest.raises(SecretsError, match="beegfs-connauth is missing: BeeGFS's connAuthFile"):
        load_or_create(cluster)
    (path / "beegfs-connauth").write_bytes(b"site-connauth\n")
    os.chmod(path / "beegfs-connauth", 0o600)
    with pytest.raises(SecretsError, match=r"ceph.client.hpc.keyring is missing: .*ceph auth get client.hpc"):
        load_or_create(cluster)
    (path / "ceph.client.hpc.keyring").write_bytes(b"[client.hpc]\n\tkey = x\n")
    os.chmod(path / "ceph.client.hpc.keyring", 0o644)
    secrets = load_or_create(cluster)
    assert secrets.site == {"beegfs-connauth": b"site-connauth\n", "ceph.client.hpc.keyring": b"[client.hpc]\n\tkey = x\n"}
    assert "site-connauth" not in repr(secrets)
    os.chmod(path / "ceph.client.hpc.keyring", 0o666)
    with pytest.raises(SecretsError, match="writable by others"):
        load_or_create(cluster)
    (path / "ceph.client.hpc.keyring").unlink()
    assert set(load_or_create(cluster, create=False).site) == {"beegfs-connauth", "ceph.client.hpc.keyring"}


def test_a_dry_run_makes_up_what_a_directory_holding_only_a_sites_secret_lacks(tmp_path):
    """A site places its own secret (BeeGFS's connAuthFile; the testbed, its BMC password) before kiln's
    first deploy: a dry run then makes kiln's own secrets up in memory and writes none of them; the real
    run writes them."""
    shutil.copytree(INVENTORIES / "storage", tmp_path / "site" / "inventory")
    cluster = load_cluster(tmp_path / "site" / "inventory")
    path = secrets_path(cluster)
    path.mkdir(parents=True, mode=0o700)
    for name, data in (("beegfs-connauth", b"site-connauth\n"), ("ceph.client.hpc.keyring", b"[client.hpc]\n")):
        (path / name).write_bytes(data)
        os.chmod(path / name, 0o600)
    dry = load_or_create(cluster, create=False)
    assert len(dry.munge_key) == 1024 and dry.dbd_password and dry.site["beegfs-connauth"] == b"site-connauth\n"
    assert sorted(f.name for f in path.iterdir()) == ["beegfs-connauth", "ceph.client.hpc.keyring"]
    real = load_or_create(cluster)
    assert (path / "munge.key").read_bytes() == real.munge_key != dry.munge_key
