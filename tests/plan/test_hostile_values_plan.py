"""The longest, oddest values the inventory's formats allow, through every role on every supported OS:
every generated command parses back with ``shlex.split`` with each value inside one word, and every
rendered file has exactly the lines (and keys) of the same inventory with ordinary values.

Two inventories of one shape are written: ``ordinary`` and ``hostile``. Only their values differ, so any
line a value added, or a word it split, shows as a difference.
"""

from __future__ import annotations

import shlex
from dataclasses import replace

import pytest
import yaml

from kiln.inventory import load_cluster
from roles.platform import PLATFORMS
from tests.plan.facts import fresh
from tests.plan.harness import plan_host

ORDINARY = {
    "ctl": "ctl1", "login": "login1", "gpu": "gpu[01:02]", "cluster": "plan", "team": "vision", "user": "alice",
    "partition": "gpu", "max_time": "01:00:00", "feature": "fast", "model": "h100", "hca0": "mlx5_0",
    "hca1": "mlx5_1", "ifname": "eth0", "sysctl_key": "vm.max_map_count", "sysctl_value": 1048576,
    "ntp": "ntp1.example.org", "mount": "/home", "source": "nfs1:/home", "options": "rw,hard",
    "proxy": "http://10.0.0.1:3142", "switch": "sw1", "topo": "/etc/nccl/topo.xml",
    "slurm": "22.05.8-4+deb12u3", "nccl": "2.21.5-1", "pyxis": "0.20.0", "enroot": "3.5.0", "toolkit": "1.17.8-1",
    "extra_pkg": "nvidia-smi",
}
HOSTILE = {
    "ctl": "c-1.a-b", "login": "l0gin-9.x", "gpu": "g-p.u[01:02]", "cluster": "c0-" + "z" * 59 + "9",
    "team": "_" + "a.b-c_" * 5 + "z", "user": "u" + "_x.y-z" * 5 + "q", "partition": "_odd.part-1_" + "p" * 20,
    "max_time": "1234-23:59:59", "feature": "f.a-b_c9" * 8, "model": "h100.sxm-5_x", "hca0": "mlx5_0.a-b",
    "hca1": "_mlx5-1.c", "ifname": "^docker0,lo.x:1", "sysctl_key": "net.ipv4.conf.eth0/100.rp_filter",
    "sysctl_value": "32768 60999 a:b/c=d+e,f.g_h-i", "ntp": "fd00::1", "mount": "/mnt/k@i+l=n,x:y~z/" + "d" * 40,
    "source": "[fd00::1]:/exp,o=r:a+b@c", "options": "rw,hard,vers=4.2,x-systemd.requires=/x@y:z+1",
    "proxy": "http://proxy-1.example:3142/a_b~c%41+d@e,f=g:h", "switch": "sw.a-1_" + "s" * 30,
    "topo": "/etc/nccl/t@p+o=l,o:g~y.xml", "slurm": "1:22.05.8-4+deb12u3~bpo.1_a", "nccl": "2.21.5-1+x~y.z_1",
    "pyxis": "0.20.0+a~b", "enroot": "3.5.0~rc1", "toolkit": "1:1.17.8-1~x+y", "extra_pkg": "nvidia-smi.x+y-1",
}
ODD_WORDS = [v for k, v in HOSTILE.items() if isinstance(v, str) and k not in ("gpu", "ifname", "options")]


def write(root, v: dict) -> None:
    (root / "group_vars" / "all").mkdir(parents=True)
    (root / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {
        "slurm_controller": {"hosts": {v["ctl"]: {"ansible_host": "10.0.0.2"}}},
        "slurm_dbd": {"hosts": {v["ctl"]: None}},
        "login": {"hosts": {v["login"]: {"ansible_host": "10.0.0.3"}}},
        "compute": {"children": {"gpu": {"hosts": {v["gpu"]: {
            "kiln_cpus": 64, "kiln_memory_mb": 256000, "kiln_gpu_count": 4, "kiln_gpu_model": v["model"],
            "kiln_nvswitch": True, "kiln_features": [v["feature"]],
            "kiln_fabric": {"type": "infiniband", "hca_count": 2, "rate_gbps": 400,
                            "hcas": [v["hca0"], v["hca1"]], "socket_ifname": v["ifname"]},
            "kiln_sysctls": {v["sysctl_key"]: v["sysctl_value"]}, "kiln_nccl_topo_file": v["topo"]}}}}},
    }}}))
    gpus = v["gpu"].replace("[01:02]", "")
    (root / "group_vars" / "all" / "cluster.yml").write_text(yaml.safe_dump({
        "kiln_cluster_name": v["cluster"], "kiln_ntp_servers": [v["ntp"]], "kiln_package_proxy": v["proxy"],
        "kiln_teams": [{"name": v["team"], "shares": 60, "gid": 3001, "gpu_limit": 8,
                        "users": [{"name": v["user"], "uid": 3101}]}],
        "kiln_slurm_partitions": [{"name": v["partition"], "groups": ["gpu"], "default": True,
                                   "max_time": v["max_time"]}],
        "kiln_topology": {v["switch"]: [f"{gpus}01", f"{gpus}02"]},
        "kiln_storage_mounts": [{"path": v["mount"], "type": "nfs", "source": v["source"], "options": v["options"]}],
        "kiln_nvidia_driver_extra_packages": [v["extra_pkg"]],
    }))
    (root / "group_vars" / "all" / "versions.yml").write_text(yaml.safe_dump({"kiln_versions": {
        "slurm": v["slurm"], "nvidia_driver": "550.163.01-1", "fabricmanager": "550.163.01-1", "cuda": "12.4.1-1",
        "nccl": v["nccl"], "dcgm": "1:3.3.9", "nvidia_container_toolkit": v["toolkit"], "enroot": v["enroot"],
        "pyxis": v["pyxis"]}}))


def plans(tmp_path, values: dict, os: str, monkeypatch):
    root = tmp_path / ("hostile" if values is HOSTILE else "ordinary") / os
    write(root, values)
    cluster = load_cluster(root)  # valid: the formats allow every value
    cluster = replace(cluster, versions=dict(cluster.versions))
    return {name: plan_host(cluster, name, os, fresh(os), monkeypatch, with_context=True) for name in cluster.hosts}


@pytest.mark.parametrize("os", sorted(PLATFORMS))
def test_every_command_keeps_each_value_in_one_word(tmp_path, os, monkeypatch):
    checked = 0
    for name, (plan, _) in plans(tmp_path, HOSTILE, os, monkeypatch).items():
        for op, commands in plan:
            for command in commands:
                words = shlex.split(command)  # parses: no quote left open by a value
                for value in ODD_WORDS:
                    if value in command:
                        checked += 1
                        assert any(value in w for w in words), f"{name} / {op}: {value!r} split in {command!r}"
                if command.startswith("echo ") and command.endswith(">> /etc/fstab"):
                    line = words[1]
                    assert line.split(" ") == [HOSTILE["source"], HOSTILE["mount"], "nfs", HOSTILE["options"] + ",_netdev", "0", "0"]
    assert checked > 20  # the odd values really reached commands


def _shape(text: str) -> list[str]:
    """Each line's key: the part before ``=``, or its first word; values left out."""
    out = []
    for line in text.splitlines():
        key = line.split("=", 1)[0] if "=" in line.split(" ", 1)[0] else line.split(" ", 1)[0]
        out.append(key if not line.startswith("#") else "#")
    return out


@pytest.mark.parametrize("os", sorted(PLATFORMS))
def test_every_rendered_file_has_exactly_the_lines_it_should(tmp_path, os, monkeypatch):
    ordinary = plans(tmp_path, ORDINARY, os, monkeypatch)
    hostile = plans(tmp_path, HOSTILE, os, monkeypatch)
    pairs = list(zip(sorted(ordinary, key=lambda n: n[:1]), sorted(hostile, key=lambda n: n[:1])))
    assert len(pairs) == 4
    compared = 0
    for plain_name, odd_name in pairs:
        plain_files = {f.path: f for f in ordinary[plain_name][1].files if not f.secret}
        odd_files = {f.path: f for f in hostile[odd_name][1].files if not f.secret}
        assert sorted(plain_files) == sorted(odd_files)
        for path, plain in plain_files.items():
            a, b = plain.content.decode(), odd_files[path].content.decode()
            if path.endswith(".json"):
                continue  # JSON escapes its strings itself
            assert len(a.splitlines()) == len(b.splitlines()), f"{odd_name} {path}:\n{b}"
            shape_a, shape_b = _shape(a), _shape(b)
            differing = [(x, y) for x, y in zip(shape_a, shape_b) if x != y]
            # only a line that starts with a value itself may differ in its first word (/etc/hosts, sysctl)
            for x, y in differing:
                starts = [v for v in HOSTILE.values() if isinstance(v, str)] + [HOSTILE["gpu"].split("[")[0]]
                assert any(y.startswith(v) or v.startswith(y) for v in starts) or y[:1].isdigit(), \
                    f"{odd_name} {path}: line key {x!r} became {y!r}"
            compared += 1
    assert compared > 20
