"""Team quotas in the inventory (kiln/inventory/quotas.py): each resolves to its mount and the GlusterFS
volume's server, and what kiln cannot set is refused naming the team's key."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from kiln.inventory import load_cluster
from kiln.inventory.errors import InventoryInvalid
from kiln.inventory.quotas import nfs_quotas_here, served_here, team_quotas
from tests.conftest import INVENTORIES


def _inventory(tmp_path: Path, quotas: dict) -> Path:
    inv = tmp_path / "inv"
    shutil.copytree(INVENTORIES / "storage", inv)
    cluster = inv / "group_vars" / "all" / "cluster.yml"
    data = yaml.safe_load(cluster.read_text())
    if quotas:
        data["kiln_teams"][0]["quotas"] = quotas
    cluster.write_text(yaml.safe_dump(data))
    cpu = inv / "group_vars" / "cpu.yml"  # NFS mounts with team directories: /home from nas1, /datasets from elsewhere
    cpu.write_text(cpu.read_text().replace('timeo=600,retrans=2"}', 'timeo=600,retrans=2", team_directories: [projects]}')
                   .replace('source: "nas1:/srv/datasets", options: "ro,vers=4.2"}',
                            'source: "nas9:/srv/datasets", options: "ro,vers=4.2", team_directories: [projects]}'))
    hosts = inv / "hosts.yml"
    hosts.write_text(hosts.read_text().replace('- {path: /ceph, type: cephfs, source: "cephfs:/volumes/hpc"}',
                                               '- {path: /ceph, type: cephfs, source: "cephfs:/volumes/hpc", '
                                               'team_directories: [projects]}'))
    return inv


def test_a_quota_resolves_to_the_volume_and_the_server_that_sets_it(tmp_path):
    cluster = load_cluster(_inventory(tmp_path, {"/scratch": "2TB"}))
    [quota] = team_quotas(cluster)
    assert (quota.team, quota.server, quota.volume, quota.path_in_volume, quota.limit) == \
        ("vision", "nas1", "scratch", "/vision", "2TB")
    assert served_here(cluster, cluster.hosts["nas1"], "scratch") == [quota]
    assert served_here(cluster, cluster.hosts["cpu01"], "scratch") == []


@pytest.mark.parametrize("quotas, key, said", [
    ({"/scratch": "2T"}, "kiln_teams[0].quotas./scratch", "is not a quota"),
    ({"/scratch": "0GB"}, "kiln_teams[0].quotas./scratch", "is not a quota"),
    ({"/scratch": "1GB; rm -rf /"}, "kiln_teams[0].quotas./scratch", "is not a quota"),
    ({"/nowhere": "1GB"}, "kiln_teams[0].quotas./nowhere", "holds no team directories"),
    ({"/ceph/projects": "1GB"}, "kiln_teams[0].quotas./ceph/projects", "on cephfs, where kiln sets no quotas yet"),
    ({"/datasets/projects": "1GB"}, "kiln_teams[0].quotas./datasets/projects", "no host of the inventory exports it"),
])
def test_a_quota_kiln_cannot_set_is_refused_naming_the_teams_key(tmp_path, quotas, key, said):
    with pytest.raises(InventoryInvalid) as raised:
        load_cluster(_inventory(tmp_path, quotas))
    found = [e for e in raised.value.errors if said in e.message]
    assert found, [str(e) for e in raised.value.errors]
    assert found[0].key.startswith(key.split(".")[0]) and found[0].file.endswith("cluster.yml"), found[0]


def test_an_nfs_quota_resolves_to_the_team_directory_on_the_exporting_server(tmp_path):
    cluster = load_cluster(_inventory(tmp_path, {"/home/projects": "100GB"}))
    [(quota, path)] = nfs_quotas_here(cluster, cluster.hosts["nas1"])
    assert (quota.team, quota.limit, path) == ("vision", "100GB", "/srv/home/projects/vision")
    assert nfs_quotas_here(cluster, cluster.hosts["cpu01"]) == []


def test_a_lustre_quota_needs_the_teams_gid(tmp_path):
    inv = _inventory(tmp_path, {})
    cluster_yml = inv / "group_vars" / "all" / "cluster.yml"
    data = yaml.safe_load(cluster_yml.read_text())
    data["kiln_teams"][1]["quotas"] = {"/lustre/projects": "1TB"}
    del data["kiln_teams"][1]["gid"]
    cluster_yml.write_text(yaml.safe_dump(data))
    with pytest.raises(InventoryInvalid) as raised:
        load_cluster(inv)
    assert any("a lustre quota counts by the team's gid" in e.message and e.key == "kiln_teams[1].quotas./lustre/projects"
               for e in raised.value.errors), raised.value.errors


def test_a_volume_no_inventory_host_serves_is_refused(tmp_path):
    inv = _inventory(tmp_path, {"/scratch": "1GB"})
    hosts = inv / "hosts.yml"
    hosts.write_text(hosts.read_text().replace("- {name: scratch, brick: /srv/gluster/scratch}",
                                               "- {name: other, brick: /srv/gluster/other}"))
    with pytest.raises(InventoryInvalid) as raised:
        load_cluster(inv)
    assert any("no host of the inventory serves GlusterFS volume 'scratch' as nas1" in e.message
               and e.key == "kiln_teams[0].quotas./scratch" for e in raised.value.errors), raised.value.errors
