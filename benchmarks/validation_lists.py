"""Validation of an inventory with long lists: 20,000 teams (each with a user), 20,000 QoS (a chain of
preemption, the worst case for a search from every QoS), 20,000 Alertmanager receivers; the whole
``kiln inventory validate`` beside ``ansible-inventory --list`` (which only parses) on the same
inventory, in one run.

Target (issue 42): each under 5 s of kiln's validation.

    python benchmarks/validation_lists.py [--items 20000] [--runs 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.unit.test_validation_scale import write_inventory  # noqa: E402


def timed(args: list[str]) -> float:
    t0 = time.perf_counter()
    out = subprocess.run(args, capture_output=True, text=True, cwd=REPO)
    took = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(args[:3])} failed: {(out.stderr or out.stdout)[-500:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    kiln = [sys.executable, "-m", "kiln", "inventory", "validate", "-i"]
    ansible = shutil.which("ansible-inventory", path=str(Path(sys.executable).parent)) or "ansible-inventory"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for what in ("teams", "qos", "receivers"):
            root = write_inventory(Path(tmp) / what, **{what: args.items})
            k = statistics.median(timed(kiln + [str(root)]) for _ in range(args.runs))
            a = statistics.median(timed([ansible, "-i", str(root), "--list"]) for _ in range(args.runs))
            rows.append((what, k, a))
    print(f"validation of {args.items:,} list items ({args.runs} runs, median, seconds; the whole command)")
    print(f"{'list':12} {'kiln inventory validate':>24} {'ansible-inventory --list':>25}")
    for what, k, a in rows:
        print(f"{what:12} {k:>24.2f} {a:>25.2f}")
    worst = max(k for _, k, _ in rows)
    print(f"target: each <= 5 s: {'met' if worst <= 5 else 'NOT met'} (slowest {worst:.2f} s)")


if __name__ == "__main__":
    main()
