"""GlusterFS over TLS in the inventory (kiln/inventory/gluster.py): which hosts speak it, what a volume admits,
and the one mix a client cannot make (a volume kiln serves beside one from outside) refused naming its key."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from kiln.inventory import load_cluster
from kiln.inventory.errors import InventoryInvalid
from kiln.inventory.gluster import mount_server, tls_hosts, volume_clients
from roles.gluster_tls import volume_option_values
from tests.conftest import INVENTORIES


def _inventory(tmp_path: Path, extra_mount: str = "", tls: bool | None = None) -> Path:
    inv = tmp_path / "inv"
    shutil.copytree(INVENTORIES / "storage", inv)
    if extra_mount:
        cpu = inv / "group_vars" / "cpu.yml"
        cpu.write_text(cpu.read_text() + extra_mount + "\n")
    if tls is not None:
        cluster = inv / "group_vars" / "all" / "cluster.yml"
        data = yaml.safe_load(cluster.read_text())
        data["kiln_storage_gluster_tls"] = tls
        cluster.write_text(yaml.safe_dump(data))
    return inv


def test_a_volume_admits_its_server_and_the_hosts_that_mount_it(tmp_path):
    cluster = load_cluster(_inventory(tmp_path))
    nas1 = cluster.hosts["nas1"]
    assert volume_clients(cluster.hosts, nas1, "scratch") == ["nas1", "cpu01", "cpu02"]
    assert volume_option_values(volume_clients(cluster.hosts, nas1, "scratch")) == {
        "client.ssl": "on", "server.ssl": "on", "auth.ssl-allow": "nas1,cpu01,cpu02"}
    [scratch] = [m for m in cluster.hosts["cpu01"].storage_mounts if m.type == "glusterfs"]
    assert mount_server(cluster.hosts, scratch) is nas1
    # gpu01 mounts no GlusterFS, ctl1 neither: no TLS files there
    assert tls_hosts(cluster.hosts, True) == ["nas1", "cpu01", "cpu02"]
    assert tls_hosts(cluster.hosts, False) == []
    assert cluster.setting("storage_gluster_tls") is True


def test_a_volume_from_outside_the_inventory_gets_no_tls_and_is_not_admitted_anywhere(tmp_path):
    inv = _inventory(tmp_path)
    cpu = inv / "group_vars" / "cpu.yml"
    cpu.write_text(cpu.read_text().replace('source: "nas1:/scratch"', 'source: "fs9.example.org:/scratch"'))
    cluster = load_cluster(inv)
    [scratch] = [m for m in cluster.hosts["cpu01"].storage_mounts if m.type == "glusterfs"]
    assert mount_server(cluster.hosts, scratch) is None
    assert tls_hosts(cluster.hosts, True) == ["nas1"]  # the server of its own volume only
    assert volume_clients(cluster.hosts, cluster.hosts["nas1"], "scratch") == ["nas1"]


OUTSIDE = '  - {path: /outside, type: glusterfs, source: "fs9.example.org:/data", options: "rw"}'


def test_a_host_mounting_a_tls_volume_beside_an_outside_one_is_refused_naming_the_key(tmp_path):
    with pytest.raises(InventoryInvalid) as raised:
        load_cluster(_inventory(tmp_path, OUTSIDE))
    found = [e for e in raised.value.errors if "speaks TLS to every server or to none" in e.message]
    assert found, [str(e) for e in raised.value.errors]
    assert found[0].key == "kiln_storage_mounts" and found[0].file.endswith("cpu.yml"), found[0]
    assert "fs9.example.org:/data" in found[0].message and "kiln_storage_gluster_tls off" in found[0].message


def test_with_tls_off_the_same_mix_is_accepted_and_no_host_speaks_tls(tmp_path):
    cluster = load_cluster(_inventory(tmp_path, OUTSIDE, tls=False))
    assert tls_hosts(cluster.hosts, bool(cluster.setting("storage_gluster_tls"))) == []


# /var/lib/glusterd/vols/scratch/info as glusterd 10 keeps it once kiln set the volume's TLS (key=value lines)
INFO = """type=0
count=1
status=1
sub_count=0
version=4
transport-type=0
volume-id=2b0e7c1c-7a4e-4a55-9b2d-6c3f0d3d9a11
username=5c3e1f0a-1f2b-4c7e-8d9a-0b1c2d3e4f50
password=6d4f2a1b-2c3d-4e5f-9a0b-1c2d3e4f5a61
op-version=1
client-op-version=1
quota-version=0
parent_volname=N/A
restored_from_snap=00000000-0000-0000-0000-000000000000
snap-max-hard-limit=256
client.ssl=on
server.ssl=on
auth.ssl-allow=nas1,cpu01,cpu02
nfs.disable=on
brick-0=nas1:-srv-gluster-scratch
"""


def test_the_storage_suite_fails_a_volume_turned_to_clear_text_another_host_admitted_or_secure_access_gone(tmp_path):
    from checks.gluster_tls import command
    from checks.node import Result
    from checks.suites import run_suites
    from kiln.check.expectations import node_expectations
    cluster = load_cluster(_inventory(tmp_path))
    server, client = (node_expectations(cluster, cluster.hosts[n]) for n in ("nas1", "cpu01"))
    assert server["gluster_tls"]["volumes"] == {"scratch": {"client.ssl": "on", "server.ssl": "on",
                                                             "auth.ssl-allow": "nas1,cpu01,cpu02"}}
    assert client["gluster_tls"] == {"secure_access": "/var/lib/glusterd/secure-access", "volumes": {}}
    assert node_expectations(cluster, cluster.hosts["gpu01"])["gluster_tls"] == {}  # mounts no GlusterFS

    class Answers:
        name = "nas1"

        def __init__(self, text):
            self.text = text

        def run(self, cmd, timeout=None):
            assert cmd == command(server["gluster_tls"]), cmd
            return Result(0, self.text)

    expect = {"gluster_tls": server["gluster_tls"]}
    healthy = "@@kiln-gluster secure-access yes\n@@kiln-gluster volume scratch\n" + INFO

    def failed(text):
        return [v.message for v in run_suites(Answers(text), expect, ["storage"]) if v.failed]

    assert failed(healthy) == []
    assert failed(healthy.replace("server.ssl=on", "server.ssl=off")) == [
        "GlusterFS volume scratch has server.ssl off, kiln sets on: file contents cross the network readable "
        "(kiln deploy sets it and starts the volume again)"]
    assert "client.ssl unset" in failed(healthy.replace("client.ssl=on\n", ""))[0]
    assert failed(healthy.replace("auth.ssl-allow=nas1,cpu01,cpu02", "auth.ssl-allow=*")) == [
        "GlusterFS volume scratch admits '*', the hosts that mount it are 'nas1,cpu01,cpu02' (kiln deploy sets it "
        "and starts the volume again)"]
    assert failed(healthy.replace("secure-access yes", "secure-access no")) == [
        "/var/lib/glusterd/secure-access is missing: glusterd's management path and the volume-file fetch are "
        "clear text (kiln deploy writes it)"]
    gone = "@@kiln-gluster secure-access yes\n@@kiln-gluster volume scratch\n@@kiln-gluster no-info\n"
    assert "has no /var/lib/glusterd/vols/scratch/info" in failed(gone)[0]
    assert "reading GlusterFS's TLS state failed" in failed("")[0]
