"""Testbed scale: time to bring up and tear down N nspawn nodes, and memory and disk per node.

Needs root and the testbed's host tools. The base image is built first (not timed).

    python benchmarks/testbed_scale.py [--sizes 4,16,32]
"""

from __future__ import annotations

import argparse
import subprocess
import time
from pathlib import Path

from kiln.testbed import base
from kiln.testbed.testbed import Testbed


def pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def node_memory_mib(tb: Testbed) -> float:
    """Mean PSS of all processes inside each node's cgroup (systemd, journald, sshd, ...)."""
    kind = tb.kind()
    totals = []
    for node in tb.recorded_nodes():
        pids = kind.cgroup_pids(node)
        totals.append(sum(pss_kib(p) for p in pids) / 1024)
    return sum(totals) / len(totals)


def overlay_mib(tb: Testbed) -> float:
    sizes = [int(subprocess.run(["du", "-sk", str(n.dir / "upper")], capture_output=True, text=True).stdout.split()[0])
             for n in tb.recorded_nodes()]
    return sum(sizes) / len(sizes) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4,16,32")
    args = ap.parse_args()
    base.ensure_base(lambda m: None)
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        tb = Testbed("bench", progress=lambda m: None)
        tb.teardown()
        start = time.perf_counter()
        tb.up(size)
        up_s = time.perf_counter() - start
        time.sleep(5)  # let the nodes settle before measuring memory
        mem = node_memory_mib(tb)
        disk = overlay_mib(tb)
        start = time.perf_counter()
        tb.down()
        down_s = time.perf_counter() - start
        rows.append((size, up_s, down_s, mem, disk))
        print(f"  {size} nodes done", flush=True)
    print(f"\n{'nodes':>5} {'up s':>7} {'down s':>7} {'up s/node':>10} {'MiB/node (PSS)':>15} {'overlay MiB/node':>17}")
    for size, up_s, down_s, mem, disk in rows:
        print(f"{size:>5} {up_s:7.1f} {down_s:7.1f} {up_s / size:10.2f} {mem:15.1f} {disk:17.1f}")
    print("\nup: from nothing to every node 'running' and answering ssh; down: until nothing is left.")


if __name__ == "__main__":
    main()
