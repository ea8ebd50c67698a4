"""The NVIDIA stack's settings and pins are validated as a whole before any connection: each error
names the file and key, and says what to change."""

from __future__ import annotations

import shutil

import yaml

from kiln.inventory.validate import validate
from kiln.versions import upstream
from tests.conftest import INVENTORIES


def errors_for(tmp_path, pins: dict | None = None, settings: dict | None = None) -> list[str]:
    root = tmp_path / "inv"
    shutil.copytree(INVENTORIES / "plan", root)
    versions = root / "group_vars" / "all" / "versions.yml"
    data = yaml.safe_load(versions.read_text())
    data["kiln_versions"].update(pins or {})
    versions.write_text(yaml.safe_dump(data))
    cluster_yml = root / "group_vars" / "all" / "cluster.yml"
    values = yaml.safe_load(cluster_yml.read_text())
    values.update(settings or {})
    cluster_yml.write_text(yaml.safe_dump(values))
    _, errors = validate(root)
    return [f"{e.file}: {e.key}: {e.message}" for e in errors]


def test_the_plan_inventory_is_valid(tmp_path):
    assert errors_for(tmp_path) == []


def test_debian_has_no_nccl_dcgm_or_fabric_manager(tmp_path):
    errors = errors_for(tmp_path, settings={"kiln_nvidia_source": "debian"})
    keys = sorted(e.split(": ")[1] for e in errors)
    assert keys == ["kiln_versions.dcgm", "kiln_versions.fabricmanager", "kiln_versions.nccl"]
    assert all(e.startswith("group_vars/all/versions.yml") and "set it to \"\"" in e for e in errors), errors


def test_an_empty_optional_pin_leaves_the_component_out(tmp_path):
    assert errors_for(tmp_path, {"nccl": "", "dcgm": "", "fabricmanager": "", "cuda": ""},
                      {"kiln_nvidia_source": "debian"}) == []


def test_the_driver_pin_cannot_be_empty(tmp_path):
    (error,) = errors_for(tmp_path, {"nvidia_driver": ""})
    assert "kiln_versions.nvidia_driver" in error and "no pin for nvidia_driver" in error


def test_ubuntu_packages_need_ubuntu_nodes(tmp_path):
    errors = errors_for(tmp_path, {"dcgm": ""}, {"kiln_nvidia_source": "ubuntu"})
    assert len(errors) == 1 and "kiln_nvidia_source" in errors[0] and "debian12" in errors[0]


def test_fabric_manager_must_match_the_driver(tmp_path):
    (error,) = errors_for(tmp_path, {"fabricmanager": "550.127.05-1"})
    assert "kiln_versions.fabricmanager" in error and "550.163.01" in error


def test_nccl_from_nvidia_needs_the_cuda_pin_and_pyxis_needs_enroot(tmp_path):
    errors = errors_for(tmp_path, {"cuda": "", "enroot": ""})
    assert sorted(e.split(": ")[1] for e in errors) == ["kiln_versions.nccl", "kiln_versions.pyxis"]


def test_unknown_kernel_module_flavour_names_the_key(tmp_path):
    errors = errors_for(tmp_path, settings={"kiln_nvidia_kernel_modules": "nouveau"})
    assert len(errors) == 1 and "kiln_nvidia_kernel_modules" in errors[0]


def test_upstream_versions():
    assert upstream("535.261.03-1") == "535.261.03"
    assert upstream("1:3.3.9") == "3.3.9"
    assert upstream("550.163.01-0ubuntu0.22.04.1") == "550.163.01"
    assert upstream("11.8.89~11.8.0-5~deb12u1") == "11.8.89"
