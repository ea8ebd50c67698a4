"""The cluster-level NCCL check (opt-in, ``kiln check --nccl-cluster``): ``all_reduce_perf`` across N
compute nodes as one Slurm job, its bus bandwidth judged against the floor the inventory sets for that
node count, and, when it is too slow, the slow pair found by halving the node set.

The job runs from the controller with ``srun -l`` (every line prefixed with its rank), one task per GPU
and the site's MPI plugin (``kiln_slurm_mpi``). Each rank that prints a result table is parsed; the job's
figure is the lowest of them (with MPI only rank 0 prints one). On the testbed ``all_reduce_perf`` is a
simulator: the plumbing and the halving are shown there, never GPU performance.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from checks.parsers.nccl import NcclResult, parse_nccl_tests
from checks.verdict import CheckError, Verdict, fail, ok
from kiln.shell import command

_RANK = re.compile(r"^\s*(\d+): ?(.*)$")
ARGS = ("-b", "8M", "-e", "256M", "-f", "2", "-g", "1")
TIME_LIMIT_MINUTES = 10


WAIT_SECONDS = 120  # a job Slurm cannot start in this time fails (nodes busy, or a request no node can meet)


def srun_command(nodes: list[str], gpus_per_node: int, mpi: str, program: str, tasks_per_node: int | None = None
                 ) -> str:
    """One job over ``nodes``: a task per GPU (fewer where a node has fewer CPUs), each rank's lines prefixed
    with its number; it fails instead of waiting when Slurm cannot start it within WAIT_SECONDS."""
    return command("srun", "-l", f"--nodes={len(nodes)}", f"--nodelist={','.join(nodes)}",
                   f"--ntasks-per-node={tasks_per_node or gpus_per_node}", f"--gpus-per-node={gpus_per_node}",
                   f"--mpi={mpi}", f"--time={TIME_LIMIT_MINUTES}", f"--immediate={WAIT_SECONDS}", "--exclusive",
                   *program.split(" "), *ARGS)


def parse_ranks(text: str) -> dict[int, NcclResult]:
    """Rank -> its result table, for every rank of ``srun -l`` output that printed one."""
    lines: dict[int, list[str]] = {}
    for line in text.splitlines():
        m = _RANK.match(line)
        if m:
            lines.setdefault(int(m.group(1)), []).append(m.group(2))
    results = {}
    for rank, own in lines.items():
        try:
            results[rank] = parse_nccl_tests("\n".join(own))
        except CheckError:
            continue  # a rank that printed no table (MPI: only rank 0 does)
    if not results:
        raise CheckError("no rank printed an all_reduce_perf result table")
    return results


def floor_for(floors: dict[int, float], nodes: int) -> float | None:
    """The bus bandwidth floor for ``nodes`` nodes: the entry for the largest node count not above it."""
    fitting = [count for count in floors if count <= nodes]
    return floors[max(fitting)] if fitting else None


@dataclass
class Measurement:
    nodes: list[str]
    busbw: float | None          # GB/s, the lowest rank's average; None when the job failed
    error: str = ""


@dataclass
class ClusterResult:
    measurements: list[Measurement] = field(default_factory=list)
    slow: list[list[str]] = field(default_factory=list)   # the smallest node sets found too slow


def find_slow(nodes: list[str], measure: Callable[[list[str]], Measurement], floors: dict[int, float]
              ) -> ClusterResult:
    """Measure ``nodes``; when too slow, halve: each half (of at least two nodes) is measured, and a slow
    half is halved again, down to a pair. When both halves pass, the slowness is between them: the whole
    set is reported."""
    result = ClusterResult()

    def too_slow(m: Measurement) -> bool:
        floor = floor_for(floors, len(m.nodes))
        return m.busbw is None or (floor is not None and m.busbw < floor)

    def search(group: list[str]) -> None:
        m = measure(group)
        result.measurements.append(m)
        if not too_slow(m):
            return
        if len(group) <= 3:
            result.slow.append(group)
            return
        half = len(group) // 2
        before = len(result.slow)
        for part in (group[:half], group[half:]):
            search(part)
        if len(result.slow) == before:
            result.slow.append(group)  # each half is fine alone: the path between them is not

    search(list(nodes))
    return result


def verdict(result: ClusterResult, floors: dict[int, float]) -> Verdict:
    first = result.measurements[0]
    floor = floor_for(floors, len(first.nodes))
    if not result.slow:
        return ok("NCCL_CLUSTER_BUSBW", f"all_reduce_perf over {len(first.nodes)} nodes: {first.busbw:.1f} GB/s"
                  + (f" (floor {floor:g})" if floor is not None else ""))
    figure = f"{first.busbw:.1f} GB/s" if first.busbw is not None else f"failed ({first.error})"
    where = "; ".join(",".join(group) for group in result.slow)
    return fail("NCCL_CLUSTER_BUSBW", f"all_reduce_perf over {len(first.nodes)} nodes: {figure}, floor "
                f"{floor if floor is not None else '-'} GB/s; slow: {where}: check those nodes' HCAs, cables and "
                "NVLink (kiln check --suite fabric,gpu), then run this again")


def measure_with(run: Callable[[str], object], gpus_per_node: int, mpi: str, program: str,
                 tasks_per_node: int | None = None) -> Callable[[list[str]], Measurement]:
    """A ``measure`` that runs the job through ``run`` (a command on the controller -> Result)."""
    def measure(nodes: list[str]) -> Measurement:
        out = run(srun_command(nodes, gpus_per_node, mpi, program, tasks_per_node))
        try:
            ranks = parse_ranks(out.stdout)
        except CheckError as e:
            return Measurement(nodes, None, f"exit {out.rc}: {(out.stderr.strip() or str(e))[:200]}")
        return Measurement(nodes, min(r.average_busbw for r in ranks.values()))
    return measure
