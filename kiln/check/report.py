"""`kiln check` reports: the per-node verdict table, JSON, and one self-contained HTML matrix."""

from __future__ import annotations

import json
import time

from checks.verdict import Verdict
from kiln.hostlist import fold, group
from kiln.pages import render

ORDER = {"fail": 0, "warn": 1, "ok": 2}


def summary(results: dict[str, list[Verdict]]) -> dict[str, str]:
    """Node -> "ok" | "warn" | "fail" (its worst verdict)."""
    return {n: min((v.severity for v in vs), key=ORDER.__getitem__, default="ok") for n, vs in results.items()}


def table(results: dict[str, list[Verdict]], suites: list[str], verbose: int = 0) -> str:
    """One row per node with ``verbose``; else nodes whose rows read the same share one row, their
    names folded (``kilntest[02-05]``). A failing node always has its own row."""
    worst = summary(results)
    rows: dict[str, str] = {}
    for node, verdicts in results.items():
        cells = []
        for suite in suites:
            vs = [v for v in verdicts if v.suite in (suite, "ssh")]
            bad = [v for v in vs if v.severity == "fail"]
            warned = [v for v in vs if v.severity == "warn"]
            cells.append(f"{'FAIL ' + str(len(bad)) if bad else 'warn ' + str(len(warned)) if warned else 'ok' if vs else '-':<8}")
        problems = sorted((v for v in verdicts if v.severity != "ok"), key=lambda v: ORDER[v.severity])
        first = f"{problems[0].id}: {problems[0].message}" if problems else ""
        rows[node] = f"{worst[node].upper():<7}  " + "  ".join(cells) + f"  {first[:110]}"
    if verbose:
        lines = [(node, row) for node, row in rows.items()]
    else:
        alone = {n: (n, row) for n, row in rows.items() if worst[n] == "fail"}
        lines = [(fold(nodes), row) for row, nodes in group({n: r for n, r in rows.items() if n not in alone})]
        lines = sorted(lines + list(alone.values()), key=lambda line: ORDER[line[1].split()[0].lower()])
    width = max([len(name) for name, _ in lines] + [4])
    head = f"{'node':<{width}}  {'verdict':<7}  " + "  ".join(f"{s:<8}" for s in suites) + "  first problem"
    return "\n".join([head] + [f"{name:<{width}}  {row}".rstrip() for name, row in lines])


def as_json(results: dict[str, list[Verdict]], seconds: dict[str, float]) -> str:
    worst = summary(results)
    return json.dumps({"nodes": {n: {"verdict": worst[n], "seconds": round(seconds.get(n, 0), 2),
                                     "checks": [v.as_dict() for v in vs]} for n, vs in results.items()},
                       "summary": {s: sum(w == s for w in worst.values()) for s in ("ok", "warn", "fail")}}, indent=1)


def as_html(results: dict[str, list[Verdict]], cluster_name: str) -> str:
    """A node-by-check matrix a person can scan: one row per node, one column per check id
    (templates/pages/check.html.j2)."""
    ids = sorted({v.id for vs in results.values() for v in vs})
    worst = summary(results)
    marks = {"ok": "✓", "warn": "!", "fail": "✗", "": ""}
    nodes = []
    for node, verdicts in results.items():
        by_id: dict[str, list[Verdict]] = {}
        for v in verdicts:
            by_id.setdefault(v.id, []).append(v)
        cells = []
        for i in ids:
            vs = by_id.get(i, [])
            sev = min((v.severity for v in vs), key=ORDER.__getitem__, default="")
            cells.append({"severity": sev, "mark": marks[sev], "tip": "\n".join(v.message for v in vs)})
        nodes.append({"name": node, "worst": worst[node], "cells": cells})
    problems = [{"node": n, "severity": v.severity, "id": v.id, "message": v.message}
                for n, vs in results.items() for v in vs if v.severity != "ok"]
    counts = {s: sum(w == s for w in worst.values()) for s in ("ok", "warn", "fail")}
    return render("check.html.j2", cluster=cluster_name, when=time.strftime("%Y-%m-%d %H:%M:%S"), ids=ids,
                  nodes=nodes, problems=problems, counts=counts)
