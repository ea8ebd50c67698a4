"""GlusterFS volumes kiln serves, and who mounts them: the server of a mount, a volume's clients, and the
hosts that speak TLS to them.

With ``kiln_storage_gluster_tls`` (on by default) every GlusterFS volume an inventory host serves speaks TLS on
its I/O path (the volume's ``client.ssl``/``server.ssl``) and every glusterd and client process on its
management path (``/var/lib/glusterd/secure-access``), with each host's certificate of the cluster CA
(kiln/tls.py), and a volume admits only the certificates of the inventory hosts that mount it (and its own
server, which mounts it to make the team directories): ``auth.ssl-allow``, a certificate's common name being its
host's inventory name. roles/gluster_tls.py places the files.

A client's management TLS is all or nothing (glusterfs reads secure-access for every mount it makes), so a host
mounting a volume kiln serves and a GlusterFS volume from outside the inventory is refused by validation
(``check``): the outside server would have to speak TLS with kiln's CA.
"""

from __future__ import annotations

from typing import Any


def _serves(host, volume: str) -> bool:
    return any(v.name == volume for v in host.setting("storage_gluster_volumes") or [])


def server_of(hosts: dict, name: str, volume: str):
    """The inventory host serving ``volume`` under ``name`` (its inventory name or address), or None."""
    for host in hosts.values():
        if name in (host.name, host.address) and _serves(host, volume):
            return host
    return None


def split_source(source: str) -> tuple[str, str]:
    """(server, volume) of a GlusterFS mount's source SERVER:/VOLUME."""
    server, _, volume = source.partition(":")
    return server, volume.strip("/")


def mount_server(hosts: dict, mount):
    """The inventory host serving a GlusterFS ``mount``, or None (a volume from outside the inventory)."""
    return server_of(hosts, *split_source(mount.source))


def volume_clients(hosts: dict, server, volume: str) -> list[str]:
    """The names of the hosts mounting ``server``'s ``volume``, the server itself first (it mounts the volume
    to make the teams' directories), as the volume's ``auth.ssl-allow`` lists them."""
    names = [server.name]
    for host in hosts.values():
        for mount in host.storage_mounts:
            served_by = mount_server(hosts, mount) if mount.type == "glusterfs" else None
            if served_by is not None and served_by.name == server.name and host.name not in names \
                    and split_source(mount.source)[1] == volume:
                names.append(host.name)
    return names


def tls_hosts(hosts: dict, tls: bool) -> list[str]:
    """The hosts that get the GlusterFS TLS files (``tls``: the setting): every server of a volume and every
    host mounting one an inventory host serves."""
    if not tls:
        return []
    return [h.name for h in hosts.values()
            if h.setting("storage_gluster_volumes")
            or any(m.type == "glusterfs" and mount_server(hosts, m) is not None for m in h.storage_mounts)]


def check(raw, hosts: dict, values: dict[str, Any], add: Any) -> None:
    """With TLS on, no host mounts both a volume kiln serves (TLS) and one from outside the inventory."""
    if not values.get("kiln_storage_gluster_tls", True):
        return
    for host in hosts.values():
        mounts = [m for m in host.storage_mounts if m.type == "glusterfs"]
        inside = [m for m in mounts if mount_server(hosts, m) is not None]
        for m in mounts:
            if inside and m not in inside:
                file, line = raw.origin("kiln_storage_mounts", host=host.name)
                add(file, "kiln_storage_mounts", f"{host.name}: {m.path} mounts {m.source}, which no host of the "
                    f"inventory serves, beside {inside[0].path} ({inside[0].source}), which kiln serves over TLS "
                    "(kiln_storage_gluster_tls): a GlusterFS client speaks TLS to every server or to none; serve "
                    f"{m.source} from the inventory, or turn kiln_storage_gluster_tls off", line)
