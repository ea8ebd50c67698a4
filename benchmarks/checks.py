"""Checks benchmark: `kiln check` (every suite, over SSH) on 1 node and on 16 nodes, and the node-local
run (Slurm's HealthCheckProgram) on a healthy node.

Targets (issue #5): 16 nodes in at most 2x the 1-node time; node-local at most 0.5 s. Runs on a fresh
testbed of 1 controller + 16 compute nodes with kiln deployed (simulated GPUs and HCAs: the figures are
kiln's own overhead, not a GPU's). Needs root.

    python benchmarks/checks.py [--computes 16] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from kiln.testbed.testbed import Testbed

NAME = "kcheck"
INVENTORY = Path("/var/lib/kiln/bench-checks/inventory")
KILN = [sys.executable, "-m", "kiln"]


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if out.returncode not in (0,):
        raise SystemExit(f"{' '.join(argv)} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-2000:]}")
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--computes", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    tb = Testbed(NAME, progress=lambda m: None)
    tb.teardown()
    print(f"testbed: 1 controller + {args.computes} compute nodes, deploying ...", flush=True)
    tb.up(args.computes + 1, inventory_dir=INVENTORY)
    try:
        timed(KILN + ["deploy", "-i", str(INVENTORY)])
        nodes = [n.name for n in tb.recorded_nodes()]
        one, computes = nodes[1], ",".join(nodes[1:])
        time.sleep(5)  # every slurmd registered
        check = KILN + ["check", "-i", str(INVENTORY)]
        single = statistics.median(timed(check + ["--limit", one]) for _ in range(args.runs))
        many = statistics.median(timed(check + ["--limit", computes]) for _ in range(args.runs))
        local_runs = []
        for _ in range(args.runs + 2):
            out = tb.ssh(one, ["kiln-node-check", "--no-drain", "--json"], check=False)
            local_runs.append(json.loads(out.stdout)["seconds"])
        local = statistics.median(local_runs)
    finally:
        tb.down()
    print(f"\n{'what':<42} {'seconds':>8}  target")
    print(f"{'kiln check, all suites, 1 node':<42} {single:8.2f}")
    print(f"{f'kiln check, all suites, {args.computes} nodes':<42} {many:8.2f}  <= {2 * single:.2f} (2x 1 node): "
          f"{'met' if many <= 2 * single else 'MISSED'} ({many / single:.2f}x)")
    print(f"{'node-local run (HealthCheckProgram)':<42} {local:8.2f}  <= 0.50: {'met' if local <= 0.5 else 'MISSED'}")
    print(f"\nmedians of {args.runs} runs (node-local: {args.runs + 2}); the whole command, process start included")


if __name__ == "__main__":
    main()
