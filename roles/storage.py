"""The storage role: the inventory's filesystems mounted on each node, and in /etc/fstab.

Defaults:

+ the client package for the type where the distribution has one: nfs-common / nfs-utils (nfs),
  glusterfs-client / glusterfs-fuse (glusterfs), ceph-fuse or ceph-common (cephfs), sshfs (sshfs).
  Lustre and BeeGFS clients come pinned from their vendors' repositories (roles/filesystems.py); Weka's
  from the Weka cluster's own installer; GPFS is mounted by its own tools and left alone here.
+ the mount point (0755 root), one /etc/fstab line per mount (``source path type options 0 0``; a line
  for the same mount point with other values is replaced), and the mount itself when missing. BeeGFS
  (mounted by the beegfs-client service) and GPFS (mmmount) get no fstab line.
+ a network filesystem's first mount is tried for up to 5 minutes (its server may be converging in the
  same deploy, or booting), then fails naming the source.
+ a changed line remounts a mounted filesystem (``mount -o remount``) so new options apply.
+ network filesystems (``NETWORK_TYPES``) get ``_netdev`` in their fstab line (mounted once the network is
  up, unmounted before it goes down); a GlusterFS mount's ``backup_servers`` become
  ``backup-volfile-servers=A:B`` (the client fetches the volume from them when the first server is down).
+ NFS options are checked before anything is touched (kiln.inventory.storage_schema.check_nfs_options):
  no ``soft`` mounts, a real ``vers``, sane timeouts.
+ ``team_directories`` of a mount (e.g. ``[projects, scratch]``): PATH/projects (root, 0755) and in it one
  directory per team (root, the team's group by its inventory gid, 2770: setgid, so what a member writes
  keeps the team's group; nothing for others). A network filesystem's (``NETWORK_TYPES``, BeeGFS, GPFS)
  are made from one host, the first of the inventory that mounts it (its root must not be squashed by
  the server); a bind mount's on every host that has it. Made after the mount, so they land on the
  mounted filesystem.
+ a team's ``quotas`` on a Lustre mount (a project quota, the team's gid the project id) or a BeeGFS mount (a
  group quota on its gid), set from that same host and recorded in ``QUOTAS_DIR``; set again only when the
  record differs (kiln/inventory/quotas.py; GlusterFS quotas are the volume server's, roles/storage_server.py).
+ GlusterFS over TLS (``kiln_storage_gluster_tls``, on by default) where a host mounts a volume an inventory host
  serves: its certificate of the cluster CA, key, CA and /var/lib/glusterd/secure-access (roles/gluster_tls.py),
  before the mount; a mount made before they changed is unmounted and mounted again (a busy mount fails the
  deploy on that host, naming it).
+ on compute nodes slurmd requires every network filesystem kiln mounts (``RequiresMountsFor``, written
  by the slurm role): a node whose storage did not mount at boot never takes jobs.
"""

from __future__ import annotations

import re

from pyinfra.operations import server

from kiln.inventory.gluster import mount_server
from kiln.inventory.quotas import client_units, on_mount
from kiln.inventory.storage_schema import gives_security, nfs_security
from kiln.shell import quote
from roles import filesystems
from roles.context import NodeContext, when_changed
from roles.gluster_tls import speaks_tls, tls_files
from roles.operations import line_present, managed_directory, pinned_packages, recorded_commands

CLIENTS = {"debian": {"nfs": "nfs-common", "glusterfs": "glusterfs-client", "sshfs": "sshfs"},
           "redhat": {"nfs": "nfs-utils", "glusterfs": "glusterfs-fuse", "sshfs": "fuse-sshfs"}}
FSTYPE = {"sshfs": "fuse.sshfs", "glusterfs": "glusterfs", "weka": "wekafs"}
# Filesystems served over the network, mounted through /etc/fstab
NETWORK_TYPES = ("nfs", "lustre", "cephfs", "glusterfs", "sshfs", "weka")
# Mounted by their own services or tools, never through /etc/fstab
NOT_IN_FSTAB = ("beegfs", "gpfs")


def fstab_options(mount, extra: list[str] = ()) -> str:
    """The mount's options as its fstab line has them: the inventory's, plus what the type needs."""
    options = [*extra, *(o for o in mount.options.split(",") if o != "defaults")]
    if mount.type in NETWORK_TYPES and "_netdev" not in options:
        options.append("_netdev")
    if mount.type == "glusterfs" and mount.backup_servers:
        options.append("backup-volfile-servers=" + ":".join(mount.backup_servers))
    return ",".join(options) or "defaults"


def fstab_line(ctx: NodeContext, mount) -> str:
    if mount.type == "cephfs":
        source, fstype, extra = filesystems.ceph_fstab_fields(ctx, mount)
        return f"{source} {mount.path} {fstype} {fstab_options(mount, extra)} 0 0"
    return f"{mount.source} {mount.path} {FSTYPE.get(mount.type, mount.type)} {fstab_options(mount)} 0 0"


MOUNT_TRIES, MOUNT_PAUSE = 60, 5  # a network filesystem's server may still be converging in the same run


def mount_command(mount) -> str:
    """Mount ``mount`` from its fstab line; a network filesystem is tried again every MOUNT_PAUSE s for
    MOUNT_TRIES tries (its server may be converging in this same deploy, or still booting)."""
    if mount.type not in NETWORK_TYPES:
        return f"mount {quote(mount.path)}"
    failed = f"{mount.path}: not mounted after {MOUNT_TRIES * MOUNT_PAUSE} s: is its server up and serving {mount.source}?"
    return (f"n=0; until mount {quote(mount.path)}; do n=$((n+1)); if [ $n -ge {MOUNT_TRIES} ]; then "
            f"echo {quote(failed)} >&2; exit 1; fi; sleep {MOUNT_PAUSE}; done")


def slurmd_mounts(node) -> list[str]:
    """The mount points slurmd must not start without (``RequiresMountsFor``): the network filesystems
    kiln mounts through /etc/fstab."""
    return [m.path for m in node.storage_mounts if m.type in NETWORK_TYPES]


def makes_team_directories(cluster, host, mount) -> bool:
    """Whether ``host`` makes ``mount``'s team directories: a network filesystem's only from the first host
    of the inventory that mounts it (one writer; its root reaches the server unsquashed), others from each."""
    if mount.type not in NETWORK_TYPES + NOT_IN_FSTAB:
        return True
    first = next(h for h in cluster.hosts.values()
                 if any(m.path == mount.path and m.source == mount.source for m in h.storage_mounts))
    return first.name == host.name


def team_directories(ctx: NodeContext, mount) -> None:
    if not mount.team_directories or not makes_team_directories(ctx.cluster, ctx.node, mount):
        return
    for d in mount.team_directories:
        if d != ".":
            parent = mount.team_parent(d)
            ctx.watch_path(parent)
            managed_directory(name=f"storage: {parent} (team directories)", ctx=ctx, path=parent, user="root",
                              group="root", mode="755")
    for path, team in mount.team_paths(ctx.cluster.teams):
        ctx.watch_path(path)
        managed_directory(name=f"storage: team {team}'s {path}", ctx=ctx, path=path, user="root", group=team,
                          mode="2770")
    _client_quotas(ctx, mount)


QUOTAS_DIR = "/etc/kiln/client-quotas"


def client_quota_commands(mount, quotas, gids: dict[str, int]) -> list[str]:
    """What sets a Lustre mount's project quotas or a BeeGFS mount's group quotas (kiln/inventory/quotas.py)."""
    out = []
    for q in quotas:
        gid, limit = gids[q.team], client_units(q.limit)
        if mount.type == "lustre":
            out += [f"lfs project -p {gid} -s -r {quote(q.parent + '/' + q.team)}",
                    f"lfs setquota -p {gid} -B {limit} {quote(mount.path)}"]
        else:
            out.append(f"beegfs-ctl --setquota --mount={quote(mount.path)} --gid {gid} --sizelimit={limit} "
                       "--inodelimit=unlimited")
    return out


def _client_quotas(ctx: NodeContext, mount) -> None:
    """A Lustre or BeeGFS mount's team quotas, from the host that makes its team directories; like the GlusterFS
    ones (roles/storage_server.py), set again only when the record of what was set differs."""
    quotas = on_mount(ctx.cluster, mount)
    if not quotas:
        return
    gids = {t.name: t.gid for t in ctx.cluster.teams}
    record = f"{QUOTAS_DIR}/{mount.path.strip('/').replace('/', '_') or 'root'}"
    content = (f"# Written by kiln once the team quotas of {mount.path} were set. Do not edit.\n"
               + "".join(f"{q.team} {gids[q.team]} {q.limit}\n" for q in quotas))
    recorded_commands(name=f"storage: team quotas on {mount.path} ({mount.type})", ctx=ctx, record=record,
                      content=content, commands=client_quota_commands(mount, quotas, gids))


def install(ctx: NodeContext) -> None:
    clients = CLIENTS[ctx.platform.family]
    packages = {clients[m.type]: None for m in ctx.node.storage_mounts if m.type in clients}
    if "cephfs" in filesystems.types(ctx):
        packages[filesystems.ceph_package(ctx)] = None
    if packages:
        pinned_packages(name="storage: filesystem clients", ctx=ctx, packages=packages)
    filesystems.install(ctx)


def _gluster_tls(ctx: NodeContext) -> list:
    """A GlusterFS client's TLS files (roles/gluster_tls.py), where it mounts a volume an inventory host serves;
    a server has them from the storage_server role."""
    if ctx.node.setting("storage_gluster_volumes") or not speaks_tls(ctx):
        return []
    return tls_files(ctx, "storage")


def configure(ctx: NodeContext) -> None:
    filesystems.configure(ctx)
    tls = _gluster_tls(ctx)
    for m in ctx.node.storage_mounts:
        if (m.type == "bind" and m.source == m.path) or m.type in NOT_IN_FSTAB:
            # provided by the machine itself (the testbed's shared directory), or mounted by its own service
            # or tools (roles/filesystems.py)
            team_directories(ctx, m)
            continue
        ctx.watch_path(m.path)
        path = re.escape(m.path)
        mounted = ctx.watch_line("/proc/self/mounts", rf"^\S+ {path} ")
        # a mounted path is there (and one whose server refuses this host cannot even be looked at)
        managed_directory(name=f"storage: mount point {m.path}", ctx=ctx, path=m.path, user="root", group="root",
                          mode="755", only_create=True, _if=lambda i=mounted: i not in ctx.snapshot.lines)
        line = fstab_line(ctx, m)
        index = ctx.watch_line("/etc/fstab", "^" + re.escape(line) + "$")
        entry = line_present(name=f"storage: /etc/fstab entry for {m.path}", ctx=ctx, path="/etc/fstab", line=line,
                             index=index, replace_regex=rf"^\S+\s+{path}\s")
        server.shell(name=f"storage: mount {m.path}", commands=[mount_command(m)],
                     _if=lambda i=mounted: i not in ctx.snapshot.lines)
        # an NFS mount's security flavour is no remount option (nfs(5)): a mount with another one than its sec= is
        # made again (without sec=, the client takes what the server offers: any is its own)
        same_security = ctx.watch_line("/proc/self/mounts", rf"^\S+ {path} nfs4? (\S*,)?sec={nfs_security(m.options)[0]}[, ]") \
            if m.type == "nfs" and gives_security(m.options) else None
        server.shell(name=f"storage: remount {m.path} (if its fstab line changed)",
                     commands=[f"mount -o remount {quote(m.path)}"],
                     _if=lambda i=mounted, e=entry, s=same_security: i in ctx.snapshot.lines and when_changed(e)()
                     and (s is None or s in ctx.snapshot.lines))
        if same_security is not None:
            server.shell(name=f"storage: mount {m.path} again (mounted with another security flavour)",
                         commands=[f"umount {quote(m.path)}", mount_command(m)],
                         _if=lambda i=mounted, s=same_security: i in ctx.snapshot.lines and s not in ctx.snapshot.lines)
        if m.type == "glusterfs" and tls and mount_server(ctx.cluster.hosts, m) is not None:
            # a FUSE client reads its certificate and secure-access when it starts: a mount made before they
            # changed (in clear text, or with the old certificate) is made again
            server.shell(name=f"storage: mount {m.path} again over TLS (if its TLS files changed)",
                         commands=[f"umount {quote(m.path)}", mount_command(m)],
                         _if=lambda i=mounted: i in ctx.snapshot.lines and when_changed(*tls)())
        team_directories(ctx, m)
