"""The loader on YAML and INI inventories: group_vars files and directories, ranges, templates, precedence."""

from __future__ import annotations

import shutil

import pytest

from kiln.inventory import InventoryInvalid, load_cluster
from kiln.inventory.files import expand_host_pattern
from kiln.inventory.loader import load_raw, plain
from tests.conftest import INVENTORIES, REPO


def test_yaml_inventory_ranges_templates_and_group_vars_directory():
    cluster = load_cluster(INVENTORIES / "small")
    assert sorted(cluster.groups["gpu_a"]) == ["gpu01", "gpu02", "gpu03", "gpu04"]
    # ansible_host: "10.0.0.{{ 10 + inventory_hostname[3:] | int }}" rendered per host
    assert cluster.hosts["gpu03"].address == "10.0.0.13"
    assert cluster.hosts["gpu03"].connection["ssh_hostname"] == "10.0.0.13"
    # group_vars/all/ is a directory of two files; both are read
    assert cluster.versions["nvidia_driver"] == "535.261.03"
    assert cluster.name == "small"
    assert [p.name for p in cluster.partitions] == ["gpu", "cpu"]
    assert cluster.hosts["gpu01"].fabric.rate_gbps == 200
    assert cluster.hosts["cpu01"].gpu_count == 0 and cluster.hosts["gpu01"].gpu_count == 4


def test_ini_inventory_precedence_host_over_group_over_all():
    cluster = load_cluster(INVENTORIES / "small_ini")
    cpu01, gpu01, gpu02 = (cluster.hosts[h] for h in ("cpu01", "gpu01", "gpu02"))
    # all (group_vars/all.yml) < compute (group_vars/compute.yml) < gpu_a < host_vars
    assert cpu01.cpus == 12            # host_vars/cpu01/facts.yml over group_vars/compute.yml (8)
    assert cpu01.memory_mb == 16000    # from compute
    assert cpu01.features == ("bigmem",)  # host_vars directory, second file
    assert gpu01.cpus == 32            # child group gpu_a over parent compute
    assert gpu01.gpu_count == 2 and gpu02.gpu_count == 1  # host_vars/gpu02.yml over the group
    assert gpu01.gpu_model == "a100"   # [gpu_a:vars] in the INI file
    assert cluster.name == "small-ini"  # [all:vars]
    assert gpu02.address == "10.0.1.2"
    ctl = cluster.hosts["ctl1"]
    assert ctl.connection["ssh_port"] == 2222 and isinstance(ctl.connection["ssh_port"], int)


def test_connection_variables_map_to_pyinfra_data(tmp_path):
    root = tmp_path / "inv"
    shutil.copytree(INVENTORIES / "small", root)
    (root / "host_vars").mkdir()
    (root / "host_vars" / "cpu01.yml").write_text(
        "ansible_user: ops\nansible_port: 2201\nansible_ssh_private_key_file: /keys/id\nansible_become: yes\n")
    host = load_cluster(root).hosts["cpu01"]
    assert host.connection == {
        "ssh_hostname": "10.0.0.31", "ssh_user": "ops", "ssh_port": 2201, "ssh_key": "/keys/id",
        "_sudo": True, "ssh_strict_host_key_checking": "yes",
    }


def test_values_are_plain_python_types():
    raw = load_raw(INVENTORIES / "small")
    host = raw.hosts["gpu01"]

    def walk(value):
        assert type(value) in (str, int, float, bool, type(None), list, dict), type(value)
        if isinstance(value, dict):
            for k, v in value.items():
                assert type(k) is str
                walk(v)
        if isinstance(value, list):
            for v in value:
                walk(v)

    walk(host.vars)
    assert host.origins["kiln_cpus"] == ("group_vars/gpu_a.yml", 2)
    assert host.origins["kiln_versions"][0] == "group_vars/all/versions.yml"


@pytest.mark.parametrize("pattern,expected", [
    ("gpu[001:003]", ["gpu001", "gpu002", "gpu003"]),
    ("n[1:5:2]", ["n1", "n3", "n5"]),
    ("rack[a:b]-n[1:2]", ["racka-n1", "racka-n2", "rackb-n1", "rackb-n2"]),
    ("plain", ["plain"]),
])
def test_host_ranges(pattern, expected):
    assert expand_host_pattern(pattern) == expected


@pytest.mark.parametrize("pattern", ["gpu[1:x]", "gpu[5:1]", "gpu[1:3", "gpu[1]", "gpu[1:4:0]"])
def test_bad_host_ranges(pattern):
    with pytest.raises(ValueError, match="invalid host range"):
        expand_host_pattern(pattern)


def test_ranges_expand_like_ansible():
    raw = load_raw(INVENTORIES / "small")
    assert sorted(raw.groups["gpu_a"]) == expand_host_pattern("gpu[01:04]")


def test_load_cluster_raises_with_every_error(tmp_path):
    root = tmp_path / "inv"
    shutil.copytree(INVENTORIES / "small", root)
    (root / "group_vars" / "cpu_b.yml").write_text("kiln_cpus: x\nkiln_memory_mb: y\n")
    with pytest.raises(InventoryInvalid) as info:
        load_cluster(root)
    assert {e.key for e in info.value.errors} >= {"kiln_cpus", "kiln_memory_mb"}


def test_plain_converts_nested():
    assert plain({"a": (1, 2), "b": {3}}) == {"a": [1, 2], "b": [3]}


def test_example_inventory_is_valid_and_production_shaped():
    cluster = load_cluster(REPO / "inventory" / "example")
    s = cluster.summary()
    assert s["node_types"]["gpu_h100"] == {"hosts": 32, "gpus_per_node": 8, "gpu_model": "h100"}
    assert s["node_types"]["gpu_l40s"] == {"hosts": 8, "gpus_per_node": 4, "gpu_model": "l40s"}
    assert s["gpus_total"] == 32 * 8 + 8 * 4
    assert len(cluster.controllers) == 1 and cluster.groups["slurm_dbd"] == cluster.groups["slurm_controller"]
    assert len(cluster.groups["login"]) == 1
    hgx = cluster.hosts["hgx017"]
    assert hgx.nvswitch and hgx.fabric.type == "infiniband" and hgx.fabric.hca_count == 8
    assert hgx.fabric.rate_gbps == 400 and hgx.address == "10.10.1.17"
    assert cluster.hosts["l40s03"].fabric.type == "roce"
    assert {m.type for m in hgx.storage_mounts} == {"nfs", "lustre"}
    assert {t.name: t.shares for t in cluster.teams} == {"vision": 60, "language": 40}
    assert "fabricmanager" in hgx.roles
    for pin in ("nvidia_driver", "cuda", "nccl", "dcgm", "slurm", "fabricmanager"):
        assert cluster.versions[pin]


def test_hosts_get_only_roles_that_exist_and_every_pin_belongs_to_one():
    import roles
    from kiln.versions import PINS

    cluster = load_cluster(REPO / "inventory" / "example")
    assert set().union(*(h.roles for h in cluster.hosts.values())) <= set(roles.ORDER)
    assert {pin.role for pin in PINS.values()} <= set(roles.ORDER)


def _ansible_alone(root, vault_password_file=None) -> dict[str, dict]:
    """Each host's kiln variables as ansible-core resolves them with nothing of kiln's speed-ups: one
    VariableManager.get_vars per host, every template rendered."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar
    from ansible.vars.manager import VariableManager

    from kiln.inventory.loader import _needs_template, _vault_secret, _vault_secrets, read_by_kiln

    loader = DataLoader()
    loader.set_basedir(str(root))
    secrets = []
    if vault_password_file:
        secrets = [("default", _vault_secret(loader, str(vault_password_file))[0])]
        loader.set_vault_secrets(secrets)
    with _vault_secrets(secrets):
        inventory = InventoryManager(loader=loader, sources=[str(root)])
        variables = VariableManager(loader=loader, inventory=inventory)
        templar = Templar(loader=loader)
        hosts = {}
        for host in inventory.get_hosts():
            resolved = variables.get_vars(host=host, include_hostvars=False)
            values = {}
            for key, value in resolved.items():
                if read_by_kiln(str(key)):
                    if _needs_template(value):
                        templar.available_variables = resolved
                        value = templar.template(value)
                    values[str(key)] = plain(value)
            hosts[str(host.name)] = values
    return hosts


def _precedence_inventory(root):
    """Every layer Ansible merges: group_vars/all as a directory, parent and child groups (one with a
    priority), inline group and host variables, host_vars file and directory, a template per host."""
    (root / "group_vars" / "all").mkdir(parents=True)
    (root / "group_vars" / "all" / "a.yml").write_text(
        'kiln_cluster_name: prec\nkiln_cpus: 1\nkiln_features: [all]\nkiln_memory_mb: 100\n'
        'ansible_host: "10.9.0.{{ inventory_hostname[3:] | int }}"\n')
    (root / "group_vars" / "all" / "b.yml").write_text("kiln_gpu_model: from-all\n")
    (root / "group_vars" / "compute.yml").write_text("kiln_cpus: 8\nkiln_features: [compute]\n")
    (root / "group_vars" / "gpu_a.yml").write_text("kiln_cpus: 32\nkiln_gpu_count: 4\n")
    (root / "group_vars" / "gpu_b.yml").write_text("kiln_cpus: 64\nansible_group_priority: 5\n")
    (root / "host_vars" / "gpu02").mkdir(parents=True)
    (root / "host_vars" / "gpu02" / "x.yml").write_text("kiln_cpus: 2\n")
    (root / "host_vars" / "gpu03.yml").write_text("kiln_features: [own]\nansible_host: 10.9.9.9\n")
    (root / "hosts.yml").write_text(
        "all:\n  children:\n    slurm_controller:\n      hosts:\n        ctl01:\n"
        "    compute:\n      vars:\n        kiln_memory_mb: 200\n      children:\n"
        "        gpu_a:\n          vars:\n            kiln_memory_mb: 300\n          hosts:\n"
        "            gpu[01:04]:\n            gpu05:\n              kiln_cpus: 5\n"
        "        gpu_b:\n          hosts:\n            gpu04:\n            gpu06:\n")


@pytest.mark.parametrize("name", ["small", "small_ini", "plan", "foreign/deepops_shaped",
                                  "foreign/appliance_shaped", "precedence", "example"])
def test_kilns_reading_resolves_every_host_as_ansible_alone_does(tmp_path, name):
    """kiln reads each group's variables once and each distinct value once (inventory_scale.py: 10,000
    hosts); what every host ends up with is exactly what ansible-core gives host by host."""
    if name == "precedence":
        root = tmp_path / "precedence"
        _precedence_inventory(root)
    else:
        root = REPO / "inventory" / "example" if name == "example" else INVENTORIES / name
    password = INVENTORIES / "foreign" / "vault-password" if name.startswith("foreign") else None
    raw = load_raw(root, str(password) if password else None)
    assert not raw.errors, raw.errors
    assert {h: r.vars for h, r in raw.hosts.items()} == _ansible_alone(root, password)
    if name == "precedence":
        gpu = raw.hosts
        assert gpu["gpu04"].vars["kiln_cpus"] == 64 and gpu["gpu01"].vars["kiln_cpus"] == 32  # priority 5 wins
        assert gpu["gpu02"].vars["kiln_cpus"] == 2 and gpu["gpu05"].vars["kiln_cpus"] == 5
        assert gpu["gpu03"].vars["ansible_host"] == "10.9.9.9" and gpu["gpu01"].vars["ansible_host"] == "10.9.0.1"
        # Ansible's order: a group's variables in hosts.yml lose even to group_vars/all/ files
        assert gpu["gpu01"].vars["kiln_memory_mb"] == 100 and gpu["ctl01"].vars["kiln_memory_mb"] == 100
        # hosts that read one value from one file share it (checked once by validate)
        assert gpu["gpu01"].vars["kiln_features"] is gpu["gpu02"].vars["kiln_features"]
        assert gpu["gpu01"].origins["kiln_cpus"][0] == "group_vars/gpu_a.yml"
        assert gpu["gpu05"].origins["kiln_cpus"][0] == "hosts.yml"
