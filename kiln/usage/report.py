"""GPU-hours, CPU-hours, cost and idle allocation per team, user and job, from the jobs of one window.

Pure: ``report(jobs, cluster, since, until, prices, currency)`` gives the plain dict ``kiln usage --json``
prints. A job's time counts only inside the window (a job that started before it or runs past it counts
its share, as ``sreport`` does). Cost is what Slurm bills: the job's ``billing`` TRES where kiln weighs
its partition (kiln/usage/billing.py; an exclusive job pays its node), else its GPU-hours times the
price per GPU-hour of its node type (``kiln_usage_gpu_hour_prices``). Useful GPU-hours weigh GPU-hours
by the job's measured GPU utilization (kiln's AdminComment), so the cost per useful GPU-hour is what a
team pays for work its GPUs did. Jobs without a measurement are left out of the useful figures, and the
share of GPU-hours that was measured is reported beside them. A team's share used is its share of what
Slurm's fair share counts in the window (billing x seconds x its QoS's UsageFactor), beside its share of
GPU-hours. Waiting counts from when a job became eligible (``Eligible``: after a hold, a dependency or
``--begin``), not from its submission. GPU-hours per team come day by day too (UTC days), and each
Slurm reservation's GPU-hours held in the window beside the share its jobs used.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timezone

from kiln.hostlist import HostListError, expand
from kiln.inventory.model import Cluster
from kiln.usage import billing
from kiln.usage.sacct import Job, Reservation

TOP = 10
DAY = 86400


def _clipped(job: Job, since: float, until: float) -> tuple[float, float]:
    """The part of the job's run inside [since, until) (empty when it never started or ran outside)."""
    if job.start is None:
        return since, since
    lo, hi = max(job.start, since), min(job.end if job.end is not None else until, until)
    return lo, max(lo, hi)


def _seconds_in(job: Job, since: float, until: float) -> float:
    lo, hi = _clipped(job, since, until)
    return hi - lo


def _lost_seconds(job: Job, since: float, until: float) -> float:
    """Of a run that ended by a failure, a preemption or a requeue, the seconds inside [since, until) whose
    work went with it: after its last checkpoint (``job.saved``, the job's own word, used only when it falls
    within the run), else the whole run."""
    lo, hi = _clipped(job, since, until)
    if job.saved is not None and job.start is not None and job.end is not None and job.start <= job.saved <= job.end:
        lo = min(hi, max(lo, job.saved))
    return hi - lo


def _node_types(cluster: Cluster, nodes: str, cache: dict) -> list[str]:
    """The inventory's node types of a job's nodes (Slurm's host list), each once, in the list's order: a
    job across types is listed under each, not under its first node's."""
    if nodes not in cache:
        try:
            names = expand(nodes) if nodes and nodes != "None assigned" else []
        except HostListError:
            names = []
        found = [h.node_type for n in names if (h := cluster.hosts.get(n)) is not None and h.node_type]
        cache[nodes] = list(dict.fromkeys(found))
    return cache[nodes]


def _round(value: float, digits: int = 3) -> float:
    return round(value + 0.0, digits)


def day_starts(since: float, until: float) -> list[float]:
    """The UTC midnights of the days that [since, until) touches (the first may be before ``since``)."""
    first = since - since % DAY
    return [first + i * DAY for i in range(int((until - first + DAY - 1) // DAY))]


def _per_day(job: Job, since: float, until: float, days: list[float], series: list[float]) -> None:
    """Add the job's GPU-hours inside [since, until) to ``series``, day by day."""
    lo, hi = _clipped(job, since, until)
    if not job.gpus or hi <= lo:
        return
    first = int((lo - days[0]) // DAY)
    for i in range(first, min(len(days), int((hi - days[0]) // DAY) + 1)):
        overlap = min(hi, days[i] + DAY) - max(lo, days[i])
        if overlap > 0:
            series[i] += job.gpus * overlap / 3600


def reservation_figures(reservations: list[Reservation], jobs: list[Job], cluster: Cluster, since: float,
                        until: float) -> list[dict]:
    """Per reservation: the GPU-hours it held inside the window (its GPUs: Slurm's TRES, else the
    inventory's GPUs of its nodes) and the share of them its jobs used."""
    used: dict[str, float] = defaultdict(float)
    for job in jobs:
        if job.reservation:
            used[job.reservation] += job.gpus * _seconds_in(job, since, until) / 3600
    out = []
    for res in reservations:
        seconds = max(0.0, min(res.end, until) - max(res.start, since))
        gpus = res.gpus
        if gpus is None:
            try:
                gpus = sum(h.gpu_count for name in expand(res.nodes) if (h := cluster.hosts.get(name)) is not None)
            except HostListError:
                gpus = 0
        held = gpus * seconds / 3600
        out.append({"reservation": res.name, "nodes": res.nodes, "gpus": gpus, "start": res.start, "end": res.end,
                    "reserved_gpu_hours": _round(held), "used_gpu_hours": _round(used.get(res.name, 0.0)),
                    "used_share": _round(min(1.0, used.get(res.name, 0.0) / held)) if held else None})
    return out


# The runs whose work after their last checkpoint ended with them (the job, requeued, starts again from
# that checkpoint; a job that names none starts from nothing): sacct -D's state of each earlier run, and why
LOST = {"REQUEUED": "requeue", "PREEMPTED": "preemption", "NODE_FAIL": "node_failure"}


def report(jobs: list[Job], cluster: Cluster, since: float, until: float, prices: dict[str, float],
           currency: str, reservations: list[Reservation] = ()) -> dict:
    teams = {t.name: t for t in cluster.teams}
    days = day_starts(since, until)
    daily: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(days))
    total_shares = sum(t.shares for t in cluster.teams) or 1
    per_team: dict[str, dict] = defaultdict(lambda: defaultdict(float))
    per_user: dict[tuple[str, str], dict] = defaultdict(lambda: defaultdict(float))
    rows, types, counted = [], {}, set()
    measured_by: dict[str, float] = defaultdict(float)
    factors = {q.name: q.usage_factor for q in cluster.setting("qos")}  # Slurm's UsageFactor per QoS (1 if unset)
    billed = billing.partition_weights(cluster, prices)
    for job in jobs:
        seconds = _seconds_in(job, since, until)
        gpu_h, cpu_h = job.gpus * seconds / 3600, job.cpus * seconds / 3600
        node_types = _node_types(cluster, job.nodes, types)
        charged_by = "billing" if job.billing is not None and billed.get(job.partition) else "gpu_hours"
        # without Slurm's billing: GPU-hours at the price of its types (one price a partition: the inventory check)
        cost = (billing.cost(job.billing, seconds) if charged_by == "billing"
                else gpu_h * max((prices.get(t, 0.0) for t in node_types), default=0.0))
        measured = job.gpu_util is not None and gpu_h > 0
        useful = gpu_h * job.gpu_util / 100 if measured else 0.0
        idle = gpu_h - useful if measured else 0.0
        pending = 0.0
        ready = job.eligible if job.eligible is not None else job.submit  # a held or dependent job waits from then
        if ready is not None and since <= ready < until:
            pending = max(0.0, min(job.start if job.start is not None else until, until) - ready)
        lost = LOST.get(job.state)
        first_run = job.job_id not in counted  # sacct -D: one record per run, under the job's id
        counted.add(job.job_id)
        for acc in (per_team[job.account], per_user[(job.account, job.user)]):
            acc["jobs"] += 1 if first_run else 0
            acc["runs"] += 1
            acc["gpu_hours"] += gpu_h
            if lost:
                lost_h = job.gpus * _lost_seconds(job, since, until) / 3600
                acc["lost_gpu_hours"] += lost_h
                acc[f"lost_gpu_hours_{lost}"] += lost_h
            acc["cpu_hours"] += cpu_h
            acc["cost"] += cost
            acc["useful_gpu_hours"] += useful
            acc["idle_gpu_hours"] += idle
            acc["measured_gpu_hours"] += gpu_h if measured else 0.0
            acc["measured_cost"] += cost if measured else 0.0
            acc["pending_hours"] += pending / 3600
            # what fair share counts: billing (Slurm's default: CPUs) x seconds x the QoS's UsageFactor
            acc["fair_share_usage"] += ((job.billing if job.billing is not None else job.cpus) * seconds
                                        * factors.get(job.qos, 1.0))
        if measured:
            measured_by[job.util_by or "gpu_util"] += gpu_h
        _per_day(job, since, until, days, daily[job.account])
        if gpu_h or cpu_h:
            rows.append({"job": job.job_id, "user": job.user, "team": job.account, "name": job.name,
                         "state": job.state, "node_types": node_types, "gpus": job.gpus,
                         "gpu_hours": _round(gpu_h), "cost": _round(cost, 2), "charged_by": charged_by,
                         "gpu_util": job.gpu_util, "util_by": job.util_by,
                         "idle_gpu_hours": _round(idle) if measured else None})
    all_gpu_h = sum(v["gpu_hours"] for v in per_team.values())
    all_usage = sum(v["fair_share_usage"] for v in per_team.values())

    def figures(acc: dict) -> dict:
        useful = acc["useful_gpu_hours"]
        return {"jobs": int(acc["jobs"]), "runs": int(acc["runs"]),
                "gpu_hours": _round(acc["gpu_hours"]), "cpu_hours": _round(acc["cpu_hours"]),
                "lost_gpu_hours": _round(acc["lost_gpu_hours"]),
                **{f"lost_gpu_hours_{why}": _round(acc[f"lost_gpu_hours_{why}"]) for why in LOST.values()},
                "cost": _round(acc["cost"], 2), "useful_gpu_hours": _round(useful),
                "idle_gpu_hours": _round(acc["idle_gpu_hours"]),
                "measured_share": _round(acc["measured_gpu_hours"] / acc["gpu_hours"]) if acc["gpu_hours"] else None,
                "cost_per_useful_gpu_hour": _round(acc["measured_cost"] / useful, 2) if useful else None,
                # what each GPU-hour whose work was kept cost: the lost hours' price spread over the others
                "cost_per_kept_gpu_hour": (_round(acc["cost"] / (acc["gpu_hours"] - acc["lost_gpu_hours"]), 2)
                                           if acc["gpu_hours"] - acc["lost_gpu_hours"] > 1e-9 else None),
                "pending_hours": _round(acc["pending_hours"])}

    team_rows = []
    for name in sorted(set(per_team) | set(teams)):
        acc, team = per_team.get(name, defaultdict(float)), teams.get(name)
        team_rows.append({"team": name, **figures(acc),
                          "share_target": _round(team.shares / total_shares) if team else None,
                          # the window's share of what fair share counts (a scavenger QoS of UsageFactor 0
                          # uses GPU-hours, not share) beside the share of GPU-hours
                          "share_used": _round(acc["fair_share_usage"] / all_usage) if all_usage else 0.0,
                          "gpu_hours_share": _round(acc["gpu_hours"] / all_gpu_h) if all_gpu_h else 0.0,
                          "gpu_limit": team.gpu_limit if team else None})
    cluster_acc: dict = defaultdict(float)
    for acc in per_team.values():
        for k, v in acc.items():
            cluster_acc[k] += v
    return {
        "cluster": cluster.name, "since": since, "until": until, "currency": currency,
        "prices": dict(sorted(prices.items())), "totals": figures(cluster_acc),
        "teams": team_rows,
        "users": [{"team": t, "user": u, **figures(acc)} for (t, u), acc in sorted(per_user.items())],
        "top_cost_jobs": sorted(rows, key=lambda r: (-r["cost"], -r["gpu_hours"], r["job"]))[:TOP],
        "idle_jobs": sorted((r for r in rows if r["idle_gpu_hours"]), key=lambda r: -r["idle_gpu_hours"])[:TOP],
        "days": [datetime.fromtimestamp(d, timezone.utc).strftime("%Y-%m-%d") for d in days],
        "team_gpu_hours_per_day": {name: [_round(v) for v in daily[name]] for name in sorted(set(daily) | set(teams))},
        # what "useful" measured: GPU-hours whose busy share came from DCGM's engine activity (time the
        # graphics/compute engine was active) or from NVML's utilization (time any kernel ran: a job with one
        # small kernel always running reads 100 %)
        "useful_measured_by": {k: _round(v) for k, v in sorted(measured_by.items())},
        "reservations": reservation_figures(list(reservations), jobs, cluster, since, until),
    }
