"""Op lists of the NVIDIA stack roles (driver, fabric manager, CUDA, NCCL, DCGM, containers) per OS
and package source, from recorded facts: exact packages with versions, repositories, holds, services."""

from __future__ import annotations

import pytest

from roles.operations import DPKG_REPAIR
from tests.plan.facts import fresh
from tests.plan.harness import converged, plan_host
from tests.plan.test_roles_plan import DRIVER, cluster_for, commands

NEW_DRIVER = {"debian12": "550.163.02-1", "ubuntu2204": "550.163.02-0ubuntu1", "ubuntu2404": "550.163.02-0ubuntu1",
              "rocky9": "550.163.02-1.el9"}


def ops(os, monkeypatch, host="gpu01", snapshot=None, **kw) -> dict:
    return dict(plan_host(cluster_for(os, **kw), host, os, snapshot or fresh(os), monkeypatch))


@pytest.mark.parametrize("os", ["debian12", "ubuntu2204", "ubuntu2404", "rocky9"])
def test_a_new_driver_pin_changes_exactly_the_driver_operations(os, monkeypatch):
    old, new = DRIVER[os], NEW_DRIVER[os]
    before, ctx = plan_host(cluster_for(os, driver=old), "gpu01", os, fresh(os), monkeypatch, with_context=True)
    installed = converged(before, ctx, fresh(os))
    again = plan_host(cluster_for(os, driver=old), "gpu01", os, installed, monkeypatch)
    after = plan_host(cluster_for(os, driver=new), "gpu01", os, installed, monkeypatch)
    package_ops = {"nvidia_driver: 550.163.01 (open modules), held": "nvidia_driver: 550.163.02 (open modules), held",
                   "fabricmanager: 550.163.01, held": "fabricmanager: 550.163.02, held"}
    changed = {a[0]: b[0] for a, b in zip(again, after) if a != b}
    # the node-local checks expect the new driver too
    expected = dict(package_ops, **{"health: node expectations": "health: node expectations"})
    if os != "rocky9":
        expected[f"nvidia_driver: apt keeps the driver set at {old}"] = f"nvidia_driver: apt keeps the driver set at {new}"
    assert changed == expected
    # converged on the old pin, nothing is left to do for the driver; the new pin reinstalls and re-holds
    assert all(not cmds for op, cmds in again if op in package_ops)
    driver_op = dict(after)["nvidia_driver: 550.163.02 (open modules), held"]
    if os == "rocky9":
        assert driver_op[1].startswith("dnf -q versionlock delete ") and driver_op[-1].startswith("dnf -q versionlock add")
        assert f"nvidia-driver-{new}" in driver_op[-1]
    else:
        assert driver_op[0] == DPKG_REPAIR and driver_op[1] == "apt-get update -q" and "kernel guard" in driver_op[2]
        assert driver_op[3].startswith("apt-mark unhold ") and driver_op[-1].startswith("apt-mark hold ")
        assert f"={new}" in driver_op[4] and f"={old}" not in driver_op[4]


def test_debian_non_free_without_kernel_modules(monkeypatch):
    plan = ops("debian12", monkeypatch, driver="535.261.03-1", nvidia_source="debian")
    driver = plan["nvidia_driver: 535.261.03 (open modules), held"]
    assert "nvidia-smi=535.261.03-1 nvidia-driver=535.261.03-1 nvidia-open-kernel-dkms=535.261.03-1 " \
           "nvidia-persistenced" in driver[-2]
    assert driver[-1] == "apt-mark hold nvidia-driver nvidia-open-kernel-dkms nvidia-smi"  # persistenced: own version
    assert "nvidia: CUDA repository" not in plan


@pytest.mark.parametrize("os,names", [
    ("debian12", "nvidia-smi=550.163.01-1 nvidia-driver=550.163.01-1 nvidia-open-kernel-dkms=550.163.01-1 "
                 "nvidia-persistenced=550.163.01-1"),
    ("ubuntu2204", "nvidia-utils-550=550.163.01-0ubuntu1 nvidia-compute-utils-550=550.163.01-0ubuntu1 "
                   "libnvidia-compute-550=550.163.01-0ubuntu1 nvidia-driver-550-open=550.163.01-0ubuntu1 "
                   "nvidia-dkms-550-open=550.163.01-0ubuntu1"),
    ("rocky9", "nvidia-driver-cuda-550.163.01-1.el9 nvidia-driver-cuda-libs-550.163.01-1.el9 "
               "nvidia-persistenced-550.163.01-1.el9 nvidia-driver-550.163.01-1.el9 "
               "kmod-nvidia-open-dkms-550.163.01-1.el9"),
])
def test_driver_packages_per_os_from_the_cuda_repository(os, names, monkeypatch):
    text = commands(list(ops(os, monkeypatch).items()))
    assert names in text
    if os == "rocky9":
        assert "baseurl=" not in text  # file contents are not commands; the repository file is uploaded:
        assert "upload /etc/yum.repos.d/cuda-rhel9.repo" in text
        assert "upload /etc/dnf/modules.d/nvidia-driver.module" in text
    else:
        assert f"/{os}/x86_64/cuda-keyring_1.1-1_all.deb" in text
        assert f"upload /etc/apt/sources.list.d/cuda-{os}-x86_64.list" in text


def test_ubuntu_server_packages_and_proprietary_modules(monkeypatch):
    cluster = cluster_for("ubuntu2204", nvidia_source="ubuntu", driver="550.163.01-0ubuntu0.22.04.1")
    gpu = cluster.hosts["gpu01"]
    cluster.hosts["gpu01"] = type(gpu)(**{**gpu.__dict__, "settings": {**gpu.settings,
                                                                        "kiln_nvidia_kernel_modules": "proprietary"}})
    plan = dict(plan_host(cluster, "gpu01", "ubuntu2204", fresh("ubuntu2204"), monkeypatch))
    text = commands(list(plan.items()))
    assert "nvidia-driver-550-server=550.163.01-0ubuntu0.22.04.1" in text
    assert "nvidia-dkms-550-server=550.163.01-0ubuntu0.22.04.1" in text and "-open" not in text
    assert "cuda-keyring" not in text


def test_repository_key_comes_before_the_source_that_needs_it(monkeypatch):
    names = list(ops("ubuntu2404", monkeypatch))
    assert names.index("nvidia: CUDA repository key (cuda-keyring)") < names.index("nvidia: CUDA repository")
    assert names.index("nvidia: CUDA repository") < names.index("nvidia_driver: 550.163.01 (open modules), held")


def test_mirror_url_is_used_everywhere(monkeypatch):
    text = commands(list(ops("ubuntu2204", monkeypatch, nvidia_repo_url="http://mirror.site/cuda/").items()))
    assert "http://mirror.site/cuda/ubuntu2204/x86_64/cuda-keyring_1.1-1_all.deb" in text
    assert "developer.download.nvidia.com" not in text


def test_services_start_only_where_the_driver_is_loaded(monkeypatch):
    unloaded = ops("debian12", monkeypatch)
    assert unloaded["nvidia_driver: nvidia-persistenced enabled (running where the driver is loaded)"] == \
        ["systemctl enable nvidia-persistenced.service"]
    assert unloaded["nvidia_driver: nvidia_peermem loaded (where the driver is)"] == []
    loaded = fresh("debian12")
    loaded.modules["nvidia"] = "550.163.01"
    plan = ops("debian12", monkeypatch, snapshot=loaded)
    assert "systemctl start nvidia-persistenced.service" in \
        plan["nvidia_driver: nvidia-persistenced enabled (running where the driver is loaded)"]
    assert plan["nvidia_driver: nvidia_peermem loaded (where the driver is)"] == ["modprobe nvidia_peermem"]
    assert "systemctl start nvidia-dcgm.service" in plan["dcgm: nv-hostengine enabled (running where the driver is loaded)"]


def test_nccl_conf_and_versions(monkeypatch):
    from roles.nccl import nccl_conf
    from roles.context import NodeContext
    cluster = cluster_for("ubuntu2204")
    ctx = NodeContext(cluster, cluster.hosts["gpu01"], None, None)
    assert nccl_conf(ctx).splitlines()[1:] == ["NCCL_IB_HCA=mlx5_0,mlx5_1", "NCCL_NET_GDR_LEVEL=PHB",
                                               "NCCL_SOCKET_IFNAME=eth0"]
    text = commands(list(ops("ubuntu2204", monkeypatch).items()))
    assert "libnccl2=2.21.5-1+cuda12.4 libnccl-dev=2.21.5-1+cuda12.4" in text
    assert "cuda-toolkit-12-4=12.4.1-1" in text and "datacenter-gpu-manager=1:3.3.9" in text


def test_login_nodes_get_pyxis_and_enroot_but_no_driver(monkeypatch):
    plan = ops("debian12", monkeypatch, host="login1")
    assert not any(op.startswith(("nvidia", "cuda", "nccl", "dcgm")) for op in plan)
    assert "containers: pyxis 0.20.0 built" in plan and "containers: enroot 3.5.0, held" in plan
    assert "containers: nvidia-container-toolkit 1.17.8-1, held" not in plan
