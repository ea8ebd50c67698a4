"""Op lists of the rdma role for every supported OS, from recorded facts (no connection): InfiniBand with
IPoIB and opensm on the inbox stack, RoCE on NVIDIA's DOCA stack with lossless settings, soft-RoCE (rxe).

The expected lists live in tests/plan/expected/rdma-<os>.json; a deliberate change is reviewed by
regenerating them (KILN_UPDATE_PLANS=1 pytest tests/plan) and reading the diff.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from kiln.inventory import load_cluster
from roles.nccl import nccl_conf
from roles.platform import PLATFORMS
from tests.conftest import INVENTORIES
from tests.plan.facts import fresh
from tests.plan.harness import assert_reviewed, plan_host, role_ops
from tests.plan.test_roles_plan import SLURM

HOSTS = ("ib01", "roce01", "lab01")


def cluster_for(os: str):
    cluster = load_cluster(INVENTORIES / "fabric")
    return replace(cluster, versions=dict(cluster.versions, slurm=SLURM[os]))


def commands(plan) -> str:
    return "\n".join(c for _, cmds in plan for c in cmds)


def rdma_ops(plan) -> list:
    return role_ops(plan, "rdma:", "ofed:")


@pytest.mark.parametrize("os", sorted(PLATFORMS))
@pytest.mark.proves(tier="plan", plan="rdma-{os}.json")
def test_rdma_op_list_matches_the_reviewed_one(os, monkeypatch):
    cluster = cluster_for(os)
    actual = {name: rdma_ops(plan_host(cluster, name, os, fresh(os), monkeypatch)) for name in HOSTS}
    assert_reviewed(f"rdma-{os}", actual)


@pytest.mark.parametrize("os", sorted(PLATFORMS))
def test_infiniband_inbox_stack_ipoib_in_the_os_own_configuration_and_opensm(os, monkeypatch):
    plan, ctx = plan_host(cluster_for(os), "ib01", os, fresh(os), monkeypatch, with_context=True)
    text, files = commands(plan), {f.path: f for f in ctx.files}
    tools = "ibverbs-utils" if PLATFORMS[os].family == "debian" else "libibverbs-utils"
    assert all(p in text for p in ("rdma-core", tools, "infiniband-diags", "perftest", "opensm"))
    rdma = commands([op for op in plan if op[0].startswith("rdma:")])
    assert "apt-mark hold" not in rdma and "versionlock" not in rdma  # inbox: the distribution's, not held
    assert files["/etc/modules-load.d/kiln-rdma.conf"].content.decode().splitlines()[1:] == \
        ["ib_umad", "rdma_ucm", "ib_ipoib"]
    assert "modprobe -a ib_umad rdma_ucm ib_ipoib" in text
    if os.startswith("ubuntu"):
        f = files["/etc/netplan/60-kiln-ipoib.yaml"]
        assert f.mode == "600" and 'addresses: ["10.20.0.11/16"]' in f.content.decode()
        assert "infiniband-mode: connected" in f.content.decode() and "mtu: 65520" in f.content.decode()
        assert "netplan apply" in text
    elif os == "rocky9":
        f = files["/etc/NetworkManager/system-connections/kiln-ipoib.nmconnection"]
        assert f.mode == "600" and "address1=10.20.0.11/16" in f.content.decode()
        assert "transport-mode=connected" in f.content.decode() and "nmcli connection up kiln-ipoib" in text
    else:
        f = files["/etc/systemd/network/60-kiln-ipoib.network"].content.decode()
        assert "Name=ib0" in f and "Address=10.20.0.11/16" in f and "Mode=connected" in f and "MTUBytes=65520" in f
        assert "networkctl reload" in text
    assert "systemctl start opensm.service" in text
    assert "NCCL_IB_HCA=mlx5_0,mlx5_1" in nccl_conf(ctx)
    # ib02: no subnet manager of its own
    assert "opensm" not in commands(plan_host(cluster_for(os), "ib02", os, fresh(os), monkeypatch))


@pytest.mark.parametrize("os", sorted(PLATFORMS))
def test_roce_on_nvidia_stack_pinned_held_with_lossless_settings(os, monkeypatch):
    plan, ctx = plan_host(cluster_for(os), "roce01", os, fresh(os), monkeypatch, with_context=True)
    text, files = commands(plan), {f.path: f for f in ctx.files}
    apt = PLATFORMS[os].uses_apt
    assert ("doca-ofed=2.9.1-1" if apt else "doca-ofed-2.9.1-1") in text
    assert ("apt-mark hold doca-ofed" if apt else "versionlock add doca-ofed-2.9.1-1") in text
    repo = files["/etc/apt/sources.list.d/kiln-ofed.list" if apt else "/etc/yum.repos.d/kiln-ofed.repo"].content.decode()
    assert ("signed-by=/usr/share/keyrings/kiln-ofed.gpg" if apt else "gpgcheck=1") in repo
    unit = files["/etc/systemd/system/kiln-roce-qos.service"].content.decode()
    assert "ExecStart=mlnx_qos -i eth2 --trust dscp --pfc 0,0,0,1,0,0,0,0" in unit
    assert "ecn/roce_np/enable" in unit and "ecn/roce_rp/enable" in unit
    assert "systemctl start kiln-roce-qos.service" in text
    conf = nccl_conf(ctx)
    assert "NCCL_IB_GID_INDEX=3" in conf and "NCCL_IB_TC=106" in conf


@pytest.mark.parametrize("os", sorted(PLATFORMS))
def test_rxe_soft_roce_at_every_boot_and_again_when_gone(os, monkeypatch):
    plan, ctx = plan_host(cluster_for(os), "lab01", os, fresh(os), monkeypatch, with_context=True)
    text, files = commands(plan), {f.path: f for f in ctx.files}
    unit = files["/etc/systemd/system/kiln-rxe.service"].content.decode()
    assert "rdma link add rxe0 type rxe netdev eth1" in unit and "BindsTo=sys-subsystem-net-devices-eth1.device" in unit
    assert "rdma_rxe" in files["/etc/modules-load.d/kiln-rdma.conf"].content.decode()
    assert "systemctl enable kiln-rxe.service" in text and "systemctl start kiln-rxe.service" in text
    assert "NCCL_IB_GID_INDEX=1" in nccl_conf(ctx) and "NCCL_IB_DISABLE" not in nccl_conf(ctx)


def test_rxe_device_gone_restarts_its_unit(monkeypatch):
    """A deploy that finds rxe0 gone (rdma link delete, a netdev that went away) sets it up again."""
    from roles.snapshot import UnitState
    snap = fresh("debian12")
    snap.units["kiln-rxe.service"] = UnitState("loaded", "active", "enabled")
    text = commands(plan_host(cluster_for("debian12"), "lab01", "debian12", snap, monkeypatch))
    assert "systemctl restart kiln-rxe.service" in text


def test_in_a_container_kernel_parts_are_skipped_with_a_reason(monkeypatch):
    plan = plan_host(cluster_for("debian12"), "ib01", "debian12", fresh("debian12"), monkeypatch, in_container=True)
    ops = dict(plan)
    skipped = [op for op in ops if op.endswith("(skipped in a container: no kernel of its own)")]
    assert "rdma: kernel modules loaded now (skipped in a container: no kernel of its own)" in skipped
    assert all(ops[op] == [] for op in skipped)
    text = commands(plan)
    assert "modprobe" not in text and "opensm.service" not in text
    assert "upload /etc/modules-load.d/kiln-rdma.conf" in text  # the files are still written
    assert "rdma-core" in text
