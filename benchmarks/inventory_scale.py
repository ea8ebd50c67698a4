"""Inventory scale: load and validate a large inventory; kiln beside `ansible-inventory --list`.

Targets: 2,000 hosts validated with their summary in <= 5 s and <= 300 MB (issue 2); 10,000 hosts,
the whole `kiln inventory validate` command, in <= 5 s and <= 500 MB (issue 19). With ``--layout
listed`` (one host per line, each with its own ansible_host, as a CMDB export writes it): 1,000,
2,000 and 10,000 hosts, the whole command beside `ansible-inventory --list` on the same inventory,
kiln at most 0.3x Ansible at 10,000 and its time growing linearly (issue 29; 1,000, 2,000, 5,000 and
10,000 hosts).

    python benchmarks/inventory_scale.py [--nodes 10000] [--runs 3]
    python benchmarks/inventory_scale.py --layout listed [--runs 3]
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
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_MEASURE = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from kiln.inventory.loader import load_raw
from kiln.inventory import validate
t1 = time.perf_counter()
raw = load_raw(sys.argv[1])
t2 = time.perf_counter()
cluster, errors = validate(sys.argv[1])
summary = cluster.summary()
t3 = time.perf_counter()
assert not errors, errors[:3]
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "validate": t3 - t2, "hosts": summary["hosts"],
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def make_inventory(root: Path, nodes: int) -> None:
    """A production-shaped inventory: 80 % HGX nodes, 20 % L40S nodes, host ranges, templated addresses."""
    shutil.copytree(REPO / "inventory" / "example", root)
    h100 = nodes * 4 // 5
    l40s = nodes - h100 - 2
    hosts = (root / "hosts.yml").read_text()
    hosts = hosts.replace("hgx[001:032]", f"hgx[0001:{h100:04d}]").replace("l40s[01:08]", f"l40s[0001:{l40s:04d}]")
    (root / "hosts.yml").write_text(hosts)
    gv = root / "group_vars"
    for name, prefix, offset in (("gpu_h100", 3, 0), ("gpu_l40s", 4, 1 << 14)):
        text = (gv / f"{name}.yml").read_text().splitlines()
        text[[i for i, l in enumerate(text) if l.startswith("ansible_host")][0]] = (
            f'ansible_host: "10.{{{{ (({offset} + inventory_hostname[{prefix}:] | int) // 256) + 16 }}}}.'
            f'{{{{ ({offset} + inventory_hostname[{prefix}:] | int) % 256 }}}}.1"')
        (gv / f"{name}.yml").write_text("\n".join(text) + "\n")


def make_listed_inventory(root: Path, nodes: int) -> None:
    """The same cluster written as a CMDB export writes it: one host per line, each with its own
    ansible_host, no ranges and no templates."""
    shutil.copytree(REPO / "inventory" / "example", root)
    h100 = nodes * 4 // 5
    l40s = nodes - h100 - 2
    hosts = (root / "hosts.yml").read_text()
    for pattern, name, count, offset in (("hgx[001:032]", "hgx", h100, 0), ("l40s[01:08]", "l40s", l40s, 1 << 14)):
        indent = " " * 12
        lines = "\n".join(f"{indent}{name}{i:05d}: {{ansible_host: 10.{(offset + i) // 256 + 16}.{(offset + i) % 256}.1}}"
                          for i in range(1, count + 1))
        hosts = hosts.replace(f"{indent}{pattern}:", lines)
    (root / "hosts.yml").write_text(hosts)
    for name in ("gpu_h100", "gpu_l40s"):
        path = root / "group_vars" / f"{name}.yml"
        path.write_text("".join(line for line in path.read_text().splitlines(keepends=True)
                                if not line.startswith("ansible_host")))


LAYOUTS = {"ranges": make_inventory, "listed": make_listed_inventory}


def run_kiln(path: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _MEASURE, str(path)], capture_output=True, text=True,
                         env=env, check=True)
    result = json.loads(out.stdout)
    result["wall"] = time.perf_counter() - start
    return result


def run_cli(path: Path) -> tuple[float, float]:
    """(wall seconds, peak MB) of the whole command, in a process of its own."""
    measure = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
               "subprocess.run(sys.argv[1:], check=True, capture_output=True); "
               "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)")
    kiln = Path(sys.executable).with_name("kiln")
    out = subprocess.run([sys.executable, "-c", measure, str(kiln), "inventory", "validate", "-i", str(path)],
                         check=True, capture_output=True, text=True)
    wall, peak = out.stdout.split()
    return float(wall), float(peak)


def run_ansible(path: Path) -> tuple[float, float]:
    exe = Path(sys.executable).with_name("ansible-inventory")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    subprocess.run([str(exe), "-i", str(path), "--list"], check=True, capture_output=True,
                   env=dict(os.environ, ANSIBLE_INVENTORY_ENABLED="yaml,ini"))
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, max(after, before) / 1024


def listed(runs: int) -> None:
    """The one-host-per-line layout at three sizes: kiln's whole command beside ansible-inventory."""
    rows = []
    for nodes in (1000, 2000, 5000, 10000):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "inv"
            make_listed_inventory(root, nodes)
            cli = [run_cli(root) for _ in range(runs)]
            ansible = [run_ansible(root) for _ in range(runs)]
        kiln_s, ansible_s = statistics.median(w for w, _ in cli), statistics.median(w for w, _ in ansible)
        rows.append((nodes, kiln_s, max(m for _, m in cli), ansible_s, max(m for _, m in ansible)))
    print(f"one host per line, each with its own ansible_host; median of {runs} runs\n")
    print(f"{'hosts':>6} {'kiln validate s':>16} {'kiln MB':>8} {'ansible-inventory s':>20} {'MB':>6} {'time ratio':>13} "
          f"{'kiln ms per host added':>23}")
    previous = None
    for nodes, kiln_s, kiln_mb, ansible_s, ansible_mb in rows:
        added = f"{(kiln_s - previous[1]) / (nodes - previous[0]) * 1000:.3f}" if previous else "-"
        print(f"{nodes:>6} {kiln_s:>16.2f} {kiln_mb:>8.0f} {ansible_s:>20.2f} {ansible_mb:>6.0f} {kiln_s / ansible_s:>13.2f} "
              f"{added:>23}")
        previous = (nodes, kiln_s)
    ratio = rows[-1][1] / rows[-1][3]
    slope, start = _fit([r[0] for r in rows], [r[1] for r in rows])
    worst = max(abs(r[1] - (start + slope * r[0])) / r[1] for r in rows)
    print(f"\ntarget: 10,000 hosts at most 0.3x ansible-inventory: {'met' if ratio <= 0.3 else 'NOT met'} ({ratio:.2f}x); "
          f"a straight line {start:.2f} s + {slope * 1000:.3f} ms a host fits every size within {worst:.0%}")


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares line through the points: (slope, intercept)."""
    n, mx, my = len(xs), sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return slope, my - slope * mx


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--layout", choices=sorted(LAYOUTS), default="ranges")
    args = ap.parse_args()
    if args.layout == "listed":
        listed(args.runs)
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "inv"
        make_inventory(root, args.nodes)
        kiln_runs = [run_kiln(root) for _ in range(args.runs)]
        cli_runs = [run_cli(root) for _ in range(args.runs)]
        ansible_runs = [run_ansible(root) for _ in range(args.runs)]
    med = lambda key: statistics.median(r[key] for r in kiln_runs)  # noqa: E731
    hosts = kiln_runs[0]["hosts"]
    rss = max(r["rss_mb"] for r in kiln_runs)
    print(f"inventory of {hosts} hosts, median of {args.runs} runs\n")
    print(f"{'what':46} {'seconds':>8} {'peak MB':>8}")
    print(f"{'kiln: import ansible-core + kiln':46} {med('import'):8.2f} {'':>8}")
    print(f"{'kiln: load (ansible-core, vars, templates)':46} {med('load'):8.2f} {'':>8}")
    print(f"{'kiln: load + validate + summary':46} {med('validate'):8.2f} {rss:8.0f}")
    cli_wall, cli_peak = statistics.median(w for w, _ in cli_runs), max(m for _, m in cli_runs)
    print(f"{'kiln inventory validate (whole command)':46} {cli_wall:8.2f} {cli_peak:8.0f}")
    print(f"{'ansible-inventory --list (same inventory)':46} {statistics.median(w for w, _ in ansible_runs):8.2f} "
          f"{max(m for _, m in ansible_runs):8.0f}")
    if hosts <= 2000:
        ok = med("validate") <= 5 and rss <= 300
        print(f"\ntarget ({hosts} hosts): validate + summary <= 5 s and <= 300 MB: {'met' if ok else 'NOT met'} "
              f"({med('validate'):.2f} s, {rss:.0f} MB)")
    else:
        ok = cli_wall <= 5 and cli_peak <= 500
        print(f"\ntarget ({hosts} hosts): kiln inventory validate <= 5 s and <= 500 MB: {'met' if ok else 'NOT met'} "
              f"({cli_wall:.2f} s, {cli_peak:.0f} MB)")


if __name__ == "__main__":
    main()
