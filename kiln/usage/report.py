"""GPU-hours, CPU-hours, cost and idle allocation per team, user and job, from the jobs of one window.

Pure: ``report(jobs, cluster, since, until, prices, currency)`` gives the plain dict ``kiln usage --json``
prints. A job's time counts only inside the window (a job that started before it or runs past it counts
its share, as ``sreport`` does). Cost is the job's GPU-hours times the price per GPU-hour of its node
type (``kiln_usage_gpu_hour_prices``); useful GPU-hours weigh GPU-hours by the job's measured GPU
utilization (kiln's AdminComment), so the cost per useful GPU-hour is what a team pays for work its
GPUs did. Jobs without a measurement are left out of the useful figures, and the share of GPU-hours
that was measured is reported beside them.
"""

from __future__ import annotations

from collections import defaultdict

from kiln.hostlist import HostListError, expand
from kiln.inventory.model import Cluster
from kiln.usage.sacct import Job

TOP = 10


def _seconds_in(job: Job, since: float, until: float) -> float:
    if job.start is None:
        return 0.0
    end = job.end if job.end is not None else until
    return max(0.0, min(end, until) - max(job.start, since))


def _node_type(cluster: Cluster, nodes: str, cache: dict) -> str | None:
    if nodes not in cache:
        try:
            first = expand(nodes)[0] if nodes and nodes != "None assigned" else ""
        except (HostListError, IndexError):
            first = ""
        host = cluster.hosts.get(first)
        cache[nodes] = host.node_type if host else None
    return cache[nodes]


def _round(value: float, digits: int = 3) -> float:
    return round(value + 0.0, digits)


def report(jobs: list[Job], cluster: Cluster, since: float, until: float, prices: dict[str, float],
           currency: str) -> dict:
    teams = {t.name: t for t in cluster.teams}
    total_shares = sum(t.shares for t in cluster.teams) or 1
    per_team: dict[str, dict] = defaultdict(lambda: defaultdict(float))
    per_user: dict[tuple[str, str], dict] = defaultdict(lambda: defaultdict(float))
    rows, types = [], {}
    for job in jobs:
        seconds = _seconds_in(job, since, until)
        gpu_h, cpu_h = job.gpus * seconds / 3600, job.cpus * seconds / 3600
        node_type = _node_type(cluster, job.nodes, types)
        cost = gpu_h * prices.get(node_type or "", 0.0)
        measured = job.gpu_util is not None and gpu_h > 0
        useful = gpu_h * job.gpu_util / 100 if measured else 0.0
        idle = gpu_h - useful if measured else 0.0
        pending = 0.0
        if job.submit is not None and since <= job.submit < until:
            pending = max(0.0, (job.start if job.start is not None else until) - job.submit)
        for acc in (per_team[job.account], per_user[(job.account, job.user)]):
            acc["jobs"] += 1
            acc["gpu_hours"] += gpu_h
            acc["cpu_hours"] += cpu_h
            acc["cost"] += cost
            acc["useful_gpu_hours"] += useful
            acc["idle_gpu_hours"] += idle
            acc["measured_gpu_hours"] += gpu_h if measured else 0.0
            acc["measured_cost"] += cost if measured else 0.0
            acc["pending_hours"] += pending / 3600
        if gpu_h or cpu_h:
            rows.append({"job": job.job_id, "user": job.user, "team": job.account, "name": job.name,
                         "state": job.state, "node_type": node_type, "gpus": job.gpus,
                         "gpu_hours": _round(gpu_h), "cost": _round(cost, 2),
                         "gpu_util": job.gpu_util, "idle_gpu_hours": _round(idle) if measured else None})
    all_gpu_h = sum(v["gpu_hours"] for v in per_team.values())

    def figures(acc: dict) -> dict:
        useful = acc["useful_gpu_hours"]
        return {"jobs": int(acc["jobs"]), "gpu_hours": _round(acc["gpu_hours"]), "cpu_hours": _round(acc["cpu_hours"]),
                "cost": _round(acc["cost"], 2), "useful_gpu_hours": _round(useful),
                "idle_gpu_hours": _round(acc["idle_gpu_hours"]),
                "measured_share": _round(acc["measured_gpu_hours"] / acc["gpu_hours"]) if acc["gpu_hours"] else None,
                "cost_per_useful_gpu_hour": _round(acc["measured_cost"] / useful, 2) if useful else None,
                "pending_hours": _round(acc["pending_hours"])}

    team_rows = []
    for name in sorted(set(per_team) | set(teams)):
        acc, team = per_team.get(name, defaultdict(float)), teams.get(name)
        team_rows.append({"team": name, **figures(acc),
                          "share_target": _round(team.shares / total_shares) if team else None,
                          "share_used": _round(acc["gpu_hours"] / all_gpu_h) if all_gpu_h else 0.0,
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
    }
