"""A testbed node made truly slow: every process of the node held to a share of one CPU through the host's
cpu cgroup (CFS bandwidth: ``cpu.cfs_quota_us`` per ``cpu.cfs_period_us``), not a simulator. What runs
there (slurmd, a job's steps, an SSH session) runs that much slower, as on a node whose CPU throttles.

``kiln testbed inject NODE cpu-slow`` sets it; ``kiln testbed clear NODE`` lifts it; a node's release
(stop, power loss, down) removes its group. The testbed host's hybrid hierarchy has the cgroup v1 cpu
controller at /sys/fs/cgroup/cpu; a node's processes keep their places in every other hierarchy (the
node's own systemd manages those).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kiln.testbed.host import rmdir_tree

FAULT = "cpu-slow"  # kiln testbed inject's name for it
CPU_ROOT = Path("/sys/fs/cgroup/cpu")
PERIOD_US = 100_000
SLOW_PERCENT = 10  # of one CPU: a single-threaded loop takes ten times as long (three at least on a busy host)


class CpuLimitError(RuntimeError):
    pass


def limit(group: str, pids: Callable[[], list[int]], percent: int, root: Path = CPU_ROOT) -> int:
    """Hold every process ``pids()`` names to ``percent`` % of one CPU (the group ``root/group``); the
    children they fork later inherit it. Asked again until none is left outside (a process forked while
    the others moved). Returns how many processes the group holds."""
    if not 1 <= percent <= 100:
        raise CpuLimitError(f"{percent} % of a CPU: give 1 to 100")
    if not root.is_dir():
        raise CpuLimitError(f"no cgroup v1 cpu controller at {root}: the host must mount it (the hybrid hierarchy) "
                            "for a node to be made slow")
    path = root / group
    path.mkdir(parents=True, exist_ok=True)
    (path / "cpu.cfs_period_us").write_text(f"{PERIOD_US}\n")
    (path / "cpu.cfs_quota_us").write_text(f"{PERIOD_US * percent // 100}\n")
    moved: set[int] = set()
    for _ in range(10):
        outside = [p for p in pids() if p not in moved]
        if not outside:
            break
        for pid in outside:
            try:
                (path / "cgroup.procs").write_text(f"{pid}\n")
            except ProcessLookupError:
                pass  # gone meanwhile
            except OSError as exc:
                raise CpuLimitError(f"cannot move process {pid} into {path}: {exc}") from exc
            moved.add(pid)
    return len(moved)


def lift(group: str, root: Path = CPU_ROOT) -> None:
    """No limit on the group's processes any more (they stay in it, unlimited)."""
    quota = root / group / "cpu.cfs_quota_us"
    if quota.is_file():
        quota.write_text("-1\n")


def limited_percent(group: str, root: Path = CPU_ROOT) -> int | None:
    """The group's limit in % of one CPU, or None where it has none."""
    try:
        quota = int((root / group / "cpu.cfs_quota_us").read_text())
        period = int((root / group / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota < 0 else quota * 100 // period


def remove(group: str, root: Path = CPU_ROOT) -> None:
    """The group gone with any groups below it (a released node, or a crashed run's leftovers: their
    processes are gone too); its parents too, once empty."""
    path = root / group
    rmdir_tree(path)
    if path.is_dir():
        return  # still holds a process
    path = path.parent
    while path != root and path.is_dir():
        try:
            path.rmdir()
        except OSError:
            return  # holds another group
        path = path.parent
