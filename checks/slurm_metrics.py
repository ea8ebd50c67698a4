"""kiln's Slurm collector: Slurm's state as Prometheus metrics, written for node_exporter's textfile
collector on the controller (``kiln-slurm.prom``) by a systemd timer (roles/monitoring.py).

Slurm 22.05 and 23.x have no metrics endpoint of their own (``metrics/openmetrics`` came with 25.11),
so this reads the client commands, one call per question, never one per job or node:

+ ``scontrol ping``: slurmctld answers (``kiln_slurm_up{daemon="slurmctld"}``);
+ ``sacctmgr show cluster``: slurmdbd answers (``kiln_slurm_up{daemon="slurmdbd"}``);
+ ``sinfo -N``: nodes per state, and each drained node with who drained it (``by="kiln"`` when the
  reason starts with ``kiln:``, as kiln's checks write it; ``person`` otherwise);
+ ``squeue -O ...,tres-alloc``: jobs per state and account, pending jobs per account and reason, and
  GPUs allocated per account from the trackable resources (``gres/gpu=N``), so jobs that asked with
  ``--gpus`` or ``--gpus-per-node`` count as well as ``--gres=gpu:N``;
+ ``sdiag``: the DBD agent queue and the main scheduler's last and mean cycle;
+ kiln-job-summary's usage counters (checks/job_summary.py, a file, no command): per account the jobs,
  GPU-seconds, measured and useful GPU-seconds and cost of finished GPU jobs (``kiln_usage_*_total``),
  and each team's fair-share target (``kiln_usage_share_target``), as ``kiln usage`` reports them.

Pure parsers (tested on recorded outputs) and a runner apart; standard library only (the node's python3).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

from checks.drain_reasons import classify
from checks.parsers import sacctmgr, sinfo, squeue
from checks.parsers.delimited import separator
from checks.parsers.exposition import Exposition, write
from checks.parsers.scontrol import PING_COMMAND, ping_up
from checks.parsers.slurm_values import SLURM_ENV, tres_count

DBD_COMMAND = sacctmgr.show_command("cluster", fields=("cluster",))
JOB_FIELDS = ("State", "Account", "Reason", "tres-alloc")
SDIAG_COMMAND = ["sdiag"]
TIMEOUT = 20  # seconds per command: a hung slurmctld must not hold the timer
COUNTERS = "/var/lib/kiln/jobs/usage-counters.json"
SUMMARY_CONFIG = "/etc/slurm/kiln-job-summary.json"
USAGE = (("jobs", "jobs", "Finished GPU jobs per account (counted at their end by kiln-job-summary)."),
         ("gpu_seconds", "gpu_seconds", "GPU-seconds of finished jobs per account."),
         ("measured_gpu_seconds", "measured_gpu_seconds", "GPU-seconds of finished jobs whose GPU utilization "
          "kiln measured."),
         ("useful_gpu_seconds", "useful_gpu_seconds", "Measured GPU-seconds weighted by the jobs' GPU utilization."),
         ("cost", "cost", "Cost of finished jobs per account: GPU-hours x the price of their node type."))


def parse_nodes(text: str, sep: str) -> tuple[dict[str, int], list[tuple[str, str, str]]]:
    """(nodes per base state, [(node, who drained it, the check behind it)]) from
    ``sinfo.nodes_command(sep)``'s output. Who: the drain reason's class (checks/drain_reasons.py: kiln,
    rollout, repair, escalated, slurm, person); the check: its id where the class has one, else ''. The
    reason's own text is never a label: a label that changes restarts every rule's ``for:`` clock, and
    free text has no place in a series' name. A node listed once per partition counts once;
    ``drained``/``draining``/``drain`` are drained, and so is a node being rebooted with a reason (sinfo
    shows ``reboot^`` for a drained node mid-reboot); records that do not parse whole count as state
    ``unreadable``."""
    nodes, framed = sinfo.read_nodes(text, sep)
    seen = {n.name: (n.state, n.reason.strip()) for n in nodes.values()}
    states: dict[str, int] = {"unreadable": framed.bad} if framed.bad else {}
    drained = []
    for node, (state, reason) in sorted(seen.items()):
        base = sinfo.base_state(state) or "unknown"
        states[base] = states.get(base, 0) + 1
        if "drain" in base or (sinfo.rebooting(state) and reason):  # Slurm shows a drained node's reboot first
            drain = classify(reason)
            drained.append((node, drain.by or "person", drain.check or ""))
    return states, drained


def parse_jobs(text: str, sep: str) -> dict[str, dict]:
    """Per account: jobs per state, pending jobs per reason, GPUs of running jobs; from
    ``squeue.jobs_command(sep, JOB_FIELDS)``'s output (records that do not parse whole are counted under
    the account ``(unreadable)``)."""
    rows, framed = squeue.read_jobs(text, sep, JOB_FIELDS)
    accounts: dict[str, dict] = {}
    if framed.bad:
        accounts["(unreadable)"] = {"states": {"UNREADABLE": framed.bad}, "pending": {}, "gpus": 0}
    for job in rows:
        state, reason = job["State"], job["Reason"]
        a = accounts.setdefault(job["Account"] or "(none)", {"states": {}, "pending": {}, "gpus": 0})
        a["states"][state] = a["states"].get(state, 0) + 1
        if state == "PENDING":
            a["pending"][reason] = a["pending"].get(reason, 0) + 1
        elif state in ("RUNNING", "COMPLETING", "SUSPENDED"):
            a["gpus"] += tres_count(job["tres-alloc"])
    return accounts


def parse_sdiag(text: str) -> dict[str, int]:
    """The DBD agent queue and the main scheduler's last and mean cycle (microseconds) from sdiag."""
    out = {}
    m = re.search(r"^DBD Agent queue size:\s*(\d+)", text, re.M)
    if m:
        out["dbd_agent_queue"] = int(m.group(1))
    main = text.split("Main schedule statistics", 1)[-1].split("Backfilling stats", 1)[0]
    for key, field in (("Last cycle", "scheduler_last_cycle_microseconds"),
                       ("Mean cycle", "scheduler_mean_cycle_microseconds")):
        m = re.search(rf"^\s*{key}:\s*(\d+)", main, re.M)
        if m and "Main schedule statistics" in text:
            out[field] = int(m.group(1))
    return out


def usage_metrics(out: Exposition, counters: dict, config: dict) -> None:
    """``kiln_usage_*_total`` per account from kiln-job-summary's counters, and the teams' fair-share
    targets; accounts or numbers that are not what kiln writes are left out."""
    currency = config.get("currency", "")
    currency = currency if isinstance(currency, str) and re.fullmatch(r"[A-Z]{3}", currency) else ""
    valid = {a: v for a, v in (counters if isinstance(counters, dict) else {}).items()
             if re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", str(a)) and isinstance(v, dict)}
    for key, name, text in USAGE:
        metric = f"kiln_usage_{name}_total"
        out.add(metric, "counter", text)
        for account, figures in sorted(valid.items()):
            value = figures.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
                labels = {"account": account, **({"currency": currency} if key == "cost" and currency else {})}
                out.add(metric, "counter", text, float(value), labels)
    targets = config.get("share_targets", {})
    share = "Each team's fair-share target (its shares over all teams' shares)."
    out.add("kiln_usage_share_target", "gauge", share)
    for account, value in sorted(targets.items()):
        if re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", str(account)) and isinstance(value, (int, float)) \
                and not isinstance(value, bool):
            out.add("kiln_usage_share_target", "gauge", share, float(value), {"account": account})


def _json(path: str) -> dict:
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def exposition(ping: int, dbd: int, nodes: tuple, jobs: dict, sdiag: dict, now: float,
               counters: dict | None = None, config: dict | None = None) -> str:
    """The textfile (checks/parsers/exposition.py): every metric with HELP and TYPE, label values escaped."""
    states, drained = nodes
    out = Exposition()
    up = "1 when the Slurm daemon answers (slurmctld: scontrol ping; slurmdbd: sacctmgr)."
    out.add("kiln_slurm_up", "gauge", up, ping, {"daemon": "slurmctld"})
    out.add("kiln_slurm_up", "gauge", up, dbd, {"daemon": "slurmdbd"})
    out.add("kiln_slurm_nodes", "gauge", "Nodes per Slurm state.")
    for state, n in sorted(states.items()):
        out.add("kiln_slurm_nodes", "gauge", "Nodes per Slurm state.", n, {"state": state})
    text = ("1 for each drained node; by: who drained it (kiln, rollout, repair, escalated, slurm, tool, person), check: "
            "the check behind the drain.")
    out.add("kiln_slurm_node_drained", "gauge", text)
    for node, by, check in drained:
        out.add("kiln_slurm_node_drained", "gauge", text, 1, {"slurm_node": node, "by": by, "check": check})
    out.add("kiln_slurm_jobs", "gauge", "Jobs per state and account.")
    for account, v in sorted(jobs.items()):
        for state, n in sorted(v["states"].items()):
            out.add("kiln_slurm_jobs", "gauge", "Jobs per state and account.", n, {"account": account, "state": state})
    text = "Pending jobs per account and reason."
    out.add("kiln_slurm_jobs_pending", "gauge", text)
    for account, v in sorted(jobs.items()):
        for reason, n in sorted(v["pending"].items()):
            out.add("kiln_slurm_jobs_pending", "gauge", text, n, {"account": account, "reason": reason})
    text = "GPUs held by running jobs, per account (from tres-alloc)."
    out.add("kiln_slurm_gpus_allocated", "gauge", text)
    for account, v in sorted(jobs.items()):
        out.add("kiln_slurm_gpus_allocated", "gauge", text, v["gpus"], {"account": account})
    helps = {"dbd_agent_queue": "Messages slurmctld holds for slurmdbd (sdiag).",
             "scheduler_last_cycle_microseconds": "The main scheduler's last cycle (sdiag).",
             "scheduler_mean_cycle_microseconds": "The main scheduler's mean cycle (sdiag)."}
    for key, value in sorted(sdiag.items()):
        out.add(f"kiln_slurm_{key}", "gauge", helps[key], value)
    usage_metrics(out, counters or {}, config or {})
    out.add("kiln_slurm_collected_timestamp_seconds", "gauge", "When kiln's Slurm collector last ran.", int(now))
    return out.text()


def _run(args: list[str]) -> tuple[int, str]:
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT,
                           env={**os.environ, **SLURM_ENV})
        return p.returncode, p.stdout
    except (OSError, subprocess.TimeoutExpired):
        return 1, ""


def collect() -> str:
    _, ping = _run(PING_COMMAND)
    dbd_rc, _ = _run(DBD_COMMAND)
    sep = separator()
    _, nodes = _run(sinfo.nodes_command(sep))
    _, jobs = _run(squeue.jobs_command(sep, JOB_FIELDS))
    _, sdiag = _run(SDIAG_COMMAND)
    return exposition(int(ping_up(ping)), int(dbd_rc == 0), parse_nodes(nodes, sep), parse_jobs(jobs, sep), parse_sdiag(sdiag),
                      time.time(), _json(COUNTERS), _json(SUMMARY_CONFIG))


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    directory = args[0] if args else "/var/lib/prometheus/node-exporter"
    write(directory, "kiln-slurm.prom", collect())
    return 0


if __name__ == "__main__":
    sys.exit(main())
