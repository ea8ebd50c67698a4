"""What a rollout prints: the plan, the closing summary, and a self-contained HTML page with a picture
of compute nodes in service over time (inline SVG, no script, no network), drawn from the journal."""

from __future__ import annotations

import time

from kiln.hostlist import fold, group
from kiln.pages import render
from kiln.patch.plan import Plan


def plan_text(plan: Plan, options, resumed: bool = False) -> str:
    """The plan as a person reads it; ``resumed``: a continued rollout (its reservations exist already,
    so no window is computed from now)."""
    lines = [f"rollout of {', '.join(options.roles)}: {plan.total_compute} compute node(s), at most "
             f"{plan.max_unavailable} out of service at once; reboot {options.reboot}; failure budget "
             f"{options.failure_budget}"]
    for name in plan.service:
        lines.append(f"  service node {name} (not drained)")
    lead, window = getattr(options, "lead", 0), getattr(options, "window", 7200)
    for i, batch in enumerate(plan.compute):
        kind = "canary" if i == 0 and options.canary else "batch"
        lines.append(f"  {kind} {i + 1}: {fold(batch)}" + (f"  ({len(batch)} nodes)" if len(batch) > 1 else ""))
        begins = ("as journalled" if resumed else
                  f"from {time.strftime('%H:%M:%S', time.localtime(time.time() + lead))}" if i == 0 else
                  f"{_duration(lead)} after batch {i} is back" if lead else f"when batch {i} is back")
        lines.append(f"    maintenance reservation {begins}, for {_duration(window)}" +
                     (" (jobs that end before it may start there)" if lead else ""))
    if getattr(options, "notify", ""):
        lines.append(f"  jobs on drained nodes: SIG{options.notify}, {_duration(options.grace)} to checkpoint, then "
                     + ("requeued if Slurm may requeue them, else waited for" if options.requeue else "waited for"))
    for name in plan.service_after:
        lines.append(f"  service node {name} (not drained), after every compute node")
    if plan.slurm_upgrade:
        u = plan.slurm_upgrade
        lines.append(f"  Slurm upgrade {u['from']} -> {u['to']} in SchedMD's order:")
        lines += [f"    {i + 1}. {step}" for i, step in enumerate(u["steps"])]
    for why, names in group(plan.skipped):  # nodes skipped for one reason on one line
        lines.append(f"  skipped {fold(names)}: {why}")
    if not plan.service and not plan.compute and not plan.service_after:
        lines.append("  nothing to patch")
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def summary(outcome, journal: str, page: str, jobs: dict | None = None) -> dict:
    counts: dict[str, int] = {}
    for r in outcome.results.values():
        counts[r["result"]] = counts.get(r["result"], 0) + 1
    return {"result": "stopped" if outcome.stopped else "completed", "stopped": outcome.stopped,
            "nodes": outcome.results, "counts": counts, "batches": outcome.batches, "jobs": jobs or {},
            "journal": journal, "report": page}


def summary_text(s: dict, verbose: int = 0) -> str:
    """Nodes with the same result and detail on one line (``patched  gpu[001-064]``) unless ``verbose``;
    a failed node always on its own."""
    lines = ["", f"rollout {s['result']}" + (f": {s['stopped']}" if s["stopped"] else "")]
    rows = [([n], r) for n, r in s["nodes"].items()]
    if not verbose:
        alone = [([n], r) for n, r in s["nodes"].items() if r["result"] == "failed"]
        same = group({n: (r["result"], r["detail"]) for n, r in s["nodes"].items() if r["result"] != "failed"})
        rows = [(names, {"result": key[0], "detail": key[1]}) for key, names in same] + alone
    width = max([len(fold(names)) for names, _ in rows] + [4])
    for names, r in rows:
        lines.append(f"  {fold(names):<{width}}  {r['result']:<12} {r['detail']}".rstrip())
    batches = s["batches"]
    if len(batches) > 10 and not verbose:
        seconds = sorted(b["seconds"] for b in batches)
        lines.append(f"  {len(batches)} batches: median {seconds[len(seconds) // 2]:.1f} s, longest {seconds[-1]:.1f} s "
                     "(each in the journal and the report; -v lists them)")
        batches = []
    for b in batches:
        lines.append(f"  batch {b['index'] + 1} ({fold(b['nodes']) or '-'}): {b['seconds']:.1f} s = jobs "
                     f"{b['drain_s']:.1f} + patch {b['patch_s']:.1f} + reboot {b['reboot_s']:.1f} + kiln "
                     f"{b['overhead_s']:.1f}")
    for job, j in s.get("jobs", {}).items():
        lines.append(f"  job {job} ({fold(j['nodes'])}): {', then '.join(j['path'])}")
    lines.append("summary: " + ", ".join(f"{n} {k}" for k, n in sorted(s["counts"].items())))
    lines.append(f"journal: {s['journal']}\nreport:  {s['report']}")
    return "\n".join(lines)


def _chart(samples: list[tuple[float, int]], total: int, floor: int, marks: list[tuple[float, str]]) -> dict | None:
    """The geometry of the in-service chart (numbers and mark labels; the template draws it)."""
    w, h, pad = 760, 220, 40
    if not samples:
        return None
    t0, t1 = samples[0][0], max(samples[-1][0], samples[0][0] + 1)
    x = lambda t: round(pad + (t - t0) / (t1 - t0) * (w - 2 * pad), 1)  # noqa: E731
    y = lambda n: round(h - pad - n / max(total, 1) * (h - 2 * pad), 1)  # noqa: E731
    points, prev = [], None
    for t, n in samples:
        if prev is not None:
            points.append(f"{x(t):.1f},{y(prev):.1f}")
        points.append(f"{x(t):.1f},{y(n):.1f}")
        prev = n
    return {"w": w, "h": h, "pad": pad, "floor_y": y(floor), "ticks": [(n, y(n)) for n in range(total + 1)],
            "marks": [(x(t), label) for t, label in marks], "points": " ".join(points), "seconds": f"{t1 - t0:.0f}"}


def html(records: list[dict], cluster: str) -> str:
    """The rollout's page (templates/pages/rollout.html.j2) from its journal's records."""
    from kiln.patch.maintenance import job_paths
    start = next((r for r in records if r["event"] == "start"), {})
    plan = start.get("plan", {})
    total, limit = plan.get("total_compute", 0), plan.get("max_unavailable", 1)
    samples = [(r["t"], r["in_service"]) for r in records if r["event"] == "sample"]
    marks = [(r["t"], f"b{r['index'] + 1}") for r in records if r["event"] == "batch" and r["phase"] == "begin"]
    end = next((r for r in records if r["event"] == "end"), {})
    options = start.get("options", {})
    floor = max(0, total - limit)
    return render("rollout.html.j2", cluster=cluster, roles=options.get("roles", []), reboot=options.get("reboot"),
                  limit=limit, total=total, result=end.get("result", "unfinished"), why=end.get("why", ""),
                  least=min((n for _, n in samples), default=None), floor=floor,
                  chart=_chart(samples, total, floor, marks),
                  nodes=[r for r in records if r["event"] == "node"],
                  batches=[r for r in records if r["event"] == "batch" and r["phase"] == "done"],
                  jobs=list(job_paths(records).items()))
