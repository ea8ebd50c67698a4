"""GlusterFS over TLS (``kiln_storage_gluster_tls``, kiln/inventory/gluster.py): the files every host that
serves a volume or mounts one an inventory host serves needs, and the volume options of a server.

+ this host's certificate of the cluster CA, its key (0600 root: glusterd, the bricks and the FUSE client run
  as root) and the CA, where the distribution's glusterfs reads them (roles/secret_files.py): glusterfs.pem,
  glusterfs.key and glusterfs.ca in /usr/lib/ssl (Debian, Ubuntu) or /etc/ssl (Rocky). A certificate's common name is its host's inventory name, what ``auth.ssl-allow``
  lists.
+ /var/lib/glusterd/secure-access: its presence turns TLS on for glusterd's own connections and for every
  client's fetch of its volume file (the management path, TCP 24007); its one option keeps the certificate
  depth at 1 (a host's certificate signed by the CA itself).
+ on a server, each volume's ``client.ssl`` and ``server.ssl`` on (the I/O path to the bricks) and
  ``auth.ssl-allow`` the names of the hosts that mount it (roles/storage_server.py sets them before the volume
  starts, or stops and starts a volume that ran without them).

glusterd, the bricks and each mount read the files when they start: a renewed certificate (``kiln deploy``
renews it ``kiln_tls_renew_days`` ahead) is theirs at their next start (the reboot of a ``kiln patch`` batch);
the old one stays valid until then.
"""

from __future__ import annotations

from kiln.secrets import gluster_tls_hosts
from roles.context import NodeContext
from roles.operations import managed_directory
from roles.secret_files import GLUSTER_TLS_KEYS

SECURE_ACCESS = "/var/lib/glusterd/secure-access"
SECURE_ACCESS_CONTENT = "option transport.socket.ssl-cert-depth 1\n"


def tls_paths(family: str) -> tuple[str, str, str]:
    """(certificate, key, CA) where glusterfs on a ``family`` host reads them: in the directory of its key
    (roles/secret_files.py, GLUSTER_TLS_KEYS)."""
    key = GLUSTER_TLS_KEYS[family]
    directory = key.rsplit("/", 1)[0]
    return f"{directory}/glusterfs.pem", key, f"{directory}/glusterfs.ca"


def speaks_tls(ctx: NodeContext) -> bool:
    return ctx.node.name in gluster_tls_hosts(ctx.cluster)


def tls_files(ctx: NodeContext, role: str) -> list:
    """The certificate, key, CA and secure-access on this host (``role`` names the operations); the operations,
    so that what reads them is restarted when one changed."""
    if ctx.secrets.tls is None:
        raise ValueError("kiln_storage_gluster_tls is on but the cluster's CA was not loaded (kiln/secrets.py)")
    mine = ctx.secrets.tls.host(ctx.node.name)
    cert, key, ca = tls_paths(ctx.platform.family)
    ctx.watch_path("/var/lib/glusterd")
    managed_directory(name=f"{role}: /var/lib/glusterd (GlusterFS TLS)", ctx=ctx, path="/var/lib/glusterd",
                      user="root", group="root", mode="755", only_create=True)
    return [ctx.put(cert, mine.cert, mode="644", name=f"{role}: GlusterFS TLS: this host's certificate"),
            ctx.put(key, mine.key, mode="600", secret=True, name=f"{role}: GlusterFS TLS: this host's key"),
            ctx.put(ca, ctx.secrets.tls.ca, mode="644", name=f"{role}: GlusterFS TLS: the cluster CA"),
            ctx.put(SECURE_ACCESS, SECURE_ACCESS_CONTENT, mode="644",
                    name=f"{role}: GlusterFS TLS on the management path (secure-access)")]


def volume_option_values(clients: list[str]) -> dict[str, str]:
    """The TLS options of a volume mounted by ``clients`` (host names, the server's first)."""
    return {"client.ssl": "on", "server.ssl": "on", "auth.ssl-allow": ",".join(clients)}
