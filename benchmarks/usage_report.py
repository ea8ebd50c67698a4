"""kiln usage at a month of 10,000 jobs: kiln's own work (parse sacct's and sacctmgr's output, the report,
JSON, the HTML page with its plots) beside one process per job, as per-job summary tools are run.

Target (issue 31): a month of 10,000 jobs reported in at most 10 s of kiln's own work. The sacct text is
tests/unit/usage_month.py's (64 nodes of two types, six teams, a fixed seed), exactly as ``sacct -P``
prints it. The alternative asks once per job, the way a per-job tool (``seff JOBID``, ``jobstats JOBID``)
is run over a month: each process here does only the least such a tool does, start Python and read its
one job's line with kiln's own parser, so the figure is a lower bound. It is measured on ``--sample`` jobs
and scaled to the month (said so in the table).

    python benchmarks/usage_report.py [--jobs 10000] [--runs 3] [--sample 300] [--screenshot FILE.png]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kiln.inventory import load_cluster  # noqa: E402
from kiln.usage import html_page, sacct  # noqa: E402
from kiln.usage.report import report  # noqa: E402
from tests.slurm_framing import SEP, frame  # noqa: E402
from tests.unit import usage_month  # noqa: E402

PER_JOB = ("import sys\nfrom kiln.usage import sacct\nfrom tests.slurm_framing import SEP\nline = sys.stdin.read()\n"
           "job = sacct.read(line, SEP)[0][0]\n"
           "print(job.job_id, job.gpus * job.elapsed / 3600)\n")


def kiln_once(cluster, text: str, reservations: str) -> tuple[dict[str, float], str]:
    t0 = time.perf_counter()
    jobs = sacct.read(text, SEP)[0]
    res = sacct.parse_reservations(reservations)
    t1 = time.perf_counter()
    data = report(jobs, cluster, usage_month.START, usage_month.END, cluster.setting("usage_gpu_hour_prices"),
                  cluster.setting("usage_currency"), res)
    t2 = time.perf_counter()
    json.dumps(data, indent=1)
    t3 = time.perf_counter()
    page = html_page.page(data)
    t4 = time.perf_counter()
    assert data["totals"]["jobs"] == len(jobs)
    return {"parse": t1 - t0, "report": t2 - t1, "json": t3 - t2, "html": t4 - t3, "total": t4 - t0}, page


def per_job(lines: list[str]) -> float:
    t0 = time.perf_counter()
    for line in lines:
        subprocess.run([sys.executable, "-c", PER_JOB], input=line, text=True, capture_output=True, check=True,
                       cwd=REPO)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sample", type=int, default=300, help="jobs the per-job alternative is measured on")
    parser.add_argument("--screenshot", type=Path, help="also write the page's screenshot (headless Chromium) here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cluster = load_cluster(usage_month.write_inventory(Path(tmp) / "inventory"))
        text, reservations = frame(usage_month.sacct_month(args.jobs), 17), usage_month.reservations_month()
        runs = []
        for _ in range(args.runs):
            times, page = kiln_once(cluster, text, reservations)
            runs.append(times)
        lines = [line + "\n" for line in text.split("\n") if line][: args.sample]
        alt = per_job(lines) * args.jobs / len(lines)
        if args.screenshot:
            html = Path(tmp) / "usage.html"
            html.write_text(page, encoding="utf-8")
            browser = shutil.which("chromium") or "chromium"
            subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                            "--disable-background-networking", "--disable-component-update", "--disable-sync",
                            f"--user-data-dir={Path(tmp) / 'profile'}", "--hide-scrollbars",
                            "--window-size=1280,1250", f"--screenshot={args.screenshot.resolve()}", html.as_uri()],
                           check=True, capture_output=True, timeout=120)
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"kiln usage, a month of {args.jobs:,} jobs ({args.runs} runs, median; page {len(page) / 1024:.0f} KiB)")
    print(f"{'':50} {'seconds':>9}")
    for key, title in (("parse", "kiln: read sacct + sacctmgr output"), ("report", "kiln: report (teams, users, days, "
                       "reservations)"), ("json", "kiln: JSON"), ("html", "kiln: HTML page with 3 plots"),
                       ("total", "kiln: all of its own work")):
        print(f"{title:50} {med[key]:>9.2f}")
    print(f"{'one process per job (measured on ' + str(len(lines)) + ', scaled)':50} {alt:>9.2f}")
    print(f"target: kiln's own work <= 10 s: {'met' if med['total'] <= 10 else 'NOT met'}; "
          f"{alt / med['total']:.0f}x less time than one process per job")


if __name__ == "__main__":
    main()
