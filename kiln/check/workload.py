"""The workload suite's runner (``kiln check --suite workload``): the probe (checks/workload_step.py) on each
compute node of the selection and across each pair of a ring of them, over SSH; checks/workload.py
judges the figures. ``kiln_check_workload`` (kiln/inventory/workload_schema.py) says where PyTorch is.

Nodes are probed ``at_once`` at a time; the ring's pairs in phases where no node is in two pairs at once
(kiln/check/bandwidth.py ``ring_phases``), each pair's two ranks started together, rank 0 serving the
rendezvous on its node's inventory address. The probe's source is sent with its command: nothing of kiln
need be installed on the node.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from importlib.resources import files
from pathlib import Path

from checks.node import Node
from checks.parsers.workload import parse_workload
from checks.verdict import CheckError, Verdict
from checks.workload import Figure, judge, medians, ring, suspects
from kiln.check.bandwidth import ring_phases
from kiln.inventory.workload_schema import WorkloadCheck
from kiln.shell import command

PROBE = files("checks") / "workload_step.py"  # wherever kiln is installed
HEREDOC = "KILN_WORKLOAD_PROBE"


def probe_command(settings: WorkloadCheck, mode: str, *extra: object) -> str:
    """The probe in ``mode`` ("step", or "allreduce" with its rank's arguments) as one shell command, its
    source on standard input, ended after the setting's timeout."""
    source = PROBE.read_text()
    if not source.endswith("\n"):
        source += "\n"  # the here-document's end must stand on a line of its own
    if f"\n{HEREDOC}\n" in f"\n{source}":
        raise RuntimeError(f"{PROBE} holds a line {HEREDOC}, which would end its here-document early: rename one")
    env = ("env", f"PYTHONPATH={settings.pythonpath}") if settings.pythonpath else ()
    words = command(*env, "timeout", settings.timeout_seconds, settings.python, "-", mode,
                    "--steps", settings.steps, "--hidden", settings.hidden, "--batch", settings.batch,
                    "--threads", settings.threads, "--mib", settings.allreduce_mib, "--port", settings.port,
                    "--timeout", max(10, settings.timeout_seconds - 10), *extra)
    return f"{words} 2>&1 <<'{HEREDOC}'\n{source}{HEREDOC}\n"


def figure(out) -> Figure:
    """The probe's result from a node's answer, or why there is none."""
    try:
        return parse_workload(out.stdout)
    except CheckError as e:
        return f"{e} (exit {out.rc}{', its timeout' if out.rc == 124 else ''})"


def best(figures: list[Figure], key) -> Figure:
    """Of one node's (or pair's) rounds, the figure ``key`` ranks first (load from elsewhere only slows a
    probe, so its best round is the node's own); why there is none when no round gave one."""
    good = [f for f in figures if not isinstance(f, str)]
    return min(good, key=key) if good else figures[-1]


def _steps(nodes: dict[str, Node], names: list[str], settings: WorkloadCheck, found: dict[str, list[Figure]]) -> None:
    """One probe of each of ``names``' step, ``at_once`` at a time, added to ``found``."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(settings.at_once, max(1, len(names)))) as pool:
        for n, f in zip(names, pool.map(lambda n: figure(nodes[n].run(probe_command(settings, "step"))), names)):
            found[n].append(f)


def _allreduces(nodes: dict[str, Node], addresses: dict[str, str], settings: WorkloadCheck,
                pairs: list[tuple[str, str]], chosen: set[int], found: dict[int, list[Figure]]) -> None:
    """One all-reduce across each pair of ``pairs`` whose index is ``chosen``, added to ``found``: in the
    ring's phases (no node in two pairs at once), ``at_once`` pairs at a time."""
    def allreduce(pair: tuple[str, str]) -> Figure:
        first, second = pair
        ranks = [(first, ("--rank", 0, "--address", addresses[first])),
                 (second, ("--rank", 1, "--address", addresses[first]))]
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as both:
            outs = list(both.map(lambda r: nodes[r[0]].run(probe_command(settings, "allreduce", *r[1])), ranks))
        got = [figure(o) for o in outs]
        return next((f for f in got if not isinstance(f, str)), None) or \
            "; ".join(f"{n}: {f}" for (n, _), f in zip(ranks, got))
    for phase in ring_phases(len(pairs)):
        phase = [i for i in phase if i in chosen]
        for start in range(0, len(phase), settings.at_once):
            batch = phase[start:start + settings.at_once]
            with concurrent.futures.ThreadPoolExecutor(max_workers=len(batch)) as pool:
                for i, f in zip(batch, pool.map(lambda i: allreduce(pairs[i]), batch)):
                    found[i].append(f)


def measure(nodes: dict[str, Node], addresses: dict[str, str], settings: WorkloadCheck, reference: dict | None = None
            ) -> tuple[dict[str, Figure], list[tuple[str, str, Figure]]]:
    """Every node's step, then every ring pair's all-reduce, ``settings.rounds`` times each (the nodes and
    pairs taken in turn, so a burst of load meets different ones in different rounds); then, up to
    ``settings.confirm`` times, once more each node and pair whose best so far would fail (judged against
    ``reference`` where given: checks/workload.py ``suspects``). Returns (node -> its fastest step,
    [(first, second, the pair's best bandwidth)])."""
    names = list(nodes)
    pairs = ring(names)
    stepped: dict[str, list[Figure]] = {n: [] for n in names}
    reduced: dict[int, list[Figure]] = {i: [] for i in range(len(pairs))}

    def bests() -> tuple[dict[str, Figure], list[tuple[str, str, Figure]]]:
        return ({n: best(fs, key=lambda f: f.seconds) for n, fs in stepped.items()},
                [(a, b, best(reduced[i], key=lambda f: -f.busbw_gbs)) for i, (a, b) in enumerate(pairs)])
    for _ in range(settings.rounds):
        _steps(nodes, names, settings, stepped)
    for _ in range(settings.rounds):
        _allreduces(nodes, addresses, settings, pairs, set(range(len(pairs))), reduced)
    for _ in range(settings.confirm):
        slow_nodes, slow_pairs = suspects(*bests(), settings.slow_factor, reference)
        if not slow_nodes and not slow_pairs:
            break
        _steps(nodes, [n for n in names if n in slow_nodes], settings, stepped)
        _allreduces(nodes, addresses, settings, pairs, slow_pairs, reduced)
    return bests()


RECORD_NODES = 3  # a run over this many nodes or more records the cluster's medians


def baseline_path(inventory: Path, cluster: str) -> Path:
    """Where the cluster's last medians are kept: beside the inventory, in .kiln/ (never in git)."""
    return Path(inventory).resolve().parent / ".kiln" / "workload" / f"{cluster}.json"


def read_baseline(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) and float(data.get("step_seconds", 0)) > 0 else {}
    except (OSError, ValueError, TypeError):
        return {}


def workload_verdicts(nodes: dict[str, Node], addresses: dict[str, str], settings: WorkloadCheck,
                      baseline: Path | None = None) -> dict[str, list[Verdict]]:
    """Every node's verdicts: judged against these nodes' medians when there are RECORD_NODES or more (and
    those medians kept at ``baseline``), else against the medians kept there by an earlier run."""
    reference = None if len(nodes) >= RECORD_NODES or baseline is None else read_baseline(baseline) or None
    steps, pairs = measure(nodes, addresses, settings, reference)
    if reference is None:
        found = judge(steps, pairs, settings.slow_factor)
        if baseline is not None and len(nodes) >= RECORD_NODES:
            passed = {n: f for n, f in steps.items() if not any(v.failed for v in found[n])}
            kept = medians(passed, [(a, b, f) for a, b, f in pairs if a in passed and b in passed])
            if kept:
                baseline.parent.mkdir(parents=True, exist_ok=True)
                baseline.write_text(json.dumps({**kept, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                                               indent=1) + "\n")
        return found
    return judge(steps, pairs, settings.slow_factor, reference)
