"""First deploys of a VM cluster booted from images, N times in a row (not a test of the suite: it
takes minutes a try). Each try boots three fresh VMs from the same images, deploys once, and waits
for every compute VM idle in Slurm and a job across them; a failed try prints the deploy's output.

    python -m tests.vm.first_deploys --times 5
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from kiln.testbed.testbed import Testbed
from tests.vm.cluster import VM_NAME, build_images, first_deploy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--times", type=int, default=5)
    args = parser.parse_args()
    tb = Testbed(VM_NAME, progress=lambda message: None, node_kind="vm")
    inventory = Path(tempfile.mkdtemp(prefix="kiln-first-deploys-")) / "testbed"
    start = time.monotonic()
    images = build_images(tb, inventory)
    print(f"images {', '.join(images)} in {time.monotonic() - start:.0f} s", flush=True)
    rows, failed = [], 0
    try:
        for n in range(1, args.times + 1):
            try:
                steps = first_deploy(tb, inventory, images)
            except AssertionError as error:
                failed += 1
                rows.append((n, "FAILED", "", "", ""))
                print(f"try {n}: FAILED\n{error}", flush=True)
                continue
            summary = steps["deploy_json"]["summary"]
            rows.append((n, f"exit 0 ({summary['changed']} changed)", f"{steps['boot']:.0f}", f"{steps['deploy']:.0f}",
                         f"{steps['idle_and_job']:.0f}"))
            print(f"try {n}: deploy exit 0 in {steps['deploy']:.0f} s", flush=True)
    finally:
        tb.down(inventory_dir=inventory)
    print("\n| try | first deploy | boot s | deploy s | idle + srun s |\n|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
