"""kiln-remediation.prom: what kiln-remediate's journal says, for node_exporter's textfile collector
(repairs by kind and result, escalations, time back in service, the breaker, nodes in repair)."""

from __future__ import annotations

import os

from checks import repairs
from checks.parsers.exposition import Exposition, write
from checks.remediation_policy import replay


def metrics(events: list[dict], now: float) -> str:
    """kiln-remediation.prom: repairs by kind and result, escalations, the time from Slurm's drain to
    kiln taking it up and from there to back in service, the breaker, nodes in repair or escalated
    (from the journal)."""
    results: dict[tuple[str, str], int] = {}
    steps: dict[str, str] = {}
    escalations = returns = detected = 0
    seconds = detect = 0.0
    opened: dict[str, float] = {}
    for e in events:
        node, kind = e.get("node", ""), e.get("event")
        if kind == "fault":
            opened.setdefault(node, e.get("t", now))  # a fault that follows a closed one: still out of service
            if isinstance(e.get("drained_at"), (int, float)):
                detected += 1
                detect += max(0.0, e.get("t", now) - e["drained_at"])
        elif kind == "step":
            steps[node] = repairs.kind(e.get("step", ""))
        elif kind == "result":
            key = (steps.get(node, "unknown"), str(e.get("result")))
            results[key] = results.get(key, 0) + 1
        elif kind == "escalated":
            escalations += 1
        elif kind == "released":
            opened.pop(node, None)
        elif kind == "returned" and node in opened:
            returns += 1
            seconds += e.get("t", now) - opened.pop(node)
    h = replay(events)
    out = Exposition()
    text = "Repair steps by kind and result."
    out.add("kiln_remediation_repairs_total", "counter", text)
    for (k, r), n in sorted(results.items()):
        out.add("kiln_remediation_repairs_total", "counter", text, n, {"kind": k, "result": r})
    out.add("kiln_remediation_escalations_total", "counter", "Nodes handed to a person.", escalations)
    text = "Time from a node seen out of service to back in service."
    out.add("kiln_remediation_returned_seconds", "summary", text, round(seconds, 3), suffix="_sum")
    out.add("kiln_remediation_returned_seconds", "summary", text, returns, suffix="_count")
    text = "Time from Slurm's drain (its reason's time) to kiln-remediate taking the fault up."
    out.add("kiln_remediation_detect_seconds", "summary", text, round(detect, 3), suffix="_sum")
    out.add("kiln_remediation_detect_seconds", "summary", text, detected, suffix="_count")
    out.add("kiln_remediation_breaker_open", "gauge", "1 while the circuit breaker stops automatic repair.",
            int(h.breaker_open))
    text = "Nodes in a fault episode, and escalated nodes."
    out.add("kiln_remediation_nodes", "gauge", text,
            sum(1 for n in h.nodes.values() if n.episode and not n.escalated), {"state": "repairing"})
    out.add("kiln_remediation_nodes", "gauge", text, sum(1 for n in h.nodes.values() if n.escalated),
            {"state": "escalated"})
    out.add("kiln_remediation_look_timestamp_seconds", "gauge", "When kiln-remediate last looked.", int(now))
    return out.text()


def write_metrics(directory: str, text: str) -> None:
    if directory and os.path.isdir(directory):  # no textfile directory: no node_exporter to read it
        write(directory, "kiln-remediation.prom", text)
