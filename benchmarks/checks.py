"""Checks benchmark: `kiln check` (every suite, over SSH) on 1 node and on 16 nodes, and the node-local
run (Slurm's HealthCheckProgram) on a healthy node.

Targets (issue #5): 16 nodes in at most 2x the 1-node time; node-local at most 0.5 s. Runs on a fresh
testbed of 1 controller + 16 compute nodes with kiln deployed (simulated GPUs and HCAs: the figures are
kiln's own overhead, not a GPU's). Needs root.

All testbed nodes share this host's CPUs, so beside wall time it reports where the CPU went: kiln's
own process (with its ssh clients) and everything else on the host during the run (the nodes' sshd
sessions and the commands the checks run there). On a real cluster the second part runs on the nodes'
own CPUs, in parallel. Slurm's HealthCheckProgram is off here (``kiln_slurm_health_check: false``; the
node-local runner is still installed and timed by hand): 16 nodes running it at once would land in
some runs and not others, load that is not kiln check's.

    python benchmarks/checks.py [--computes 16] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from kiln.testbed.testbed import Testbed

NAME = "kcheck"
INVENTORY = Path("/var/lib/kiln/bench-checks/inventory")
KILN = [sys.executable, "-m", "kiln"]


def host_busy() -> float:
    """CPU seconds the whole host has been busy (all cores), from /proc/stat."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def timed(argv: list[str], cpu: list | None = None) -> float:
    before, busy = resource.getrusage(resource.RUSAGE_CHILDREN), host_busy()
    start = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode not in (0,):
        raise SystemExit(f"{' '.join(argv)} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-2000:]}")
    if cpu is not None:
        own = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        cpu.append((own, host_busy() - busy - own))
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--computes", type=int, default=16)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    tb = Testbed(NAME, progress=lambda m: None)
    tb.teardown()
    print(f"testbed: 1 controller + {args.computes} compute nodes, deploying ...", flush=True)
    tb.up(args.computes + 1, inventory_dir=INVENTORY)
    try:
        settings = INVENTORY / "group_vars" / "all" / "testbed.yml"
        settings.write_text(settings.read_text() + "kiln_slurm_health_check: false\n")
        timed(KILN + ["deploy", "-i", str(INVENTORY)])
        nodes = [n.name for n in tb.recorded_nodes()]
        one, computes = nodes[1], ",".join(nodes[1:])
        time.sleep(5)  # every slurmd registered
        check = KILN + ["check", "-i", str(INVENTORY)]
        cpu1: list = []
        cpu16: list = []
        single = statistics.median(timed(check + ["--limit", one], cpu1) for _ in range(args.runs))
        many = statistics.median(timed(check + ["--limit", computes], cpu16) for _ in range(args.runs))
        local_runs = []
        for _ in range(args.runs + 2):
            out = tb.ssh(one, ["kiln-node-check", "--no-drain", "--json"], check=False)
            local_runs.append(json.loads(out.stdout)["seconds"])
        local = statistics.median(local_runs)
    finally:
        tb.down()
        shutil.rmtree(INVENTORY.parent, ignore_errors=True)
    print(f"\n{'what':<42} {'seconds':>8}  target")
    print(f"{'kiln check, all suites, 1 node':<42} {single:8.2f}")
    print(f"{f'kiln check, all suites, {args.computes} nodes':<42} {many:8.2f}  <= {2 * single:.2f} (2x 1 node): "
          f"{'met' if many <= 2 * single else 'MISSED'} ({many / single:.2f}x)")
    print(f"{'node-local run (HealthCheckProgram)':<42} {local:8.2f}  <= 0.50: {'met' if local <= 0.5 else 'MISSED'}")
    print(f"\nmedians of {args.runs} runs (node-local: {args.runs + 2}); the whole command, process start included")
    own1, rest1 = (statistics.median(x) for x in zip(*cpu1))
    own16, rest16 = (statistics.median(x) for x in zip(*cpu16))
    cores = os.cpu_count() or 1
    print(f"\nCPU seconds per run ({cores} host cores)   kiln (+ssh)  nodes' side")
    print(f"{'1 node':<36} {own1:11.2f} {rest1:12.2f}")
    print(f"{f'{args.computes} nodes':<36} {own16:11.2f} {rest16:12.2f}")
    print(f"kiln's own CPU per added node: {(own16 - own1) / (args.computes - 1):.3f} s; the nodes' side alone needs "
          f">= {rest16 / cores:.2f} s of wall time on {cores} cores")


if __name__ == "__main__":
    main()
