"""The workload suite (opt-in: ``kiln check --suite workload``): which node, or which link between two, is
slower than the cluster's others at the work its jobs do. A single faulty node slows every job it is in.

kiln/check/workload.py runs the probe (checks/workload_step.py) over SSH: a training step on each compute
node, and a two-node all-reduce across each pair of a ring of them; ``judge`` (pure) compares each figure
with the cluster's median:

- WORKLOAD_STEP fails a node whose median step time is over ``slow_factor`` times the median of all nodes'
  (or whose probe could not run: no PyTorch, out of memory).
- WORKLOAD_ALLREDUCE fails the node a slow pair is blamed on: a node already slow at the step, or one in
  two slow pairs of the ring (all its links slow: its NIC or its own slowness); a slow pair blamed on
  neither end is a slow link and fails both ends, naming it. A pair is slow below the median of the
  pairs that touch no step-slow node, divided by ``slow_factor``.

Before judging, the runner probes again (``confirm`` times) each node and pair whose best figure so far
would fail (``suspects``): a burst of another tenant's load slows one probe, a slow part every one.

A run over three nodes or more records the cluster's medians (kiln/check/workload.py, beside the
inventory); a run over fewer (a rollout's batch, ``kiln patch --workload-check``) is judged against them.
Without them it needs two nodes to compare (one alone passes, saying so). The ring's median names one slow node among
four or more; with three, a node slow only in its links (not its step) taints two of three pairs and the
median with them. The probe puts load on the node's GPU or CPUs for seconds: run it on idle or drained
nodes.
"""

from __future__ import annotations

import statistics
from checks.node import Node
from checks.parsers.workload import WorkloadResult
from checks.verdict import Verdict, fail, ok

Figure = WorkloadResult | str  # a result, or why the probe gave none


def commands(expect: dict) -> list[str]:
    """Nothing per node: the suite's measurements are across nodes (kiln/check/workload.py)."""
    return []


def run(node: Node, expect: dict) -> list[Verdict]:
    return []


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def medians(steps: dict[str, Figure], pairs: list[tuple[str, str, Figure]]) -> dict:
    """The cluster's medians from a run over many nodes, for later runs over few (a rollout's batch):
    ``{"step_seconds", "busbw_gbs", "nodes"}``; {} when no figure came."""
    times = [f.seconds for f in steps.values() if isinstance(f, WorkloadResult)]
    rates = [f.busbw_gbs for _, _, f in pairs if isinstance(f, WorkloadResult)]
    if not times:
        return {}
    return {"step_seconds": statistics.median(times), "nodes": len(times),
            **({"busbw_gbs": statistics.median(rates)} if rates else {})}


def _step_median(times: dict[str, float], reference: dict | None) -> tuple[float | None, str]:
    """The median step the nodes are judged against, and what it is the median of."""
    if reference and reference.get("step_seconds"):
        return reference["step_seconds"], f"the cluster's {reference.get('nodes', '?')} nodes at its last run"
    return (statistics.median(times.values()) if times else None), f"{len(times)} nodes"


def _pair_median(rates: dict[tuple[str, str], float], slow: set[str], reference: float | None) -> float | None:
    """The median bandwidth the pairs are judged against: of the pairs touching no slow node (all pairs
    where every one does), or the cluster's from its last run."""
    clean = [r for (a, b), r in rates.items() if a not in slow and b not in slow] or list(rates.values())
    return reference or (statistics.median(clean) if clean else None)


def _slow_steps(steps: dict[str, Figure], slow_factor: float, reference: dict | None) -> set[str]:
    """Nodes whose step is over ``slow_factor`` times the median, or whose probe gave no figure."""
    times = {n: f.seconds for n, f in steps.items() if isinstance(f, WorkloadResult)}
    median, _ = _step_median(times, reference)
    compared = len(times) >= 2 or bool(reference and reference.get("step_seconds"))
    return {n for n, f in steps.items()
            if not isinstance(f, WorkloadResult) or (compared and f.seconds > slow_factor * median)}


def suspects(steps: dict[str, Figure], pairs: list[tuple[str, str, Figure]], slow_factor: float,
             reference: dict | None = None) -> tuple[set[str], set[int]]:
    """What ``judge`` would fail on its figures alone: the nodes whose step is slow and the ring pairs (by
    index) whose all-reduce is, so that they are measured again before any is named (a burst of load from
    elsewhere slows one probe, not every one). A probe that gave no figure is no suspect: it failed."""
    slow = _slow_steps(steps, slow_factor, reference)
    rates = {(a, b): f.busbw_gbs for a, b, f in pairs if isinstance(f, WorkloadResult)}
    ref_rate = (reference or {}).get("busbw_gbs")
    median = _pair_median(rates, slow, ref_rate)
    slow_pairs = {i for i, (a, b, f) in enumerate(pairs) if isinstance(f, WorkloadResult)
                  and (len(rates) > 1 or ref_rate) and f.busbw_gbs < median / slow_factor}
    return {n for n in slow if isinstance(steps[n], WorkloadResult)}, slow_pairs


def judge(steps: dict[str, Figure], pairs: list[tuple[str, str, Figure]], slow_factor: float,
          reference: dict | None = None) -> dict[str, list[Verdict]]:
    """Each node's WORKLOAD_STEP and WORKLOAD_ALLREDUCE verdicts from every node's step (``steps``) and each
    ring pair's all-reduce (``pairs``: first node, second node, figure), against these nodes' medians, or
    against ``reference`` (``medians`` of an earlier run over the cluster) where given."""
    out: dict[str, list[Verdict]] = {n: [] for n in steps}
    times = {n: f.seconds for n, f in steps.items() if isinstance(f, WorkloadResult)}
    median, of = _step_median(times, reference)
    slow = _slow_steps(steps, slow_factor, reference)
    for node, figure in steps.items():
        if not isinstance(figure, WorkloadResult):
            out[node].append(fail("WORKLOAD_STEP", f"the training step could not run here: {figure}"))
        elif len(times) < 2 and not reference:
            out[node].append(ok("WORKLOAD_STEP", f"step {_ms(figure.seconds)} on {figure.device}; no other node "
                                                 "to compare with"))
        elif node in slow:
            out[node].append(fail("WORKLOAD_STEP", f"step {_ms(figure.seconds)} on {figure.device}, "
                                  f"{figure.seconds / median:.1f}x the median {_ms(median)} of {of} "
                                  f"(limit {slow_factor:g}x): this node slows every job it is in; look for "
                                  "throttled clocks, a power cap, a stray process or a failing part"))
        else:
            out[node].append(ok("WORKLOAD_STEP", f"step {_ms(figure.seconds)} on {figure.device} (median "
                                                 f"{_ms(median)} of {of})"))
    for node, blamed in _judge_pairs(pairs, slow, slow_factor, (reference or {}).get("busbw_gbs")).items():
        out.setdefault(node, []).append(blamed)
    return out


def _judge_pairs(pairs: list[tuple[str, str, Figure]], slow: set[str], factor: float,
                 reference: float | None = None) -> dict[str, Verdict]:
    rates = {(a, b): f.busbw_gbs for a, b, f in pairs if isinstance(f, WorkloadResult)}
    clean = [r for (a, b), r in rates.items() if a not in slow and b not in slow] or list(rates.values())
    median = _pair_median(rates, slow, reference)
    bad: dict[tuple[str, str], str] = {}
    for a, b, figure in pairs:
        if not isinstance(figure, WorkloadResult):
            bad[(a, b)] = f"the all-reduce between {a} and {b} could not run: {figure}"
        elif (len(rates) > 1 or reference) and figure.busbw_gbs < median / factor:
            of = "the cluster's pairs at its last run" if reference else f"{len(clean)} pair(s)"
            bad[(a, b)] = (f"all-reduce {a} <-> {b} {figure.busbw_gbs:.2f} GB/s, {median / figure.busbw_gbs:.1f}x "
                           f"below the median {median:.2f} GB/s of {of} (limit {factor:g}x)")
    touched: dict[str, list[tuple[str, str]]] = {}
    for a, b, _ in pairs:
        for n in (a, b):
            touched.setdefault(n, []).append((a, b))
    whole = {n for n, ps in touched.items() if len(ps) >= 2 and all(p in bad for p in ps)}
    blame: dict[str, list[str]] = {n: [] for n in touched}
    for (a, b), why in bad.items():
        guilty = [n for n in (a, b) if n in slow or n in whole] or [a, b]  # neither: the link between them
        for n in guilty:
            what = "this node is slow" if n in slow else "every link of this node is slow" if n in whole \
                else f"the link between {a} and {b} is slow"
            blame[n].append(f"{why}: {what}")
    verdicts: dict[str, Verdict] = {}
    for n, reasons in blame.items():
        mine = [f"{b if a == n else a} {rates[(a, b)]:.2f} GB/s" for a, b in touched[n] if (a, b) in rates]
        if reasons:
            verdicts[n] = fail("WORKLOAD_ALLREDUCE", "; ".join(reasons) + ": check the node's NIC, cable and "
                               "switch port (ibstat, ip -s link), and its CPU or GPU")
        else:
            verdicts[n] = ok("WORKLOAD_ALLREDUCE", "all-reduce with " + (", ".join(mine) or "no peer") +
                             (f" (median {median:.2f} GB/s)" if median else ""))
    return verdicts


def ring(nodes: list[str]) -> list[tuple[str, str]]:
    """Each node with the next, the last with the first; two nodes are one pair."""
    if len(nodes) < 2:
        return []
    return [(nodes[0], nodes[1])] if len(nodes) == 2 else list(zip(nodes, nodes[1:] + nodes[:1]))

