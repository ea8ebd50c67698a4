"""What each kiln host lets in, and from where: NIST SP 800-223's zones from the inventory's groups, and
the nftables ruleset of one host. Pure functions of the inventory (``kiln_firewall``), like slurm_config.

Zones: ``access`` (login), ``management`` (slurm_controller, slurm_dbd, monitoring), ``computing``
(compute), ``data storage`` (storage_servers); a host is in every zone of its groups. What a host lets in:

+ its loopback, replies to connections it made (conntrack established/related), ICMP and ICMPv6 (path
  MTU discovery, neighbour discovery, ping), DHCP replies;
+ SSH from ``admin_networks`` and the management zone (kiln-remediate reaches nodes by SSH); compute
  hosts also from login hosts (a user's SSH to a node of their job, pam_slurm_adopt); login hosts also
  from ``access_networks`` (users);
+ on controllers, slurmctld (6817) from every Slurm host; on compute hosts, slurmd (6818) from the
  controllers and login hosts (srun), and everything from the other compute hosts (slurmd's fan-out,
  the jobs' own MPI, NCCL and Gloo sockets, soft-RoCE); slurmdbd (6819) from the controllers and login
  hosts (sacct, sreport, sacctmgr; never from compute hosts); srun's ports (SrunPortRange) on every host
  that runs srun, from the controllers and compute hosts; MariaDB is never open (slurmdbd reaches it on
  its own host);
+ node_exporter (9100) from the monitoring hosts, dcgm-exporter (9400) on GPU hosts from them,
  Prometheus (9090) and Alertmanager (9093) from ``admin_networks`` and the management zone, and
  Alertmanager's cluster port (9094) between monitoring hosts;
+ on the log host (kiln/log_host.py), systemd-journal-remote (19532) from every kiln host; and on every host, an
  output rule: only the journal's uploader (the ``systemd-journal-upload`` account's UID) may connect to that
  port, so no user of a node can add entries to the log host;
+ on the tang servers (every controller, where any host has encrypted volumes), tang (``kiln_tang_port``, 7500)
  from the hosts with encrypted volumes only;
+ on the KDC of kiln's realm (the first controller, where any NFS export or mount uses Kerberos), Kerberos (TCP
  88) from the realm's hosts (the NFS servers and clients) only;
+ on storage servers, NFS (2049, NFSv4: NFSv3's rpcbind and mountd are not opened) and GlusterFS (24007-24008
  and its bricks' 49152-49251) from every kiln host and the other storage servers.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from kiln.inventory.firewall_schema import SRUN_PORTS
from kiln import log_host
from kiln.inventory import encryption, kerberos
from kiln.inventory.model import COMPUTE, CONTROLLER, DBD, LOGIN, MONITORING, STORAGE, Cluster, Host
from kiln.inventory.kerberos import KDC_PORT
from kiln.monitoring import (ALERTMANAGER_CLUSTER_PORT, ALERTMANAGER_PORT, DCGM_EXPORTER_PORT, NODE_EXPORTER_PORT,
                             PROMETHEUS_PORT)
from kiln.inventory.schema import service_uids
from roles import slurm_config
from roles.context import render

ZONES = {LOGIN: "access", CONTROLLER: "management", DBD: "management", MONITORING: "management",
         COMPUTE: "computing", STORAGE: "data storage"}
SSH, SLURMCTLD, SLURMD, SLURMDBD = 22, 6817, 6818, 6819
NFS, GLUSTERD, GLUSTER_BRICKS = 2049, (24007, 24008), (49152, 49251)
TABLE = "kiln"  # table inet kiln: kiln's own, beside any other table on the node


@dataclass(frozen=True)
class Allow:
    """One way in: TCP ``ports`` (a port or a first-last range; empty: every port and protocol) from
    ``sources`` (addresses or networks), with the reason."""

    why: str
    ports: str
    sources: tuple[str, ...]


def zones(host: Host) -> list[str]:
    """The SP 800-223 zones ``host`` is in, from its groups, in a fixed order."""
    found = {ZONES[g] for g in host.groups if g in ZONES}
    return [z for z in ("access", "management", "computing", "data storage") if z in found]


def _addresses(cluster: Cluster, *groups: str, but: Host | None = None) -> tuple[str, ...]:
    hosts = [h for g in groups for h in (slurm_config.dbd_hosts(cluster) if g == DBD else cluster.group(g))]
    seen: list[str] = []
    for h in hosts:
        if h.address not in seen and (but is None or h.name != but.name):
            seen.append(h.address)
    return tuple(seen)


def _slurm_hosts(cluster: Cluster) -> tuple[str, ...]:
    return _addresses(cluster, CONTROLLER, DBD, LOGIN, COMPUTE)


def allows(cluster: Cluster, host: Host) -> list[Allow]:
    """Every way into ``host``, in the order its rules list them; a way with no source is left out."""
    fw = cluster.setting("firewall")
    management = _addresses(cluster, CONTROLLER, DBD, MONITORING)
    admins = tuple(fw.admin_networks)
    ssh = str(host.connection.get("ssh_port", SSH))
    out = [Allow("SSH: operators and kiln", ssh, admins + management)]
    if host.in_group(LOGIN):
        out.append(Allow("SSH: users", ssh, tuple(fw.access_networks)))
    if host.is_compute:
        out.append(Allow("SSH: users' sessions on their jobs' nodes (pam_slurm_adopt)", ssh,
                         _addresses(cluster, LOGIN)))
        out.append(Allow("the jobs' own traffic and slurmd's fan-out between compute nodes", "",
                         _addresses(cluster, COMPUTE, but=host)))
        out.append(Allow("slurmd", f"{SLURMD}", _addresses(cluster, CONTROLLER, LOGIN)))
    if host.in_group(CONTROLLER):
        out.append(Allow("slurmctld", f"{SLURMCTLD}", _slurm_hosts(cluster)))
    if host.name in {h.name for h in slurm_config.dbd_hosts(cluster)}:
        out.append(Allow("slurmdbd: slurmctld, and sacct/sreport/sacctmgr on controllers and login hosts",
                         f"{SLURMDBD}", _addresses(cluster, CONTROLLER, DBD, LOGIN)))
    if set(host.groups) & {CONTROLLER, LOGIN, COMPUTE}:
        out.append(Allow("srun and salloc (SrunPortRange)", f"{SRUN_PORTS[0]}-{SRUN_PORTS[1]}",
                         _addresses(cluster, CONTROLLER, COMPUTE)))
    if host.monitored:
        monitoring = _addresses(cluster, MONITORING)
        out.append(Allow("node_exporter", f"{NODE_EXPORTER_PORT}", monitoring))
        if host.gpu_count:
            out.append(Allow("dcgm-exporter", f"{DCGM_EXPORTER_PORT}", monitoring))
        if host.in_group(MONITORING):
            out.append(Allow("Prometheus and Alertmanager", f"{PROMETHEUS_PORT}", admins + management))
            out.append(Allow("Alertmanager", f"{ALERTMANAGER_PORT}", admins + management))
            out.append(Allow("Alertmanager's cluster", f"{ALERTMANAGER_CLUSTER_PORT}",
                             _addresses(cluster, MONITORING, but=host)))
    clients = tuple(dict.fromkeys(h.address for h in cluster.hosts.values()))  # every kiln host, once
    logs = log_host.log_host(cluster)
    if logs is not None and logs.name == host.name:
        out.append(Allow("the journals of every kiln host (systemd-journal-upload)", f"{log_host.PORT}", clients))
    if host.name in {h.name for h in encryption.tang_servers(cluster.hosts)}:
        out.append(Allow("tang: unlocking the encrypted volumes of the hosts that have them",
                         f"{cluster.setting('tang_port')}",
                         tuple(dict.fromkeys(h.address for h in encryption.encrypting_hosts(cluster.hosts)))))
    kdc = kerberos.kdc(cluster.hosts)
    if kdc is not None and kdc.name == host.name:
        realm_hosts = [*kerberos.nfs_servers(cluster.hosts), *kerberos.nfs_clients(cluster.hosts)]
        out.append(Allow("Kerberos: the KDC of kiln's realm, for NFS with Kerberos", f"{KDC_PORT}",
                         tuple(dict.fromkeys(h.address for h in realm_hosts))))
    if host.in_group(STORAGE):
        out.append(Allow("NFS (v4)", f"{NFS}", clients))
        out.append(Allow("GlusterFS management", f"{GLUSTERD[0]}-{GLUSTERD[1]}", clients))
        out.append(Allow("GlusterFS bricks", f"{GLUSTER_BRICKS[0]}-{GLUSTER_BRICKS[1]}", clients))
    return [a for a in out if a.sources]


def _family(source: str) -> str:
    return "ip6" if ":" in source else "ip"


def rule_lines(allow: Allow) -> list[str]:
    """nft rule lines for one way in: one per address family present in its sources."""
    lines = []
    for family in ("ip", "ip6"):
        sources = [s for s in allow.sources if _family(s) == family]
        if not sources:
            continue
        match = f"{family} saddr {{ {', '.join(sources)} }}"
        port = f" tcp dport {allow.ports}" if allow.ports else ""
        lines.append(f"{match}{port} accept comment \"{allow.why}\"")
    return lines


def output_rules(cluster: Cluster, host: Host) -> list[str]:
    """What ``host`` may not send: to the log host's port, anything but the journal's uploader."""
    logs = log_host.log_host(cluster)
    if logs is None:
        return []
    uid = service_uids(cluster.setting("service_uids"))[log_host.UPLOADER]
    return [f"{_family(logs.address)} daddr {logs.address} tcp dport {log_host.PORT} meta skuid != {uid} "
            f"reject with tcp reset comment \"only the journal's uploader sends to the log host\""]


def ruleset(cluster: Cluster, host: Host) -> str:
    """The whole nftables file for ``host``: table inet kiln made anew in one transaction (nft -f applies
    a file atomically: the table is never half loaded)."""
    fw = cluster.setting("firewall")
    rules = [line for allow in allows(cluster, host) for line in rule_lines(allow)]
    return render("base/kiln-firewall.nft.j2", host=host.name, zones=", ".join(zones(host)) or "none",
                  table=TABLE, rules=rules, log_dropped=fw.log_dropped, output_rules=output_rules(cluster, host))


# The ports kiln check's zones suite tries on other hosts: every port a rule above names, and MariaDB's.
PROBE_PORTS = (SLURMCTLD, SLURMD, SLURMDBD, 3306, SRUN_PORTS[0], NODE_EXPORTER_PORT, DCGM_EXPORTER_PORT,
               PROMETHEUS_PORT, ALERTMANAGER_PORT, NFS, GLUSTERD[0])
PROBED_HOSTS = 32  # above this many hosts, one of each kind (same groups, GPUs, monitored) is probed


def lets_in(allow: Allow, source: str, port: int) -> bool:
    """Whether ``allow`` lets ``source`` (an address) in on TCP ``port``."""
    if allow.ports:
        first, _, last = allow.ports.partition("-")
        if not int(first) <= port <= int(last or first):
            return False
    address = ipaddress.ip_address(source)
    return any(address in ipaddress.ip_network(s) for s in allow.sources
               if ipaddress.ip_network(s).version == address.version)


def probes(cluster: Cluster, source: Host) -> list[dict]:
    """What kiln check's zones suite tries from ``source``: each port of PROBE_PORTS (and SSH's) on each other
    host, or on one host of each kind in a large cluster, and whether the rules let ``source`` in."""
    others = [h for h in cluster.hosts.values() if h.name != source.name]
    if len(others) > PROBED_HOSTS:
        kinds: dict[tuple, Host] = {}
        for h in others:
            kinds.setdefault((h.groups, bool(h.gpu_count), h.monitored), h)
        others = list(kinds.values())
    out = []
    for target in others:
        ways = allows(cluster, target)
        ssh = int(target.connection.get("ssh_port", SSH))
        for port in (ssh, *PROBE_PORTS):
            out.append({"host": target.name, "address": target.address, "port": port,
                        "allowed": any(lets_in(a, source.address, port) for a in ways)})
    return out
