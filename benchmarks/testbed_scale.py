"""Testbed scale: time to bring up and tear down N nodes, memory and disk per node, per node kind.

Needs root and the testbed's host tools (and QEMU for the vm kind). The base is built first (not timed).

    python benchmarks/testbed_scale.py [--sizes 4,16,32]               # nspawn nodes from the bare base
    python benchmarks/testbed_scale.py --first-job --kinds nspawn,vm --sizes 3
        # both kinds side by side, from cached images (built first, not timed) to the first Slurm job

``--first-job``: the testbed's inventory is written, its compute and controller images are built
(qcow2 too for VMs), then timed: ``up`` from those images, ``kiln deploy``, every compute node idle,
``srun -N<computes> hostname``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]  # kiln's own checks package, not benchmarks/checks.py beside this file

from checks.parsers import sinfo  # noqa: E402
from checks.parsers.delimited import separator  # noqa: E402
from kiln.testbed import base  # noqa: E402
from kiln.testbed.testbed import Testbed  # noqa: E402


def pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def node_memory_mib(tb: Testbed) -> float:
    """Mean memory a node costs the host: PSS of the processes in its cgroup (nspawn), or of its QEMU
    process (vm: guest memory it touched plus QEMU's own, the translation cache under emulation)."""
    kind = tb.kind()
    totals = []
    for node in tb.recorded_nodes():
        if tb.node_kind == "vm":
            pids = [p for p in [kind._qemu_pid(node)] if p]
        else:
            pids = kind.cgroup_pids(node)
        totals.append(sum(pss_kib(p) for p in pids) / 1024)
    return sum(totals) / len(totals)


def disk_mib(tb: Testbed) -> float:
    """Mean size of each node's own disk layer (overlay upper dir, or qcow2 overlay)."""
    sizes = []
    for n in tb.recorded_nodes():
        path = n.dir / ("disk.qcow2" if tb.node_kind == "vm" else "upper")
        sizes.append(int(subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True).stdout.split()[0]))
    return sum(sizes) / len(sizes) / 1024


def kiln(*args: str) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "kiln", *args], capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise SystemExit(f"kiln {' '.join(args[:3])} failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return out


def images_for(tb: Testbed, size: int, inventory: Path) -> tuple[str, ...]:
    tb.write_inventory(size, inventory)
    fmt = "dir,qcow2" if tb.node_kind == "vm" else "dir"
    names = []
    for target in (("--node-type", "testbed_compute"), ("--group", "slurm_controller")):
        out = kiln("image", "build", "-i", str(inventory), *target, "--format", fmt, "--json")
        names.append(json.loads(out.stdout)["images"][0]["name"])
    return tuple(names)


def first_job(tb: Testbed, size: int, inventory: Path) -> float:
    started = time.perf_counter()
    kiln("deploy", "-i", str(inventory))
    nodes = [n.name for n in tb.recorded_nodes()]
    ctl, computes = nodes[0], nodes[1:]
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        sep = separator()
        shown, _ = sinfo.read_nodes(tb.ssh(ctl, [shlex.join(sinfo.nodes_command(sep))], check=False).stdout, sep)
        if sum(n.state == "idle" for n in shown.values()) == len(computes):
            break
        time.sleep(2)
    tb.ssh(ctl, ["timeout", "300", "srun", f"-N{len(computes)}", "hostname"], timeout=320)
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4,16,32")
    ap.add_argument("--kinds", default="nspawn", help="nspawn, vm or both (comma-separated)")
    ap.add_argument("--first-job", action="store_true", help="boot from cached images and time the first Slurm job")
    args = ap.parse_args()
    base.base_tree("debian12", lambda m: None)
    rows = []
    for kind in args.kinds.split(","):
        for size in (int(s) for s in args.sizes.split(",")):
            tb = Testbed("bench", progress=lambda m: None, node_kind=kind)
            tb.teardown()
            with tempfile.TemporaryDirectory() as tmp:
                inventory = Path(tmp) / "inventory"
                images = images_for(tb, size, inventory) if args.first_job else ()
                if kind == "vm":  # the bare VM disk is made once, not timed
                    tb.proxy.start()
                    base.ensure_vm_disk("debian12", lambda m: None, tb.proxy.url)
                start = time.perf_counter()
                tb.up(size, inventory_dir=inventory, images=images)
                up_s = time.perf_counter() - start
                job_s = first_job(tb, size, inventory) if args.first_job else None
                time.sleep(5)  # let the nodes settle before measuring memory
                mem, disk = node_memory_mib(tb), disk_mib(tb)
                start = time.perf_counter()
                tb.down(inventory_dir=inventory)
                down_s = time.perf_counter() - start
            rows.append((kind, size, up_s, job_s, down_s, mem, disk))
            print(f"  {kind}: {size} nodes done", flush=True)
    print(f"\n{'kind':>6} {'nodes':>5} {'up s':>7} {'+deploy,job s':>14} {'image->job s':>13} {'down s':>7} "
          f"{'up s/node':>10} {'MiB/node':>9} {'disk MiB/node':>14}")
    for kind, size, up_s, job_s, down_s, mem, disk in rows:
        job = f"{job_s:14.1f} {up_s + job_s:13.1f}" if job_s is not None else f"{'-':>14} {'-':>13}"
        print(f"{kind:>6} {size:>5} {up_s:7.1f} {job} {down_s:7.1f} {up_s / size:10.2f} {mem:9.1f} {disk:14.1f}")
    print("\nup: from nothing to every node 'running' and answering ssh (from the images with --first-job);"
          "\n+deploy,job: kiln deploy, every compute node idle, srun on all of them; image->job: the sum;"
          "\nMiB/node: PSS of the node's processes (nspawn) or of its QEMU (vm); down: until nothing is left.")


if __name__ == "__main__":
    main()
