"""kiln's Kerberos realm across the inventory (roles/kerberos.py): NFS with Kerberos security (``sec=krb5``,
``krb5i`` or ``krb5p`` in an export's or a mount's options) makes kiln run a KDC on the first controller (the
management zone) for a realm of the cluster's (``kiln_kerberos_realm``, by default the cluster's name in
capitals), with one principal per NFS server (``nfs/HOST``), per NFS client (``host/HOST``: root's mounts) and
per cluster user (``USER``: what the user's processes, jobs included, reach the share with, from a keytab kiln
places on each client for gssproxy), and the checks of the inventory as a whole.

A principal names a host by its inventory name, which is how its clients mount it (``HOST:/path``): Kerberos
asks for ``nfs/HOST``, so a mount by address, or of a server outside the inventory, is refused here (kiln's
KDC holds no key for it).
"""

from __future__ import annotations

from typing import Any

from kiln.inventory import model
from kiln.inventory.storage_schema import nfs_security, uses_kerberos

KDC_PORT = 88  # TCP only: every krb5.conf kiln writes says udp_preference_limit = 1


def kerberos_exports(host) -> list:
    return [e for e in host.setting("storage_nfs_exports") or [] if uses_kerberos(e.options)]


def kerberos_mounts(host) -> list:
    return [m for m in host.storage_mounts if m.type == "nfs" and uses_kerberos(m.options)]


def nfs_servers(hosts: dict) -> list:
    return [h for h in hosts.values() if kerberos_exports(h)]


def nfs_clients(hosts: dict) -> list:
    return [h for h in hosts.values() if kerberos_mounts(h)]


def in_use(hosts: dict) -> bool:
    return bool(nfs_servers(hosts) or nfs_clients(hosts))


def kdc(hosts: dict):
    """The host that runs the KDC: the first controller, where any NFS export or mount uses Kerberos."""
    if not in_use(hosts):
        return None
    return next((h for h in hosts.values() if h.in_group(model.CONTROLLER)), None)


def realm(cluster_name: str, setting: str) -> str:
    return setting or cluster_name.upper()


def host_principals(host, realm_name: str) -> list[str]:
    """The principals whose keys ``host`` keeps in /etc/krb5.keytab."""
    out = []
    if kerberos_exports(host):
        out.append(f"nfs/{host.name}@{realm_name}")
    if kerberos_mounts(host):
        out.append(f"host/{host.name}@{realm_name}")
    return out


def user_names(teams) -> list[str]:
    """Every user of every team, once (each gets a principal where any NFS mount uses Kerberos)."""
    return list(dict.fromkeys(u.name for t in teams for u in t.users))


def principals(hosts: dict, teams, realm_name: str) -> list[str]:
    """Every principal of the realm kiln keeps: the hosts' and, where any host mounts with Kerberos, the users'."""
    out = [p for h in hosts.values() for p in host_principals(h, realm_name)]
    if nfs_clients(hosts):
        out += [f"{u}@{realm_name}" for u in user_names(teams)]
    return out


def server_name(source: str) -> str:
    return source.rpartition(":")[0].strip("[]")


def check(raw, hosts: dict, values: dict[str, Any], add: Any) -> None:
    """A Kerberos mount names an inventory host that exports that path with Kerberos, by its inventory name;
    the realm has a KDC (a controller)."""
    if in_use(hosts) and kdc(hosts) is None:
        file, line = raw.origin("kiln_storage_nfs_exports")
        add(file, "kiln_storage_nfs_exports", "NFS with sec=krb5* needs kiln's KDC, which runs on the first host of "
            "slurm_controller: the inventory has none", line)
    for host in nfs_servers(hosts):
        privacy = [e.path for e in kerberos_exports(host) if "krb5p" in nfs_security(e.options)]
        if privacy and host.os == "debian12" and not host.setting("storage_backports_kernel"):
            file, line = raw.origin("kiln_storage_nfs_exports", host=host.name)
            add(file, "kiln_storage_nfs_exports", f"{host.name} exports {privacy[0]} with sec=krb5p on Debian 12, whose "
                "kernel (6.1) fails every krb5p request as an NFS server (clients see an I/O error at mount; krb5i "
                f"works): set kiln_storage_backports_kernel: true for {host.name} (Debian's bookworm-backports kernel, "
                "6.12, from its next boot), or export krb5i", line)
    for host in nfs_clients(hosts):
        file, line = raw.origin("kiln_storage_mounts", host=host.name)
        for mount in kerberos_mounts(host):
            name = server_name(mount.source)
            path = mount.source.rpartition(":")[2]
            server = hosts.get(name)
            by_address = next((h for h in hosts.values() if h.address == name), None)
            if server is None and by_address is not None:
                add(file, "kiln_storage_mounts", f"{host.name}: {mount.path} mounts {mount.source} with Kerberos by "
                    f"address: Kerberos asks for the server's principal nfs/NAME by the name mounted; write "
                    f"{by_address.name}:{path}", line)
            elif server is None:
                add(file, "kiln_storage_mounts", f"{host.name}: {mount.path} mounts {mount.source} with Kerberos, "
                    "but no host of the inventory is named "
                    f"{name!r}: kiln's KDC holds keys for the inventory's NFS servers only", line)
            elif not any(e.path == path for e in kerberos_exports(server)):
                add(file, "kiln_storage_mounts", f"{host.name}: {mount.path} mounts {mount.source} with Kerberos, "
                    f"but {server.name} exports {path} without sec=krb5, krb5i or krb5p in kiln_storage_nfs_exports",
                    line)
