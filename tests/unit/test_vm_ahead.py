"""When the VM tier adopts the cluster deployed ahead of it (tests/vm/ahead.py), and when it deploys its own:
the decisions that need no VM (the adoption itself is the VM tier's first test, in CI)."""

from __future__ import annotations

import json
import os

import pytest

from tests.vm import ahead


class _Testbed:
    """What ``adopt`` asks of a testbed before it touches a VM: the inventory it would write."""

    def __init__(self, hosts: str):
        self.hosts = hosts

    def write_inventory(self, count, inventory):
        inventory.mkdir(parents=True)
        (inventory / "hosts.yml").write_text(self.hosts)

    def recorded_nodes(self):
        raise AssertionError("adopt touched the VMs of a cluster it must not adopt")


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(ahead, "AHEAD", tmp_path / "ahead")
    monkeypatch.setattr(ahead, "STATE", tmp_path / "ahead" / "state.json")
    (tmp_path / "ahead" / "testbed").mkdir(parents=True)
    (tmp_path / "ahead" / "testbed" / "hosts.yml").write_text("all: {}\n")
    return tmp_path / "ahead"


def _said(tb, **kw):
    said = []
    return ahead.adopt(tb, said.append, **kw), said


def test_no_cluster_ahead_is_adopted_without_a_word(tmp_path, monkeypatch):
    monkeypatch.setattr(ahead, "STATE", tmp_path / "none" / "state.json")
    assert _said(_Testbed("all: {}\n")) == (None, [])


def test_a_failed_deploy_ahead_is_not_adopted_and_its_error_is_said(state_dir):
    (state_dir / "state.json").write_text(json.dumps({"state": "failed", "error": "deploy: kilnvm02 unreachable"}))
    steps, said = _said(_Testbed("all: {}\n"))
    assert steps is None and "kilnvm02 unreachable" in said[0] and "deploys its own" in said[0]


def test_a_deploy_ahead_whose_process_died_is_not_waited_for(state_dir):
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    (state_dir / "state.json").write_text(json.dumps({"state": "deploying", "pid": dead}))
    steps, said = _said(_Testbed("all: {}\n"), timeout=5)
    assert steps is None and "ended without a result" in said[0]


def test_a_deploy_ahead_still_running_past_the_timeout_is_left_to_itself(state_dir):
    (state_dir / "state.json").write_text(json.dumps({"state": "deploying", "pid": os.getpid()}))
    steps, said = _said(_Testbed("all: {}\n"), timeout=0.1)
    assert steps is None and "still deploying" in said[-1]


def test_a_cluster_deployed_from_another_inventory_is_not_adopted(state_dir):
    (state_dir / "state.json").write_text(json.dumps({"state": "ready", "images": ["a", "b"], "steps": {}}))
    steps, said = _said(_Testbed("all: {children: {slurm_controller: {}}}\n"))
    assert steps is None and "another inventory" in said[0]


@pytest.mark.skipif(os.geteuid() != 0, reason="lowering a process's nice value needs root (CI runs as root)")
def test_every_thread_of_the_testbeds_processes_is_given_back_normal_priority_and_nothing_else(tmp_path):
    import subprocess
    import sys
    import time

    class Named:
        name = f"kilnahead{os.getpid()}"

    program = ("import os, sys, threading, time; os.nice(19); "
               "[threading.Thread(target=time.sleep, args=(60,), daemon=True).start() for _ in range(3)]; "
               "print('up', flush=True); time.sleep(60)")
    ours = subprocess.Popen([sys.executable, "-c", program, Named.name], stdout=subprocess.PIPE, text=True)
    other = subprocess.Popen([sys.executable, "-c", program, "another-testbed"], stdout=subprocess.PIPE, text=True)
    try:
        assert ours.stdout.readline() == "up\n" and other.stdout.readline() == "up\n"
        time.sleep(0.2)  # the threads started

        def nice(proc):
            return sorted({os.getpriority(os.PRIO_PROCESS, int(t)) for t in os.listdir(f"/proc/{proc.pid}/task")})
        assert nice(ours) == [19] and len(os.listdir(f"/proc/{ours.pid}/task")) == 4
        ahead._normal_priority(Named())
        assert nice(ours) == [0], "a thread of the testbed's process kept nice 19"
        assert nice(other) == [19], "a process of another testbed was touched"
    finally:
        for proc in (ours, other):
            proc.kill()
            proc.wait()


@pytest.mark.skipif(os.geteuid() != 0 or not ahead.CPU_ROOT.is_dir(),
                    reason="moving processes between cpu cgroups needs root and the host's cgroup v1 cpu controller")
def test_the_low_weight_group_holds_what_it_starts_and_gives_it_all_back_to_the_root_group():
    import subprocess
    import sys
    group = ahead.CPU_ROOT / f"kiln-vm-ahead-test{os.getpid()}"
    # a process that moves itself in (as tests/prebuild.py does) and then starts a child, which inherits it
    program = (f"import subprocess, sys; sys.path.insert(0, {str(ahead.Path(__file__).resolve().parents[2])!r}); "
               "from pathlib import Path; from tests.vm import ahead; "
               f"ahead.low_weight(Path({str(group)!r})); "
               "child = subprocess.Popen(['sleep', '60']); print(child.pid, flush=True); child.wait()")
    parent = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True)
    child = None
    try:
        child = int(parent.stdout.readline())
        assert (group / "cpu.shares").read_text().strip() == str(ahead.LOW_SHARES)
        assert sorted(int(p) for p in (group / "cgroup.procs").read_text().split()) == sorted([parent.pid, child])
        ahead.full_weight(group)
        assert not group.exists()
        for pid in (parent.pid, child):
            assert "cpu:/\n" in open(f"/proc/{pid}/cgroup").read().replace("cpu,cpuacct:/", "cpu:/"), pid
    finally:
        if child is not None:
            os.kill(child, 9)
        parent.kill()
        parent.wait()
        if group.exists():
            ahead.full_weight(group)
