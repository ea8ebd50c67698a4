"""Hostile inventories: how long and how much memory `kiln inventory validate` takes to refuse each case of
tests/inventories/hostile.py, each in a fresh process (the bound the tests assert: 5 s and 300 MB).

    python benchmarks/hostile_inventory.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "inventories")]

from hostile import CASES  # noqa: E402

from tests.unit.test_inventory_hostile import materialize  # noqa: E402


def main() -> None:
    rows = []
    for case in CASES:
        with tempfile.TemporaryDirectory() as d:
            root = materialize(Path(d), case)
            start = time.monotonic()
            proc = subprocess.Popen([sys.executable, "-m", "kiln", "inventory", "validate", "-i", str(root), "--json"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=d)
            _, status, usage = os.wait4(proc.pid, 0)
            rows.append((case.name, time.monotonic() - start, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)))
    width = max(len(r[0]) for r in rows)
    print(f"{'case':<{width}}  seconds  peak MB  exit")
    for name, seconds, mb, code in rows:
        print(f"{name:<{width}}  {seconds:7.2f}  {mb:7.0f}  {code:4d}")
    seconds = [r[1] for r in rows]
    print(f"\n{len(rows)} cases: median {statistics.median(seconds):.2f} s, slowest {max(seconds):.2f} s, "
          f"peak memory at most {max(r[2] for r in rows):.0f} MB; every exit 2: {all(r[3] == 2 for r in rows)} "
          "(bound: 5 s, 300 MB each)")


if __name__ == "__main__":
    main()
