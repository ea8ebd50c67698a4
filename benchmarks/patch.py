"""Rolling-patch benchmark: kiln patch's own time per batch, beyond waiting for jobs, patching and rebooting.

Target (issue #7): at most 5 s per batch. Beside it, in the same run, the procedure an operator
scripts by hand (benchmarks/patch_by_hand.sh: scontrol drain, poll squeue, kiln deploy, scontrol
reboot, poll BootTime, scontrol resume; no journal, no checks, no bound on nodes out), timed the same
way. Both move the NVIDIA driver between Debian's two real versions on every compute node, one node a
batch, with a reboot through Slurm's RebootProgram. Runs on a fresh testbed of 1 controller + N
compute nodes with kiln deployed (simulated GPUs: the GPU checks' figures are kiln's, not a GPU's).
Needs root.

    python benchmarks/patch.py [--computes 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

from kiln.testbed.inventory import DRIVER_UPGRADE, TESTBED_VERSIONS
from kiln.testbed.testbed import Testbed

NAME = "kpatch"
ROOT = Path("/var/lib/kiln/bench-patch")
KILN = [sys.executable, "-m", "kiln"]
BY_HAND = Path(__file__).with_name("patch_by_hand.sh")


def run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=1800, **kw)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-2000:]}")
    return out


def with_driver(inventory: Path, pin: str) -> None:
    path = inventory / "group_vars" / "all" / "versions.yml"
    data = yaml.safe_load(path.read_text())
    data["kiln_versions"]["nvidia_driver"] = pin
    path.write_text(yaml.safe_dump(data))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--computes", type=int, default=4)
    args = ap.parse_args()
    tb = Testbed(NAME, progress=lambda m: None)
    tb.teardown()
    inventory = ROOT / "inventory"
    print(f"testbed: 1 controller + {args.computes} compute nodes, deploying ...", flush=True)
    tb.up(args.computes + 1, inventory_dir=inventory)
    try:
        run(KILN + ["deploy", "-i", str(inventory)])
        nodes = [n.name for n in tb.recorded_nodes()]
        time.sleep(5)
        with_driver(inventory, DRIVER_UPGRADE)
        out = run(KILN + ["patch", "-i", str(inventory), "--roles", "nvidia_driver", "--reboot", "always", "--json"])
        kiln_batches = json.loads(out.stdout)["batches"]
        with_driver(inventory, TESTBED_VERSIONS["nvidia_driver"])
        out = run(["bash", str(BY_HAND), str(tb.ssh_config), nodes[0], str(inventory), *nodes[1:]],
                  env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "KILN": " ".join(KILN)})
        hand_batches = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    finally:
        tb.down(inventory_dir=inventory)

    def med(rows, key):
        return statistics.median(r[key] for r in rows)
    print(f"\nper batch (one node each, {args.computes} batches), medians in seconds")
    print(f"{'':<34} {'total':>7} {'jobs':>6} {'patch':>6} {'reboot':>7} {'own':>6}  checks  journal")
    for label, rows, extra in (("kiln patch", kiln_batches, "yes     yes"),
                               ("by hand (patch_by_hand.sh)", hand_batches, "no      no")):
        print(f"{label:<34} {med(rows, 'seconds'):7.2f} {med(rows, 'drain_s'):6.2f} {med(rows, 'patch_s'):6.2f} "
              f"{med(rows, 'reboot_s'):7.2f} {med(rows, 'overhead_s'):6.2f}  {extra}")
    own = max(r["overhead_s"] for r in kiln_batches)
    print(f"\nkiln's own time per batch, worst of {len(kiln_batches)}: {own:.2f} s; target <= 5 s: "
          f"{'met' if own <= 5 else 'MISSED'}")
    print("own = total - waiting for jobs - patch - reboot: Slurm polls, post-patch checks, journal, resume")


if __name__ == "__main__":
    main()
