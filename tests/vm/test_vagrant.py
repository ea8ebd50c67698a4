"""The Vagrant cluster as the README gives it: boxes built locally, `vagrant up`, `kiln deploy`, `kiln
check` passing, a Slurm job, then `vagrant destroy` and `kiln vagrant host stop` leaving no domain,
network, volume or process of it. Needs root, vagrant, vagrant-libvirt and libvirt (CI installs them)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kiln import vagrant as vg
from tests.prebuild import VAGRANT_COMPUTE as COMPUTE  # the cluster whose boxes CI builds beforehand
from tests.vm.conftest import require_vms

REPO = Path(__file__).resolve().parents[2]
TOOLS = ("vagrant", "virsh", "/usr/sbin/libvirtd", "/usr/sbin/virtlogd")


def _run(*cmd: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    env = dict(os.environ, VAGRANT_HOME=str(vg.VAGRANT_HOME))
    out = subprocess.run(list(cmd), cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)
    assert out.returncode == 0, f"{' '.join(cmd)} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def _virsh(*args: str) -> list[str]:
    out = subprocess.run(["virsh", "-c", "qemu:///system", *args], capture_output=True, text=True, timeout=60)
    return out.stdout.split() if out.returncode == 0 else []


@pytest.mark.proves("slurm", "kiln check", tier="vm")
def test_vagrant_up_deploy_check_and_destroy_leaves_nothing():
    require_vms()
    missing = [t for t in TOOLS if shutil.which(t) is None and not Path(t).exists()]
    if missing:
        reason = f"{', '.join(missing)} missing (apt-get install vagrant vagrant-libvirt libvirt-daemon-system)"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the Vagrant cluster, but {reason}")
        pytest.skip(reason)
    kiln = [sys.executable, "-m", "kiln"]
    forward = Path("/proc/sys/net/ipv4/ip_forward").read_text()
    times = {}
    try:
        started = time.monotonic()
        # One compute VM beside the controller: what the Vagrantfile and its boxes must do is the same for
        # any number, and jobs across VMs are the VM tier's (tests/vm/test_vm.py); a third emulated VM
        # cost this test about a third of its time
        _run(*kiln, "vagrant", "box", "--compute", str(COMPUTE))
        times["kiln vagrant box"] = time.monotonic() - started
        _run(*kiln, "vagrant", "host", "start")
        started = time.monotonic()
        up = _run("vagrant", "up")
        times["vagrant up"] = time.monotonic() - started
        assert "3 host key(s) from its console" in up.stdout  # each VM's three key types
        started = time.monotonic()
        _run(*kiln, "deploy", "-i", "inventory/vagrant", timeout=1800)
        times["kiln deploy"] = time.monotonic() - started
        started = time.monotonic()
        check = _run(*kiln, "check", "-i", "inventory/vagrant")
        times["kiln check"] = time.monotonic() - started
        print(check.stdout[-1500:])
        summary = next((line for line in check.stdout.splitlines() if line.startswith("summary:")), "")
        assert summary.startswith("summary:") and summary.endswith(" 0 failed"), check.stdout
        ssh = ["ssh", "-o", f"UserKnownHostsFile={vg.known_hosts_file()}", "-o", "StrictHostKeyChecking=yes",
               "-i", str(REPO / ".vagrant/machines/kilnvag01/libvirt/private_key"), "root@10.214.0.11"]
        job = _run(*ssh, f"timeout 120 srun -N{COMPUTE} hostname", timeout=180)
        assert sorted(job.stdout.split()) == [f"kilnvag{2 + i:02d}" for i in range(COMPUTE)]
    finally:
        started = time.monotonic()
        subprocess.run(["vagrant", "destroy", "-f"], cwd=REPO, capture_output=True, timeout=600,
                       env=dict(os.environ, VAGRANT_HOME=str(vg.VAGRANT_HOME)))
        times["vagrant destroy"] = time.monotonic() - started
        domains = [d for d in _virsh("list", "--all", "--name") if d.startswith("kiln")]
        networks = [n for n in _virsh("net-list", "--all", "--name") if n.startswith("kiln")]
        subprocess.run([*kiln, "vagrant", "host", "stop"], cwd=REPO, capture_output=True, timeout=300)
    print("Vagrant cluster: " + ", ".join(f"{k} {v:.0f} s" for k, v in times.items()))
    assert domains == [] and networks == []
    assert not list(vg.POOL_DIR.glob("*")), "volumes left in kiln's storage pool"
    left = subprocess.run(["pgrep", "-fa", "qemu-system|libvirtd|virtlogd|dnsmasq"], capture_output=True, text=True).stdout
    assert left == "", left
    assert Path("/proc/sys/net/ipv4/ip_forward").read_text() == forward
