"""The storage_server role: NFS exports and GlusterFS volumes for labs and testbeds, so the storage role's
clients have something real to mount. Not meant for production storage (one server, one brick, no
replication, no tuning).

Defaults, in one place (hosts in the ``storage_servers`` group):

+ ``kiln_storage_nfs_exports``: the kernel NFS server (``nfs-kernel-server`` / ``nfs-utils``), each export's
  directory (made if missing, mode from the inventory, root-owned), /etc/exports.d/kiln.exports rendered
  from the inventory (one line per export: ``PATH CLIENT(OPTIONS) ...``) and re-read (``exportfs -ra``) when
  it changed; ``nfs-server`` enabled and running, and after a start waited for until it answers on TCP 2049
  (``kiln_service_start_timeout``), so clients' first mounts find it. Default options ``rw,sync,no_subtree_check`` (root is
  squashed, as exports(5) does by default). ``kiln_storage_nfs_lease_seconds`` (default 90, the kernel's)
  sets nfsd's lease and grace time in /etc/nfs.conf.d/kiln.conf: how long clients wait after the server
  restarts before they may open files again; a change restarts the server.
+ ``kiln_storage_gluster_volumes``: ``glusterfs-server``, ``glusterd`` enabled and running, each volume one
  brick on this server (``gluster volume create NAME HOST:BRICK force``: a lab's brick may sit on the root
  filesystem), started; the brick's parent directory root's only (0700: users of the server never write into
  a brick, past the volume's quotas and behind GlusterFS's back; validation keeps that parent out of ``/``'s
  first level and away from the host's NFS exports); Debian and Ubuntu only (Rocky's repositories have no glusterfs-server). Created and started only when glusterd's own state (/var/lib/glusterd/vols/NAME/info)
  says it is not, so a no-op deploy asks nothing of gluster; those commands first wait until glusterd
  answers (``gluster pool list``: the unit is active before glusterd listens).
+ GlusterFS over TLS (``kiln_storage_gluster_tls``, on by default; roles/gluster_tls.py): the host's certificate,
  key, the CA and /var/lib/glusterd/secure-access before glusterd starts (glusterd restarted when one changed),
  and each volume's ``client.ssl``, ``server.ssl`` on and ``auth.ssl-allow`` the names of the inventory hosts
  that mount it, set before the volume starts; a volume that ran without TLS is stopped and started again.
+ team quotas (a team's ``quotas`` on a mount of a volume this host serves, kiln/inventory/quotas.py): the
  volume's quota on, each team's directory made through a short mount of the volume here (root, the team's
  group, 2770: a quota needs its directory, and the clients' deploys make theirs later), the volume's
  ``quota_soft_timeout`` and ``quota_hard_timeout`` and each limit set (``gluster volume quota VOL
  limit-usage /projects/TEAM 500GB``), then ``QUOTAS_DIR``/VOL records what was
  set; a deploy sets them again only when that record differs. A quota taken out of the inventory stays
  (``gluster volume quota VOL remove PATH``).
+ ``kiln_storage_backports_kernel`` (Debian 12 only): Debian's bookworm-backports kernel (linux-image-amd64 from
  bookworm-backports, 6.12; apt takes nothing else from there), which runs from the next boot: Debian 12's own
  kernel (6.1.0-57 seen) fails every sec=krb5p request as an NFS server, with either gssproxy or rpc.svcgssd
  (clients, 6.1 included, see an I/O error at mount; krb5 and krb5i work; a 6.12 server serves the same clients),
  so validation asks for it where a Debian 12 server exports krb5p. On 6.12 the VM tier's GlusterFS 10.3 quotad
  (TLS on the management path) got no volume file until glusterd's third restart (214 s; 0.2 s on 6.1): a krb5p
  server is best one without GlusterFS volumes.
+ In a container (the nspawn testbed) nothing kernel-side is started: there is no NFS server in a
  container's kernel share. The files are still written; the VM tier serves NFS for real.
"""

from __future__ import annotations

import re

from pyinfra.operations import server

from kiln.inventory.gluster import volume_clients
from kiln.inventory.quotas import nfs_quotas_here, served_here
from kiln.inventory.storage_schema import brick_parent
from kiln.shell import quote
from roles.context import NodeContext, when_changed
from roles.gluster_tls import speaks_tls, tls_files, volume_option_values
from roles.operations import (answers, logs_of, managed_directory, pinned_packages, recorded_commands, service_running,
                              tcp_answers)

# Rocky's repositories carry no glusterfs-server (validation refuses volumes on a rocky9 server)
SERVER_PACKAGES = {"debian": {"nfs": "nfs-kernel-server", "glusterfs": "glusterfs-server"},
                   "redhat": {"nfs": "nfs-utils"}}
EXPORTS = "/etc/exports.d/kiln.exports"
NFS_CONF = "/etc/nfs.conf.d/kiln.conf"
GLUSTER_VOLS = "/var/lib/glusterd/vols"


def exports_file(exports) -> str:
    """/etc/exports.d/kiln.exports for ``exports`` (the inventory's NfsExport list)."""
    lines = ["# Written by kiln (storage_server role) from kiln_storage_nfs_exports. Do not edit."]
    for e in exports:
        lines.append(f"{e.path} " + " ".join(f"{client}({e.options})" for client in e.clients))
    return "\n".join(lines) + "\n"


def install(ctx: NodeContext) -> None:
    wanted = SERVER_PACKAGES[ctx.platform.family]
    packages = {}
    if ctx.node.setting("storage_nfs_exports"):
        packages[wanted["nfs"]] = None
    if ctx.node.setting("storage_gluster_volumes"):
        packages[wanted["glusterfs"]] = None
    if nfs_quotas_here(ctx.cluster, ctx.node):  # project quotas: XFS's and ext4's tools
        packages.update({"xfsprogs": None, "quota": None})
    if packages:
        pinned_packages(name="storage_server: " + ", ".join(packages), ctx=ctx, packages=packages)
    if ctx.node.setting("storage_backports_kernel") and ctx.node.os == "debian12":
        _backports_kernel(ctx)


BACKPORTS_SOURCES = "/etc/apt/sources.list.d/kiln-bookworm-backports.sources"
# Debian's own backports archive, signed by Debian's archive keys (debian-archive-keyring, on every Debian host)
BACKPORTS = ("# Written by kiln (storage_server role): Debian's backports, for its kernel only "
             "(kiln_storage_backports_kernel).\nTypes: deb\nURIs: http://deb.debian.org/debian\n"
             "Suites: bookworm-backports\nComponents: main\n"
             "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")


def _backports_kernel(ctx: NodeContext) -> None:
    """Debian's bookworm-backports kernel on a Debian 12 server (kiln_storage_backports_kernel): its own 6.1 fails
    every sec=krb5p request as an NFS server. Only the kernel comes from backports (its dependencies from Debian 12:
    checked in a Debian 12 tree, where ``-t bookworm-backports`` had taken systemd 254 along and broken the
    next install of systemd-journal-remote)."""
    ctx.put(BACKPORTS_SOURCES, BACKPORTS, mode="644", name="storage_server: Debian's bookworm-backports (its kernel)")
    ctx.watch_packages(["linux-image-amd64"])
    server.shell(name="storage_server: Debian's bookworm-backports kernel (runs from the next boot)",
                 # PACKAGE/RELEASE takes that package alone from backports (-t would take systemd and the rest too)
                 commands=["apt-get update -q", "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "
                           "linux-image-amd64/bookworm-backports"],
                 _if=lambda: "bpo" not in (ctx.snapshot.packages.get("linux-image-amd64") or ""))


def configure(ctx: NodeContext) -> None:
    _nfs(ctx, ctx.node.setting("storage_nfs_exports"))
    _gluster(ctx, ctx.node.setting("storage_gluster_volumes"))


def _nfs(ctx: NodeContext, exports) -> None:
    if not exports:
        return
    for e in exports:
        ctx.watch_path(e.path)
        managed_directory(name=f"storage_server: export {e.path}", ctx=ctx, path=e.path, user="root", group="root",
                          mode=e.mode)
    ctx.watch_path("/etc/exports.d")
    managed_directory(name="storage_server: /etc/exports.d", ctx=ctx, path="/etc/exports.d", user="root",
                      group="root", mode="755")
    written = ctx.put(EXPORTS, exports_file(exports), mode="644", name="storage_server: NFS exports")
    ctx.watch_path("/etc/nfs.conf.d")
    managed_directory(name="storage_server: /etc/nfs.conf.d", ctx=ctx, path="/etc/nfs.conf.d", user="root",
                      group="root", mode="755")
    lease = ctx.node.setting("storage_nfs_lease_seconds")
    conf = ctx.put(NFS_CONF, f"# Written by kiln (storage_server role)\n[nfsd]\nlease-time={lease}\ngrace-time={lease}\n",
                   mode="644", name="storage_server: nfsd lease and grace time")
    if ctx.in_container:
        return  # no kernel NFS server in a container: the files only
    unit = ctx.watch_unit("nfs-server")
    # nfsd takes a new lease time only while stopped: a changed one restarts a running server
    server.shell(name="storage_server: restart nfs-server (if its lease time changed)",
                 commands=[f"systemctl restart {unit}"],
                 _if=lambda: ctx.snapshot.unit(unit).active == "active" and when_changed(conf)())
    started = service_running(name="storage_server: nfs-server enabled and running", ctx=ctx, unit=unit)
    # clients mount as soon as their own deploy gets there: the server answers on its port first
    server.shell(name="storage_server: nfs-server answers after its start",
                 commands=[answers("nfs-server (TCP 2049)", tcp_answers("127.0.0.1", 2049),
                                   ctx.cluster.setting("service_start_timeout"), "the exports were not re-read", logs_of(unit))],
                 _if=when_changed(started))
    server.shell(name="storage_server: re-read the exports (if they changed)", commands=["exportfs -ra"],
                 _if=when_changed(written))
    _nfs_quotas(ctx)


NFS_QUOTAS = "/etc/kiln/nfs-quotas"


def nfs_quota_command(path: str, gid: int, limit: str) -> str:
    """One shell line: the team directory at ``path`` (on this server's filesystem) made, given project id
    ``gid`` and held to ``limit`` (500GB: binary units), on XFS with prjquota or ext4 with the project
    feature and prjquota; anything else stops with what to change."""
    kib = int(limit[:-2]) * 1024 ** ("KB", "MB", "GB", "TB", "PB").index(limit[-2:])
    d = quote(path)
    return (f'install -d -o root -g {gid} -m 2770 {d} && fs=$(findmnt -n -o FSTYPE -T {d}) && '
            f'mnt=$(findmnt -n -o TARGET -T {d}) && opts=$(findmnt -n -o OPTIONS -T {d}) && '
            'case "$fs" in '
            f'xfs) echo "$opts" | grep -qE "(^|,)(prjquota|pquota|pqnoenforce)(,|$)" || '
            f'{{ echo "$mnt (xfs) is mounted without prjquota: add it to its fstab options and remount, for {d}" >&2; exit 1; }}; '
            f'xfs_quota -x -c "project -s -p {path} {gid}" "$mnt" >/dev/null && '
            f'xfs_quota -x -c "limit -p bhard={kib}k {gid}" "$mnt" ;; '
            f'ext4) echo "$opts" | grep -qE "(^|,)prjquota(,|$)" || '
            f'{{ echo "$mnt (ext4) is mounted without prjquota (tune2fs -O project,quota, then mount with prjquota), '
            f'for {d}" >&2; exit 1; }}; chattr -R -p {gid} +P {d} && setquota -P {gid} 0 {kib} 0 0 "$mnt" ;; '
            f'*) echo "$mnt is $fs: kiln sets NFS team quotas on xfs or ext4 project quotas only, for {d}" >&2; exit 1 ;; '
            'esac')


def _nfs_quotas(ctx: NodeContext) -> None:
    """Each team quota on an export of this host (kiln/inventory/quotas.py), recorded like the GlusterFS ones."""
    found = nfs_quotas_here(ctx.cluster, ctx.node)
    if not found:
        return
    gids = {t.name: t.gid for t in ctx.cluster.teams}
    content = ("# Written by kiln once the NFS team quotas of this server were set. Do not edit.\n"
               + "".join(f"{path} {gids[q.team]} {q.limit}\n" for q, path in found))
    recorded_commands(name="storage_server: NFS team quotas (project quotas)", ctx=ctx, record=f"{NFS_QUOTAS}/quotas",
                      content=content, commands=[nfs_quota_command(path, gids[q.team], q.limit) for q, path in found])


def _gluster(ctx: NodeContext, volumes) -> None:
    if not volumes:
        return
    unit = ctx.watch_unit("glusterd")
    tls = speaks_tls(ctx)
    restarted = []  # what (re)starts glusterd's daemons in this run (quotad among them)
    if tls:
        files = tls_files(ctx, "storage_server")
        # glusterd reads secure-access and its certificate when it starts
        restarted.append(server.shell(name="storage_server: restart glusterd (if its TLS files changed)",
                                      commands=[f"systemctl restart {unit}"],
                                      _if=lambda: ctx.snapshot.unit(unit).active == "active" and when_changed(*files)()))
    restarted.append(service_running(name="storage_server: glusterd enabled and running", ctx=ctx, unit=unit))
    # the gluster command talks to glusterd, which is "active" before it listens (TCP 24007)
    glusterd = answers("glusterd", "gluster --mode=script pool list", ctx.cluster.setting("service_start_timeout"),
                       "the volume was not created or started", logs_of(unit))
    for v in volumes:
        # a brick is written through its volume only: its parent is closed to all but root, so no user of this
        # host reaches the brick's files (the team directories, 2770, would be theirs to write past the quota)
        parent = brick_parent(v.brick)
        ctx.watch_path(parent)
        managed_directory(name=f"storage_server: brick parent {parent} root's only", ctx=ctx, path=parent,
                          user="root", group="root", mode="700")
        ctx.watch_path(v.brick)
        managed_directory(name=f"storage_server: brick {v.brick}", ctx=ctx, path=v.brick, user="root", group="root",
                          mode="755")
        info = f"{GLUSTER_VOLS}/{v.name}/info"
        ctx.watch_path(info)
        started = ctx.watch_line(info, "^status=1$")
        name, brick = quote(v.name), quote(f"{ctx.node.name}:{v.brick}")
        server.shell(name=f"storage_server: GlusterFS volume {v.name} created", commands=[
            glusterd, f"gluster --mode=script volume create {name} {brick} force"],
            _if=lambda i=info: ctx.snapshot.files.get(i) is None)
        if tls:
            restarted.append(_volume_tls(ctx, v, info, started, glusterd))
        restarted.append(server.shell(name=f"storage_server: GlusterFS volume {v.name} started", commands=[
            glusterd, f"gluster --mode=script volume start {name}"],
            _if=lambda i=started: i not in ctx.snapshot.lines))
        restarted.append(_gluster_quotas(ctx, v, answers("glusterd", "gluster --mode=script pool list",
                                                         ctx.cluster.setting("service_start_timeout"),
                                                         "the team quotas were not set", logs_of(unit))))
    if any(served_here(ctx.cluster, ctx.node, v.name) for v in volumes):
        _quotad_serving(ctx, unit, [op for op in restarted if op is not None])


QUOTAD_SOCKET = "/var/run/gluster/quotad.socket"  # where each brick asks quotad for a directory's use
# /proc/net/unix's line of a socket listening there (flags __SO_ACCEPTCON, state unconnected): a socket file a
# killed quotad left proves nothing. Read by the snapshot and by the wait alike.
QUOTAD_LISTENING = "^[0-9a-f]+: [0-9A-F]+ [0-9A-F]+ 00010000 0001 01 [0-9]+ " + re.escape(QUOTAD_SOCKET) + "$"


def quotad_serving_command(unit: str, tries: int = 3, seconds: int = 45) -> str:
    """Wait for quotad listening on its socket; restart glusterd (which starts quotad again) when it does not come, up to ``tries``
    times, then fail with glusterd's and quotad's last lines."""
    listening = f"grep -qE {quote(QUOTAD_LISTENING)} /proc/net/unix"
    wait = f"n=0; until {listening} || [ $n -ge {seconds} ]; do n=$((n+1)); sleep 1; done; {listening}"
    return (f"t=0; until {wait}; do t=$((t+1)); if [ $t -ge {tries} ]; then "
            f"echo 'quotad did not serve ({QUOTAD_SOCKET} missing) after {tries} starts of glusterd: team quotas are "
            f"not enforced; last lines of quotad.log:' >&2; tail -n 15 /var/log/glusterfs/quotad.log >&2; exit 1; fi; "
            f"echo 'quotad is not serving after {seconds} s (it got no volume file from glusterd): restarting "
            f"{unit}' >&2; systemctl restart {quote(unit)}; done")


def _quotad_serving(ctx: NodeContext, unit: str, restarted: list) -> None:
    """quotad serves where a volume has team quotas: without it a brick's quota check fails every write under a
    limit with ENOTCONN ("Transport endpoint is not connected"). On the VM tier's glusterfs 10.3 with TLS on the
    management path, quotad once got no reply to its volume-file request (glusterd logged "writev ... failed
    (Resource temporarily unavailable)") and waited for ever; a restart of glusterd served it. Asked when quotad is
    not serving at the start of the run, or was (re)started in it."""
    listening = ctx.watch_line("/proc/net/unix", QUOTAD_LISTENING)
    server.shell(name="storage_server: quotad serving (team quotas enforced)", commands=[quotad_serving_command(unit)],
                 _if=lambda: listening not in ctx.snapshot.lines or when_changed(*restarted)())


def _volume_tls(ctx: NodeContext, volume, info: str, started: int, glusterd: str):
    """The volume's TLS options (roles/gluster_tls.py), set when /var/lib/glusterd/vols/NAME/info lacks one; a
    volume that was started without TLS is stopped and started, its bricks then listen with TLS."""
    values = volume_option_values(volume_clients(ctx.cluster.hosts, ctx.node, volume.name))
    lines = {key: ctx.watch_line(info, "^" + re.escape(f"{key}={value}") + "$") for key, value in values.items()}
    name = quote(volume.name)
    options = server.shell(
        name=f"storage_server: GlusterFS volume {volume.name} speaks TLS to its clients' certificates only",
        commands=[glusterd, *(f"gluster --mode=script volume set {name} {key} {quote(value)}"
                              for key, value in values.items())],
        _if=lambda: any(i not in ctx.snapshot.lines for i in lines.values()))
    # a brick listens with TLS only from its start: a volume that ran in clear text starts again (its clients
    # reconnect; the storage role remounts them with their own certificates)
    ssl = (lines["client.ssl"], lines["server.ssl"])
    return server.shell(name=f"storage_server: restart GlusterFS volume {volume.name} (if it ran without TLS)",
                 commands=[glusterd, f"gluster --mode=script volume stop {name}", f"gluster --mode=script volume start {name}"],
                 _if=lambda: (started in ctx.snapshot.lines and any(i not in ctx.snapshot.lines for i in ssl)
                              and when_changed(options)()))


QUOTAS_DIR = "/etc/kiln/gluster-quotas"


def quota_record(volume, quotas) -> str:
    """What kiln writes once a volume's team quotas are set (QUOTAS_DIR/VOLUME): the next deploy sets them
    again only when this differs, so an unchanged deploy asks nothing of gluster."""
    return (f"# Written by kiln once the team quotas of GlusterFS volume {volume.name} were set. Do not edit.\n"
            f"soft-timeout {volume.quota_soft_timeout} hard-timeout {volume.quota_hard_timeout}\n"
            + "".join(f"{q.path_in_volume} {q.limit} {q.team}\n" for q in quotas))


def quota_commands(volume, quotas) -> list[str]:
    """Quotas on, each team's directory made through a mount of the volume on its own server (a quota needs
    its directory; the clients' deploys come later), the timeouts and each limit set; recorded_commands
    writes the record after them."""
    vol = quote(volume.name)
    made = []
    for parent in sorted({q.path_in_volume.rsplit("/", 1)[0] for q in quotas} - {""}):
        made.append(f'install -d -o root -g root -m 755 "$m"{quote(parent)}')
    for q in quotas:
        made.append(f'install -d -o root -g {quote(q.team)} -m 2770 "$m"{quote(q.path_in_volume)}')
    return [
        f"gluster --mode=script volume get {vol} features.quota | grep -qE '^features[.]quota[[:space:]]+on' || "
        f"gluster --mode=script volume quota {vol} enable",
        "m=$(mktemp -d /run/kiln-quota.XXXXXX) || exit 1; mount -t glusterfs localhost:/" + vol + ' "$m" || '
        '{ rmdir "$m"; exit 1; }; ' + " && ".join(made) + '; rc=$?; umount "$m"; rmdir "$m"; exit $rc',
        f"gluster --mode=script volume quota {vol} soft-timeout {int(volume.quota_soft_timeout)}",
        f"gluster --mode=script volume quota {vol} hard-timeout {int(volume.quota_hard_timeout)}",
        *[f"gluster --mode=script volume quota {vol} limit-usage {quote(q.path_in_volume)} {quote(q.limit)}" for q in quotas],
    ]


def _gluster_quotas(ctx: NodeContext, volume, glusterd: str):
    quotas = served_here(ctx.cluster, ctx.node, volume.name)
    if not quotas:
        return None  # a quota taken out of the inventory stays: gluster volume quota VOLUME remove PATH
    return recorded_commands(name=f"storage_server: team quotas on GlusterFS volume {volume.name}", ctx=ctx,
                      record=f"{QUOTAS_DIR}/{volume.name}", content=quota_record(volume, quotas),
                      commands=[glusterd, *quota_commands(volume, quotas)])
