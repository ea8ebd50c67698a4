"""Images: build time and size per target, an unchanged rebuild, and a fresh compute node made ready
for jobs from the bare base (every role's install and configure stage) against booting it from the
image and deploying (configure stage only).

Needs root and the testbed's host tools. A testbed named "bench" is brought up and down; images go
to a scratch store (nothing of the main store is touched).

    python benchmarks/image.py [--sizes 4,16]

For each size N: a testbed of 1 controller + N compute nodes, the controller deployed first, then
`kiln deploy --limit compute` timed until every compute node is idle in sinfo (ready for jobs).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STORE = Path(tempfile.mkdtemp(prefix="kiln-bench-images-"))
os.environ["KILN_IMAGE_STORE"] = str(STORE)

from checks.parsers import sinfo  # noqa: E402
from checks.parsers.delimited import separator  # noqa: E402
from kiln.testbed.testbed import Testbed  # noqa: E402  (after the store is chosen)

INVENTORY = Path(tempfile.mkdtemp(prefix="kiln-bench-inv-")) / "testbed"


def kiln(*args: str, timeout: float = 3600) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "kiln", *args], capture_output=True, text=True, timeout=timeout,
                         env=dict(os.environ))
    if out.returncode != 0:
        raise SystemExit(f"kiln {' '.join(args)} exited {out.returncode}:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return out


def idle(tb: Testbed, count: int) -> bool:
    sep = separator()
    cmd = tb.ssh_command("bench01", [shlex.join(sinfo.nodes_command(sep))])
    nodes, _ = sinfo.read_nodes(subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout, sep)
    return sum(n.state == "idle" for n in nodes.values()) >= count


def ready_seconds(tb: Testbed, size: int, images: tuple[str, ...]) -> tuple[float, float]:
    """(boot seconds, seconds from `kiln deploy --limit compute` to every compute node idle)."""
    tb.teardown()
    start = time.perf_counter()
    tb.up(size + 1, inventory_dir=INVENTORY, images=images)
    boot = time.perf_counter() - start
    kiln("deploy", "-i", str(INVENTORY), "--limit", "slurm_controller")
    start = time.perf_counter()
    kiln("deploy", "-i", str(INVENTORY), "--limit", "compute")
    deadline = time.monotonic() + 600
    while not idle(tb, size):
        if time.monotonic() > deadline:
            raise SystemExit("compute nodes never became idle")
        time.sleep(0.5)
    return boot, time.perf_counter() - start


def build(target_flag: str, target: str) -> dict:
    start = time.perf_counter()
    out = kiln("image", "build", "-i", str(INVENTORY), target_flag, target, "--format", "dir,tar", "--json")
    seconds = time.perf_counter() - start
    image = json.loads(out.stdout)["images"][0]
    start = time.perf_counter()
    again = json.loads(kiln("image", "build", "-i", str(INVENTORY), target_flag, target, "--json").stdout)["images"][0]
    return {"target": target, "name": image["name"], "build_s": seconds, "rebuild_s": time.perf_counter() - start,
            "cached": again["cached"], "dir_mib": image["bytes"]["dir"] / 2**20, "tar_mib": image["bytes"]["tar"] / 2**20}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4,16")
    args = ap.parse_args()
    tb = Testbed("bench", progress=lambda m: None)
    try:
        tb.up(2, inventory_dir=INVENTORY)  # the inventory the images are built from
        builds = [build("--node-type", "testbed_compute"), build("--group", "slurm_controller")]
        print("| image | first build s | unchanged rebuild s | tree MiB | tar.zst MiB |")
        print("|---|---:|---:|---:|---:|")
        for b in builds:
            print(f"| {b['target']} | {b['build_s']:.1f} | {b['rebuild_s']:.2f} | {b['dir_mib']:.0f} | {b['tar_mib']:.0f} |")
        names = tuple(b["name"] for b in builds)
        rows = []
        for size in (int(s) for s in args.sizes.split(",")):
            bare_boot, bare = ready_seconds(tb, size, ())
            image_boot, image = ready_seconds(tb, size, names)
            rows.append((size, bare_boot, bare, image_boot, image))
        print()
        print("| compute nodes | bare: boot s | bare: deploy to idle s | image: boot s | image: deploy to idle s | "
              "speed-up |")
        print("|---:|---:|---:|---:|---:|---:|")
        for size, bare_boot, bare, image_boot, image in rows:
            print(f"| {size} | {bare_boot:.1f} | {bare:.1f} | {image_boot:.1f} | {image:.1f} | {bare / image:.1f}x |")
    finally:
        tb.down(inventory_dir=INVENTORY)
        subprocess.run(["rm", "-rf", str(STORE), str(INVENTORY.parent)])


if __name__ == "__main__":
    main()
