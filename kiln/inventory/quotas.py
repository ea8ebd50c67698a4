"""Team quotas: a hard limit on each team's directory under a team-directory parent of a shared filesystem.

A team sets them as ``quotas: {/gluster/projects: 500GB}``: the key is where the teams' directories are
(a mount's path joined with one of its ``team_directories``), the value the limit of this team's directory
there. Filesystems:

+ GlusterFS: a directory quota on the volume (``gluster volume quota VOL limit-usage /projects/TEAM 500GB``),
  set by the storage_server role on the host serving the volume, which must be a host of the inventory
  (roles/storage_server.py). A write past it fails with EDQUOT ("Disk quota exceeded") on every client.
  A brick trusts its count of a directory's use for the volume's ``quota_soft_timeout`` (60 s, under 80% of
  the limit) or ``quota_hard_timeout`` (5 s, above): a write in that time may pass the limit by what lands
  meanwhile; 0 counts at every write.
+ Lustre: a project quota, the team's gid as the project id (``lfs project -p GID -s -r DIR``: the directory
  and what is made in it carry the project; ``lfs setquota -p GID -B LIMIT MOUNT``), set by the storage role
  from the host that makes the team directories (the first inventory host mounting it). Quotas must be on in
  the filesystem (``lctl conf_param FSNAME.quota.ost=p`` on the MGS: the site's). Shown as plans only here.
+ BeeGFS: a group quota on the team's gid (``beegfs-ctl --setquota --gid GID --sizelimit=LIMIT``; files in
  the setgid team directories carry the team's group), from that same host; enforcement is switched on in
  the servers' configuration (``quotaEnableEnforcement``: the site's). Shown as plans only here.
+ NFS: a project quota on the server's own filesystem, the team's gid as the project id, set by the
  storage_server role on the inventory host exporting it (roles/storage_server.py): on XFS mounted with
  ``prjquota`` (``xfs_quota``: ``project -s``, ``limit -p bhard=``), on ext4 with the ``project`` feature and
  ``prjquota`` (``chattr -p ID +P``, ``setquota -P``); on any other filesystem, or one mounted without them,
  the deploy stops on that server naming what to change. Shown as plans only here (the testbed's export is on
  a filesystem without project quotas).
+ the others: refused by validation, with that reason: the operator sets them on the server.

Lustre, BeeGFS and NFS count by number, so a team there needs a gid in the inventory.

Validation (``check``) names the team's key for each problem; ``team_quotas`` gives the roles every quota
already resolved to its mount and server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kiln.inventory.gluster import server_of

SUPPORTED = ("glusterfs", "lustre", "beegfs", "nfs")


@dataclass(frozen=True)
class TeamQuota:
    team: str
    parent: str      # where the teams' directories are on clients, e.g. /gluster/projects
    directory: str   # the mount's team_directories entry, e.g. projects ('.': the mount's root)
    mount: Any       # StorageMount
    limit: str       # e.g. 500GB

    @property
    def server(self) -> str:
        """The host named by the mount's source (SERVER:/VOLUME)."""
        return self.mount.source.split(":", 1)[0]

    @property
    def volume(self) -> str:
        return self.mount.source.split(":", 1)[1].strip("/")

    @property
    def path_in_volume(self) -> str:
        """The team's directory as the volume names it, e.g. /projects/vision."""
        return "/" + ("" if self.directory == "." else self.directory + "/") + self.team


def _parents(hosts) -> dict[str, tuple[Any, str]]:
    """team-directory parent -> (a mount that holds it, its team_directories entry), first host first."""
    found: dict[str, tuple[Any, str]] = {}
    for host in hosts:
        for mount in host.storage_mounts:
            for directory in mount.team_directories:
                found.setdefault(mount.team_parent(directory), (mount, directory))
    return found


def team_quotas(cluster) -> list[TeamQuota]:
    """Every team quota of a valid inventory, resolved to its mount."""
    parents = _parents(cluster.hosts.values())
    return [TeamQuota(team.name, parent, parents[parent][1], parents[parent][0], limit)
            for team in cluster.teams for parent, limit in team.quotas.items() if parent in parents]


def served_here(cluster, host, volume: str) -> list[TeamQuota]:
    """The quotas ``host`` sets on its GlusterFS ``volume``."""
    return [q for q in team_quotas(cluster) if q.mount.type == "glusterfs" and q.volume == volume
            and q.server in (host.name, host.address)]


def nfs_export(hosts: dict, mount):
    """(host, export) of the inventory that serves an NFS ``mount`` (SERVER:/PATH with PATH an export of the
    host or below one), or None."""
    server, _, path = mount.source.partition(":")
    for host in hosts.values():
        if server not in (host.name, host.address):
            continue
        for export in host.setting("storage_nfs_exports") or []:
            if path == export.path or path.startswith(export.path.rstrip("/") + "/"):
                return host, export
    return None


def nfs_quotas_here(cluster, host) -> list[tuple[TeamQuota, str]]:
    """The NFS quotas ``host`` sets, each with the team directory's path on the server's own filesystem."""
    out = []
    for quota in team_quotas(cluster):
        if quota.mount.type != "nfs":
            continue
        found = nfs_export(cluster.hosts, quota.mount)
        if found is None or found[0].name != host.name:
            continue
        source_path = quota.mount.source.partition(":")[2].strip("/")
        below = quota.parent[len(quota.mount.path):].strip("/")
        out.append((quota, "/" + "/".join(p for p in (source_path, below, quota.team) if p)))
    return out


def on_mount(cluster, mount) -> list[TeamQuota]:
    """The team quotas of a Lustre or BeeGFS ``mount`` (those a client sets)."""
    return [q for q in team_quotas(cluster) if q.mount.type in ("lustre", "beegfs") and q.mount.path == mount.path
            and q.mount.source == mount.source]


def client_units(limit: str) -> str:
    """``500GB`` as lfs and beegfs-ctl write it: ``500G`` (both binary)."""
    return limit[:-1]


def check(raw, hosts: dict, values: dict[str, Any], add: Any) -> None:
    """Each quota names a team-directory parent of a filesystem kiln sets quotas on, served by an inventory host."""
    file, line = raw.origin("kiln_teams")
    parents = _parents(hosts.values())
    for i, team in enumerate(values.get("kiln_teams", [])):
        for parent in team.quotas:
            key = f"kiln_teams[{i}].quotas.{parent}"
            if parent not in parents:
                add(file, key, f"{parent} holds no team directories: name a mount's path joined with one of its "
                    f"team_directories ({', '.join(sorted(parents)) or 'the inventory has none'})", line)
                continue
            mount, _ = parents[parent]
            if mount.type not in SUPPORTED:
                add(file, key, f"{parent} is on {mount.type}, where kiln sets no quotas yet (GlusterFS only): set "
                    "the team's limit on the filesystem's server, and leave it out here", line)
                continue
            if not team.has_group or (mount.type != "glusterfs" and team.gid is None):
                add(file, key, f"team {team.name!r} has no gid: a {mount.type} quota counts by the team's gid "
                    "(give it one)", line)
            if mount.type == "nfs":
                if nfs_export(hosts, mount) is None:
                    add(file, key, f"{mount.source}: no host of the inventory exports it (kiln_storage_nfs_exports): "
                        "kiln sets an NFS quota from the server", line)
                continue
            if mount.type != "glusterfs":
                continue
            quota = TeamQuota(team.name, parent, "", mount, "")
            if server_of(hosts, quota.server, quota.volume) is None:
                add(file, key, f"{mount.source}: no host of the inventory serves GlusterFS volume {quota.volume!r} "
                    f"as {quota.server} (kiln_storage_gluster_volumes): kiln sets the quota from the volume's "
                    "server", line)
