"""The inventory the testbed writes is one `kiln inventory validate` accepts (no root needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiln.inventory import load_cluster
from kiln.testbed.inventory import write_inventory
from kiln.testbed.testbed import Testbed


def test_written_inventory_validates_and_describes_the_nodes(tmp_path):
    tb = Testbed("unit", progress=lambda m: None)
    nodes = tb.node_list(4)
    path = tmp_path / "testbed"
    write_inventory(path, tb, nodes)
    cluster = load_cluster(path)
    assert [h.name for h in cluster.controllers] == ["unit01"]
    assert sorted(h.name for h in cluster.compute) == ["unit02", "unit03", "unit04"]
    assert cluster.hosts["unit03"].address == nodes[2].address
    assert len({h.address for h in cluster.hosts.values()}) == 4
    conn = cluster.hosts["unit02"].connection
    assert conn["ssh_strict_host_key_checking"] == "yes"
    assert conn["ssh_known_hosts_file"] == str(tb.known_hosts)
    assert conn["ssh_key"] == str(tb.key)
    # rewritten on the next up, but never over a directory the testbed did not write
    write_inventory(path, tb, tb.node_list(2))
    assert sorted(load_cluster(path).hosts) == ["unit01", "unit02"]
    foreign = tmp_path / "mine"
    foreign.mkdir()
    with pytest.raises(FileExistsError):
        write_inventory(foreign, tb, nodes)


def test_a_debian13_testbed_writes_a_valid_inventory_with_its_own_pins(tmp_path):
    from kiln.testbed.inventory import DRIVER_UPGRADES, VERSIONS_BY_OS

    tb = Testbed("unit13", progress=lambda m: None, node_os="debian13")
    path = tmp_path / "testbed"
    write_inventory(path, tb, tb.node_list(3))
    cluster = load_cluster(path)
    assert {h.os for h in cluster.hosts.values()} == {"debian13"}
    assert cluster.versions["slurm"] == VERSIONS_BY_OS["debian13"]["slurm"] == "24.11.5-4+deb13u1"
    assert cluster.versions["nvidia_driver"] == "550.163.01-2" and DRIVER_UPGRADES["debian13"] == "550.163.01-4~bpo13+1"
    assert cluster.setting("slurm_cgroup_plugin") == "cgroup/v1"  # containers here: see kiln/testbed/base.py


def test_an_os_the_testbed_cannot_build_is_refused():
    from kiln.testbed.host import TestbedError

    with pytest.raises(TestbedError, match="--os ubuntu2404: use one of debian12, debian13"):
        Testbed("unit", node_os="ubuntu2404")


@pytest.mark.parametrize("name", ["Kiln", "kiln-1", "toolongname", ""])
def test_bad_testbed_names_are_refused(name):
    from kiln.testbed.host import TestbedError

    with pytest.raises(TestbedError):
        Testbed(name)


def test_testbed_names_get_distinct_subnets():
    """The testbeds one test run brings up, some at once (three lanes: tests/lanes.py), never share a subnet."""
    from tests.testbed.conftest import SHARED_NAMES
    names = ["kiln", *set(SHARED_NAMES.values()), "kilnapt", "kilndown", "kilnkill", "bench", "kilnd13", "wheel",
             "kilnvm"]
    assert len({Testbed(n).subnet for n in names}) == len(names)


def test_base_recipe_hash_changes_with_the_recipe_and_differs_per_os(monkeypatch):
    from kiln.image import base

    before = {os: base.recipe_hash(os) for os in base.LIVE}
    assert len(set(before.values())) == len(base.LIVE)
    monkeypatch.setattr(base, "DEB_PACKAGES", base.DEB_PACKAGES + ("curl",))
    assert all(base.recipe_hash(os) != before[os] for os in base.LIVE)
    assert Path(base.base_dir("debian13")).name == f"debian13-{base.recipe_hash('debian13')}"
    assert "Suites: trixie trixie-updates trixie-backports" in base.apt_sources("debian13")
    assert "Suites: trixie-security" in base.apt_sources("debian13")
    assert "bookworm-backports" not in base.apt_sources("debian12")


def test_containers_check_their_bind_share_and_vms_their_network_filesystems(tmp_path):
    """nspawn nodes share a host directory (a bind mount kiln checks as shared storage); VMs mount the real
    NFS and GlusterFS their controller serves, and their virtio-9p share of that directory is testbed
    plumbing kiln does not check (QEMU's 9p can outwait the storage timeout on an emulated VM)."""
    from kiln.testbed.inventory import GLUSTER_MOUNT, NFS_MOUNT
    mounts = {}
    for kind in ("nspawn", "vm"):
        tb = Testbed("unit", progress=lambda m: None, node_kind=kind)
        write_inventory(tmp_path / kind, tb, tb.node_list(3))
        mounts[kind] = [m.path for m in load_cluster(tmp_path / kind).hosts["unit02"].storage_mounts]
    assert mounts["nspawn"] == ["/scratch", "/srv/kiln-shared"]
    assert mounts["vm"] == ["/scratch", NFS_MOUNT, GLUSTER_MOUNT]


def test_containers_keep_team_directories_on_the_share_their_login_host_probes(tmp_path):
    """The nspawn share holds projects/TEAM and scratch/TEAM; the controller (the login host) mounts it too,
    so the isolation suite probes them as each team's probe account; one team's are its own, the other's not."""
    from kiln.check.expectations import node_expectations
    tb = Testbed("unit", progress=lambda m: None)
    write_inventory(tmp_path / "tb", tb, tb.node_list(3))
    cluster = load_cluster(tmp_path / "tb")
    isolation = node_expectations(cluster, cluster.hosts["unit01"])["isolation"]
    assert isolation["team_directories"] == [
        {"path": f"/srv/kiln-shared/{d}/{t}", "team": t} for d in ("projects", "scratch") for t in ("vision", "language")]
    assert isolation["team_parents"] == ["/srv/kiln-shared/projects", "/srv/kiln-shared/scratch"]
    assert isolation["probe_teams"] == {"kiln-probe-vision": "vision", "kiln-probe-language": "language"}
    assert node_expectations(cluster, cluster.hosts["unit02"])["isolation"] == {}


def test_vms_run_their_health_check_less_often_than_containers(tmp_path):
    """Under software emulation a health run costs a VM seconds of CPU: every 10 s it kept the host's cores
    busy, so VMs check every VM_HEALTH_CHECK_INTERVAL s; containers keep the short interval their tests
    time drains by."""
    from kiln.testbed.inventory import HEALTH_CHECK_INTERVAL, VM_HEALTH_CHECK_INTERVAL
    interval = {}
    for kind in ("nspawn", "vm"):
        tb = Testbed("unit", progress=lambda m: None, node_kind=kind)
        write_inventory(tmp_path / kind, tb, tb.node_list(3))
        interval[kind] = load_cluster(tmp_path / kind).health_check_interval
    assert interval == {"nspawn": HEALTH_CHECK_INTERVAL, "vm": VM_HEALTH_CHECK_INTERVAL}
    assert VM_HEALTH_CHECK_INTERVAL > HEALTH_CHECK_INTERVAL


def test_remediation_is_on_for_containers_off_for_vms_and_a_choice_to_turn_it_off_survives_a_rewrite(tmp_path):
    """kiln testbed up writes the inventory again (a node's power loss, a restart): the shared test
    testbed's 'remediation off' must stay off, or kiln-remediate repairs nodes other tests break on purpose."""
    import yaml
    for kind, enabled in (("nspawn", True), ("vm", False)):
        tb = Testbed("unit", progress=lambda m: None, node_kind=kind)
        write_inventory(tmp_path / kind, tb, tb.node_list(3))
        assert load_cluster(tmp_path / kind).setting("remediation").enabled is enabled
    tb = Testbed("unit", progress=lambda m: None)
    path = tmp_path / "nspawn"
    settings = path / "group_vars" / "all" / "testbed.yml"
    data = yaml.safe_load(settings.read_text())
    data["kiln_remediation"] = {**data["kiln_remediation"], "enabled": False}
    settings.write_text(yaml.safe_dump(data))
    write_inventory(path, tb, tb.node_list(4))
    assert load_cluster(path).setting("remediation").enabled is False
    assert sorted(load_cluster(path).hosts) == ["unit01", "unit02", "unit03", "unit04"]


def test_two_callers_at_once_build_an_os_base_once(tmp_path, monkeypatch):
    """CI builds the bases beside the unit tests while a testbed may come up: the second caller waits for
    the first's lock and finds the base complete (a second build would remove the first's half-built tree)."""
    import threading
    import time as clock

    from kiln.image import base

    monkeypatch.setattr(base, "CACHE", tmp_path)
    builds = []

    def build(os, final, progress):  # noqa: ARG001
        builds.append(os)
        clock.sleep(0.3)
        (final / "rootfs").mkdir(parents=True)
        (final / "complete").write_text("x\n")
        return final / "rootfs"

    monkeypatch.setattr(base, "_build", build)
    got = []
    threads = [threading.Thread(target=lambda: got.append(base.ensure_base("debian13", lambda m: None)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert builds == ["debian13"] and got == [base.base_dir("debian13") / "rootfs"] * 2


def test_container_compute_nodes_name_the_testbeds_bmc_pinned_by_its_certificate(tmp_path):
    """Each container compute node has the testbed's BMC (kiln/testbed/bmc.py) with the fingerprint of the
    certificate it serves; the password is placed where kiln reads the inventory's secrets, 0600, and kept
    across rewrites; kiln's secrets load it, and the controller's kiln-remediate config names it."""
    import ssl

    from checks.redfish import fingerprint_of
    from kiln.secrets import load_or_create
    from kiln.testbed.bmc import PORT, USER
    tb = Testbed("unit", progress=lambda m: None)
    path = tmp_path / "inventory" / "testbed-unit"
    write_inventory(path, tb, tb.node_list(3))
    cluster = load_cluster(path)
    der = ssl.PEM_cert_to_DER_cert(tb.bmc.cert.read_text())
    for name in ("unit02", "unit03"):
        bmc = cluster.hosts[name].settings["kiln_bmc"]
        assert (bmc.host, bmc.port, bmc.user, bmc.system) == (tb.host_address, PORT, USER, f"/redfish/v1/Systems/{name}")
        assert bmc.fingerprint == fingerprint_of(der)
    assert cluster.hosts["unit01"].settings["kiln_bmc"] is None
    assert (tb.bmc.key.stat().st_mode & 0o777, tb.bmc.password_file.stat().st_mode & 0o777) == (0o600, 0o600)
    tb.bmc.place_password(tmp_path / "inventory" / "secrets" / "unit")
    first = tb.bmc.password_file.read_text()
    write_inventory(path, tb, tb.node_list(3))
    tb.bmc.place_password(tmp_path / "inventory" / "secrets" / "unit")
    assert tb.bmc.password_file.read_text() == first  # made once
    assert len(first.strip()) == 20  # the most IPMI v2.0 takes: the testbed's IPMI endpoint shares it
    placed = tmp_path / "inventory" / "secrets" / "unit" / "bmc.password"
    assert placed.stat().st_mode & 0o777 == 0o600
    assert load_or_create(cluster).site["bmc.password"].decode().strip() == first.strip()
    vm = Testbed("unit", progress=lambda m: None, node_kind="vm")
    write_inventory(tmp_path / "vm", vm, vm.node_list(3))
    vms = load_cluster(tmp_path / "vm").hosts  # a VM's power is the testbed's too (QEMU stopped and started)
    assert [n for n, h in vms.items() if h.settings["kiln_bmc"]] == ["unit02", "unit03"]


def test_the_isolation_suite_is_told_which_protections_the_inventory_turns_off(tmp_path):
    """PrivateData without jobs and SSH password login are an operator's choices: the suite's expectations
    name the setting for each (checks/isolation.py then warns where that probe gets through); by default none."""
    from dataclasses import replace

    from kiln.check.expectations import node_expectations
    tb = Testbed("unit", progress=lambda m: None)
    write_inventory(tmp_path / "tb", tb, tb.node_list(3))
    cluster = load_cluster(tmp_path / "tb")
    assert node_expectations(cluster, cluster.hosts["unit01"])["isolation"]["allowed"] == {}
    chosen = replace(cluster, settings=dict(cluster.settings, kiln_slurm_private_data=["usage", "users"],
                                            kiln_ssh_password_login=True))
    assert node_expectations(chosen, chosen.hosts["unit01"])["isolation"]["allowed"] == {
        "ISOLATION_JOBS": "kiln_slurm_private_data leaves out jobs",
        "ISOLATION_SSH_PASSWORD": "kiln_ssh_password_login is true"}
