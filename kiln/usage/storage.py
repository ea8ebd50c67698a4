"""Each team's storage against its quota, for ``kiln usage``: the quotas of kiln/inventory/quotas.py read
back from each GlusterFS volume's server (``gluster volume quota VOLUME list --xml``,
checks/parsers/gluster_quota.py)."""

from __future__ import annotations

from checks.parsers import gluster_quota
from checks.verdict import CheckError
from kiln.inventory.quotas import team_quotas
from kiln.shell import command


def gluster_quotas(cluster) -> list:
    """The team quotas kiln usage reads back (GlusterFS; Lustre's and BeeGFS' are not read yet)."""
    return [q for q in team_quotas(cluster) if q.mount.type == "glusterfs"]


def asked(cluster) -> dict[tuple[str, str], list[str]]:
    """(server host, volume) -> the command that lists the volume's quotas there, for every volume with a
    team quota. The server is the inventory host that serves the volume (validation made sure of one)."""
    out = {}
    for quota in gluster_quotas(cluster):
        host = next(h.name for h in cluster.hosts.values() if quota.server in (h.name, h.address))
        out[(host, quota.volume)] = command(*gluster_quota.command(quota.volume))
    return out


def rows(cluster, answers: dict[tuple[str, str], tuple[int, str, str]]) -> tuple[list[dict], list[str]]:
    """One row per team quota (team, where on the clients, limit, used, share of it used, over it), and what
    could not be read: ``answers`` maps (server host, volume) to the command's (exit, stdout, stderr)."""
    usage: dict[tuple[str, str], dict[str, gluster_quota.QuotaUsage]] = {}
    problems = []
    for (host, volume), (rc, stdout, stderr) in answers.items():
        try:
            if rc != 0 and "<cliOutput>" not in stdout:
                raise CheckError(f"exited {rc}: {(stderr or stdout).strip()[:200]}")
            usage[(host, volume)] = {u.path: u for u in gluster_quota.parse(stdout)}
        except CheckError as error:
            problems.append(f"the quotas of GlusterFS volume {volume} on {host} could not be read: {error}")
    out = []
    for quota in gluster_quotas(cluster):
        host = next(h.name for h in cluster.hosts.values() if quota.server in (h.name, h.address))
        if (host, quota.volume) not in usage:
            continue
        found = usage[(host, quota.volume)].get(quota.path_in_volume)
        used = found.used if found else None
        out.append({"team": quota.team, "path": f"{quota.parent}/{quota.team}", "volume": quota.volume,
                    "limit": quota.limit, "limit_bytes": found.hard_limit if found else None, "used_bytes": used,
                    "used_share": round(used / found.hard_limit, 4) if found and used is not None and found.hard_limit
                    else None,
                    "exceeded": found.hard_exceeded if found else None,
                    "set": found is not None})
    return out, problems
