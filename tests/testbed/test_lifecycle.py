"""Testbed lifecycle: `down` leaves nothing behind, `up` recovers from an unclean kill, and eight nodes
installing packages at once through the proxy all finish. Each test uses its own small testbed."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
from pathlib import Path

import pytest

from kiln.testbed.host import pid_alive, read_pid
from kiln.testbed.testbed import Testbed
from tests.testbed.conftest import quiet, require_testbed


def leftovers(tb: Testbed) -> list[str]:
    """Everything of this testbed still on the host: mounts, links, cgroups, processes, state."""
    found = []
    with open("/proc/self/mounts") as mounts:
        found += [f"mount {line.split()[1]}" for line in mounts if str(tb.state) in line or f"kiln-{tb.name}" in line]
    found += [f"link {p.name}" for p in Path("/sys/class/net").iterdir()
              if p.name == tb.bridge or p.name.startswith((f"vb-{tb.name}", f"kt-{tb.name}"))]
    found += [f"cgroup {p}" for p in Path("/sys/fs/cgroup").glob(f"*/kiln-{tb.name}")]
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if (str(tb.state) in cmdline or f"--machine={tb.name}" in cmdline) and pid_alive(int(proc.name)):
            found.append(f"process {proc.name}: {cmdline[:120]}")
    if Path(f"/run/systemd/nspawn/propagate/{tb.name}01").exists():
        found.append("nspawn propagate dir")
    if tb.state.exists():
        found.append(f"state dir {tb.state}")
    return found


@pytest.fixture
def fresh(tmp_path):
    require_testbed()
    made = []

    def make(name: str, nodes: int) -> Testbed:
        tb = Testbed(name, progress=quiet)
        tb.inventory = tmp_path / f"inv-{name}"
        made.append(tb)
        tb.up(nodes, inventory_dir=tb.inventory)
        return tb

    yield make
    for tb in made:
        tb.down(inventory_dir=tb.inventory)


def test_down_leaves_nothing_behind(fresh):
    tb = fresh("kilndown", 2)
    assert leftovers(tb), "the testbed should be visible while up"
    assert tb.ssh("kilndown02", ["true"]).returncode == 0  # opens a shared ssh connection too
    tb.down(inventory_dir=tb.inventory)
    assert leftovers(tb) == []
    assert not tb.inventory.exists()
    assert not tb.proxy.running()


def test_up_recovers_after_an_unclean_kill(fresh):
    tb = fresh("kilnkill", 2)
    pids = []
    for node in tb.recorded_nodes():
        kind = tb.kind()
        pids += [read_pid(node.dir / "supervisor.pid"), read_pid(node.dir / "nspawn.pid"), kind.init_pid(node)]
    pids.append(read_pid(tb.proxy.pidfile))
    for pid in filter(None, pids):
        os.kill(pid, signal.SIGKILL)  # as if the host's kiln, nodes and proxy were all killed at once
    status = tb.up(2, inventory_dir=tb.inventory)
    assert [n["state"] for n in status["nodes"]] == ["running", "running"]
    assert status["apt_proxy"]
    for node in tb.recorded_nodes():
        assert tb.ssh(node.name, ["hostname"]).stdout.strip() == node.name


def test_eight_nodes_install_packages_at_once_through_the_proxy(fresh):
    tb = fresh("kilnapt", 8)

    def install(node: str) -> subprocess.CompletedProcess:
        return tb.ssh(node, ["apt-get update -q && apt-get install -y -q jq && jq --version"], check=False,
                      timeout=300)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = dict(zip([n.name for n in tb.recorded_nodes()],
                           pool.map(install, [n.name for n in tb.recorded_nodes()])))
    for node, result in results.items():
        assert result.returncode == 0, f"{node}: {result.stderr[-1500:]}"
        assert "jq-1." in result.stdout
