"""The rollout plan at scale: `kiln patch --dry-run`'s work for a 10,000-node cluster, without the cluster.

What is timed is kiln's own planning, from Slurm's answer to the printed plan: parse one
`scontrol show node -o` of every node (one call, as kiln makes it), pick the hosts, batch them (canary,
--max-unavailable), fold the plan for print. The inventory is the one benchmarks/inventory_scale.py
makes (its load is timed there); Slurm's answer is made here, with a share of nodes down, drained by a
person and busy. Beside it, the same plan made the simple way (Python's lists, one
`scontrol show hostnames`-style expansion per node line), as a floor to compare against.

Target (issue 19): the rollout plan for 10,000 nodes in at most 1 s.

    python benchmarks/patch_plan_scale.py [--nodes 10000] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def scontrol_text(names: list[str]) -> str:
    """One ``scontrol show node -o`` line per node, shaped as Slurm 23.11 prints them."""
    lines = []
    for i, n in enumerate(names):
        state, reason = "IDLE", ""
        if i % 97 == 5:
            state, reason = "DOWN+NOT_RESPONDING", " Reason=Not responding [slurm@2026-11-30T01:00:00]"
        elif i % 89 == 7:
            state, reason = "IDLE+DRAIN", " Reason=bad DIMM, ticket 4411 [ops@2026-11-30T02:00:00]"
        elif i % 3 == 0:
            state = "MIXED"
        lines.append(f"NodeName={n} Arch=x86_64 CoresPerSocket=56 CPUAlloc=0 CPUTot=224 CPULoad=0.10 "
                     f"AvailableFeatures=h100 ActiveFeatures=h100 Gres=gpu:h100:8 NodeAddr={n} NodeHostName={n} "
                     f"Version=23.11.10 OS=Linux 5.15.0-126-generic RealMemory=2000000 AllocMem=0 FreeMem=1900000 "
                     f"Sockets=2 Boards=1 State={state} ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A "
                     f"MCS_label=N/A Partitions=h100 BootTime=2026-11-30T01:57:54 SlurmdStartTime=2026-11-30T01:58:10"
                     f"{reason}")
    return "\n".join(lines)


class FakeSlurm:
    def __init__(self, text: str):
        self.text = text

    def nodes(self):
        from kiln.patch.plan import parse_nodes
        return parse_nodes(self.text)


class NoChecker:
    def close(self) -> None:
        pass


def kiln_plan(cluster, text: str) -> tuple[float, int, int]:
    from kiln.inventory.limit import resolve_limit
    from kiln.patch import report
    from kiln.patch.journal import Journal
    from kiln.patch.rollout import Options, Rollout

    options = Options(["nvidia_driver"], max_unavailable="5%", canary=1)
    start = time.perf_counter()
    rollout = Rollout(cluster, None, Journal(Path("/dev/null")), options, progress=lambda line: None,
                      slurm=FakeSlurm(text), checker=NoChecker())
    plan = rollout.new_plan(resolve_limit(cluster, None))
    printed = report.plan_text(plan, options)
    return time.perf_counter() - start, len(plan.compute), len(printed.splitlines())


def naive_plan(cluster, text: str) -> float:
    """The same batches made with lists only, and every node line parsed by splitting on spaces."""
    start = time.perf_counter()
    states = {}
    for line in text.splitlines():
        fields = dict(f.split("=", 1) for f in line.split(" ") if "=" in f)
        states[fields["NodeName"]] = fields["State"]
    compute = [h.name for h in cluster.compute]
    chosen = [h for h in cluster.hosts]
    queue = [h for h in compute if h in chosen and "DOWN" not in states.get(h, "DOWN") and "DRAIN" not in states[h]]
    size = max(1, len(compute) * 5 // 100)
    batches = [queue[:1]] + [queue[i:i + size] for i in range(1, len(queue), size)]
    "\n".join(", ".join(b) for b in batches)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    import importlib.util

    from kiln.inventory import load_cluster

    spec = importlib.util.spec_from_file_location("inventory_scale", REPO / "benchmarks" / "inventory_scale.py")
    inventory_scale = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(inventory_scale)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "inv"
        inventory_scale.make_inventory(root, args.nodes)
        cluster = load_cluster(root)
    text = scontrol_text([h.name for h in cluster.compute])
    runs = [kiln_plan(cluster, text) for _ in range(args.runs)]
    naive = [naive_plan(cluster, text) for _ in range(args.runs)]
    seconds, batches, lines = statistics.median(r[0] for r in runs), runs[0][1], runs[0][2]
    print(f"rollout plan of {len(cluster.compute)} compute nodes (--max-unavailable 5%, canary 1), "
          f"median of {args.runs} runs\n")
    print(f"{'what':56} {'seconds':>8}")
    print(f"{'kiln: parse scontrol, pick, batch, fold for print':56} {seconds:8.3f}")
    print(f"{'lists only: parse, pick (list lookups), batch, join':56} {statistics.median(naive):8.3f}")
    print(f"\nkiln's plan: {batches} batches, printed in {lines} lines")
    print(f"target: the rollout plan for {len(cluster.compute)} nodes <= 1 s: {'met' if seconds <= 1 else 'NOT met'} "
          f"({seconds:.3f} s)")


if __name__ == "__main__":
    main()
