"""The VM tier's cluster handed over by tests/prebuild.py (tests/vm/cluster.py): every thread of its
supervisors and QEMUs, booted at nice 19, goes back to the normal priority, and nothing else does."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.vm.cluster import priority_back

# a process with three threads, as a QEMU with its vCPU threads: its command line names the testbed's node
THREADS = "import threading, time; [threading.Thread(target=time.sleep, args=(60,), daemon=True).start() for _ in range(2)]; time.sleep(60)"


def _nices(pid: int) -> list[int]:
    return [int((t / "stat").read_text().rsplit(")", 1)[1].split()[16]) for t in Path(f"/proc/{pid}/task").iterdir()]


@pytest.mark.skipif(os.geteuid() != 0, reason="lowering a nice value needs root (CI runs as root)")
def test_the_handed_over_vms_threads_get_their_priority_back_and_no_others(tmp_path):
    state = tmp_path / "kilnvm"
    ours = subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", THREADS, f"{state}/nodes/kilnvm01/node.json"])
    other = subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", THREADS, f"{tmp_path}/other/nodes/x"])
    try:
        for pid in (ours.pid, other.pid):
            deadline = time.monotonic() + 10
            while len(_nices(pid)) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _nices(pid) == [19, 19, 19]
        priority_back(SimpleNamespace(state=state))
        assert _nices(ours.pid) == [0, 0, 0]
        assert _nices(other.pid) == [19, 19, 19]
    finally:
        for p in (ours, other):
            p.kill()
            p.wait()
