"""A real RDMA stack on the VM tier: soft-RoCE (rdma_rxe) between the compute VMs, set up by the rdma role.

No fabric simulator is on the VMs (only the GPU tools are simulated): ibstat, ibv_devinfo and ib_write_bw
are Debian's, talking to the kernel's rxe device. Under emulation the bandwidth is small; the plumbing
and the formats are real. Shown: rxe0 PORT_ACTIVE after kiln deploy on every compute VM; kiln check's
fabric suite passes and its ib_write_bw ring reports a real figure per pair; with one VM's rxe link
deleted, exactly that VM fails its FABRIC_* checks; a redeploy brings it back."""

from __future__ import annotations

import pytest

import json
import re

from tests.testbed.slurm_helpers import copy_inventory, deploy_json, kiln, ok, on, wait_for


def _fabric_check(tb, tmp_path, inventory=None, name="fabric.json"):
    out = kiln("check", "-i", str(inventory or tb.inventory), "--suite", "fabric", "--json", str(tmp_path / name),
               timeout=300)
    return out, json.loads((tmp_path / name).read_text())


def _failed(data, node):
    return sorted({c["id"] for c in data["nodes"][node]["checks"] if c["severity"] == "fail"})


def test_every_compute_vm_has_an_active_soft_roce_device_from_real_tools(vms):
    for node in vms.computes:
        assert ok(vms, node, "command -v ibstat ibv_devinfo ib_write_bw").split() == \
            ["/usr/sbin/ibstat", "/usr/bin/ibv_devinfo", "/usr/bin/ib_write_bw"]  # Debian's, no simulator
        devinfo = ok(vms, node, "ibv_devinfo -d rxe0")
        assert "PORT_ACTIVE" in devinfo and "Ethernet" in devinfo, devinfo
        assert "netdev eth0" in ok(vms, node, "rdma link show rxe0/1")
        assert ok(vms, node, "systemctl is-enabled kiln-rxe.service").strip() == "enabled"
        print(f"{node}: ibstat\n" + ok(vms, node, "ibstat rxe0"))


@pytest.mark.proves("rdma", "kiln check", tier="vm")
def test_fabric_suite_passes_and_the_bandwidth_ring_runs_each_pair(vms, tmp_path):
    """The fabric suite passes on real rxe output. The ring's ib_write_bw runs for real between the VMs
    (connection, QP exchange, 200 messages of 64 KiB each way) and its result row is read per pair; the
    figure itself is perftest's, which times itself by CPU cycles at /proc/cpuinfo's MHz and prints 0
    under QEMU's emulation, so no floor is asserted here."""
    out, data = _fabric_check(vms, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    for node in vms.computes:
        assert _failed(data, node) == [], data["nodes"][node]
    ring = copy_inventory(vms.inventory, tmp_path / "ring", {"kiln_check_ib_bandwidth_gbps": 0.001})
    out, data = _fabric_check(vms, tmp_path, ring, name="ring.json")
    for node in vms.computes:
        [bandwidth] = [c for c in data["nodes"][node]["checks"] if c["id"] == "FABRIC_BANDWIDTH"]
        assert re.match(rf"{node} -> kilnvm\d+ via rxe0: [0-9.e-]+ Gb/s", bandwidth["message"]), bandwidth
        print(f"{node}: {bandwidth['severity']} {bandwidth['message']}")


def test_a_deleted_rxe_link_fails_exactly_that_vm_and_a_redeploy_brings_it_back(vms, tmp_path):
    broken, healthy = vms.computes[1], vms.computes[0]
    ok(vms, broken, "rdma link delete rxe0")
    try:
        out, data = _fabric_check(vms, tmp_path, name="broken.json")
        assert out.returncode == 1
        failed = _failed(data, broken)
        assert failed and all(i.startswith("FABRIC_") for i in failed), failed
        assert _failed(data, healthy) == []
        assert _failed(data, vms.controller) == []
    finally:
        rc, _, text = deploy_json(vms.inventory, "--limit", broken)
    assert rc == 0, text
    assert "PORT_ACTIVE" in ok(vms, broken, "ibv_devinfo -d rxe0")
    out, data = _fabric_check(vms, tmp_path, name="back.json")
    assert out.returncode == 0, out.stdout + out.stderr
    assert on(vms, broken, "rdma link show rxe0/1").returncode == 0
    # its health check may have drained it while the link was gone; the node check run now (as an operator
    # would after the fix, instead of waiting for the next interval) puts it back in service
    wait_for(lambda: on(vms, broken, "/usr/local/sbin/kiln-node-check").returncode == 0 and
             "drain" not in on(vms, vms.controller, f"sinfo -h -n {broken} -o %T").stdout, timeout=120, interval=5,
             what=f"{broken} back in service")
