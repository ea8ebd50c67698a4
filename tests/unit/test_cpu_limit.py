"""A testbed node made slow through the host's cpu cgroup (kiln/testbed/cpu_limit.py): the group's quota,
every process moved (those forked meanwhile too), lifted and removed; and on this host's real cpu
controller, a busy process held to its share."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kiln.testbed import cpu_limit


def test_the_group_gets_the_quota_and_every_process_even_one_forked_while_moving(tmp_path):
    rounds = [[11, 12], [11, 12, 13], [11, 12, 13]]  # 13 forked while 11 and 12 moved

    def pids() -> list[int]:
        return rounds.pop(0) if rounds else [11, 12, 13]
    assert cpu_limit.limit("kiln-tb/n1", pids, 20, root=tmp_path) == 3
    group = tmp_path / "kiln-tb" / "n1"
    assert (group / "cpu.cfs_quota_us").read_text() == "20000\n" and (group / "cpu.cfs_period_us").read_text() == "100000\n"
    assert (group / "cgroup.procs").read_text() == "13\n"  # the last one written (the kernel keeps each)
    assert cpu_limit.limited_percent("kiln-tb/n1", root=tmp_path) == 20
    cpu_limit.lift("kiln-tb/n1", root=tmp_path)
    assert cpu_limit.limited_percent("kiln-tb/n1", root=tmp_path) is None
    assert cpu_limit.limited_percent("kiln-tb/none", root=tmp_path) is None


@pytest.mark.parametrize("percent", [0, 101, -5])
def test_a_share_outside_one_to_a_hundred_percent_is_refused(tmp_path, percent):
    with pytest.raises(cpu_limit.CpuLimitError, match="give 1 to 100"):
        cpu_limit.limit("g", lambda: [], percent, root=tmp_path)


def test_a_host_without_the_cpu_controller_is_told_so(tmp_path):
    with pytest.raises(cpu_limit.CpuLimitError, match="no cgroup v1 cpu controller"):
        cpu_limit.limit("g", lambda: [], 20, root=tmp_path / "absent")


@pytest.fixture
def real_cpu_controller() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: makes groups in the host's cpu cgroup")
    if not (cpu_limit.CPU_ROOT / "cgroup.procs").is_file():
        pytest.skip(f"no cgroup v1 cpu controller at {cpu_limit.CPU_ROOT} on this host")


def test_a_busy_process_is_held_to_its_share_on_the_real_controller_and_runs_free_once_lifted(real_cpu_controller):
    group = f"kiln-unit-{os.getpid()}/busy"
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        def cpu_seconds() -> float:
            fields = Path(f"/proc/{busy.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

        def share(seconds: float = 1.5) -> float:
            start, began = cpu_seconds(), time.monotonic()
            time.sleep(seconds)
            return (cpu_seconds() - start) / (time.monotonic() - began)
        assert cpu_limit.limit(group, lambda: [busy.pid], 10, root=cpu_limit.CPU_ROOT) == 1
        held = share()
        cpu_limit.lift(group)
        free = share()
        print(f"a busy loop: {held:.2f} of a CPU held to 10 %, {free:.2f} once lifted")
        assert held <= 0.15 and free >= 2 * held, (held, free)
    finally:
        busy.kill()
        busy.wait()
        cpu_limit.remove(group)
    assert not (cpu_limit.CPU_ROOT / group.split("/")[0]).exists()


def test_a_crashed_runs_groups_below_the_testbeds_own_go_with_it_on_the_real_controller(real_cpu_controller):
    testbed = f"kiln-unit-{os.getpid()}"
    for node in ("n1", "n2"):  # what a run whose node records were lost leaves (a VM's group, no process)
        cpu_limit.limit(f"{testbed}/{node}", lambda: [], 10)
    cpu_limit.remove(testbed)  # as `kiln testbed down` does for the testbed
    assert not (cpu_limit.CPU_ROOT / testbed).exists()
