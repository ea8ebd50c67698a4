"""Checks of the inventory as a whole, once every host's settings are typed: the kiln groups, compute
nodes' facts, addresses, partitions, teams, topology, service accounts, the cluster name and the pins.
Each adds errors through ``add(file, key, message, line)``, located with ``RawInventory.origin``."""

from __future__ import annotations

import ipaddress
import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from kiln.inventory import model
from kiln.inventory.formats import CONTROL, is_this_machine
from kiln.inventory.loader import RawInventory
from kiln.inventory.schema import CLUSTER_NAME, SERVICE_ACCOUNTS, SETTINGS
from kiln.inventory.storage_schema import brick_parent
from kiln.inventory.suggest import suggest
from kiln.versions import PINS, required_pins


def hint_file(raw: RawInventory, group: str | None) -> str:
    if group and raw.files.group_vars.get(group):
        return sorted(raw.files.group_vars[group])[0]
    return f"group_vars/{group}.yml" if group else "group_vars/all/"


def check_groups(raw: RawInventory, values: dict[str, Any], add: Any) -> None:
    source = raw.files.sources[0]
    for group in raw.groups:
        found = CONTROL.search(group)
        if found:
            file, line = raw.files.group_at.get(group, (source, None))
            add(file, group, f"group name holds the character {found.group()!r} (at {found.start()}), which is "
                "invisible or reorders how the name reads: rename the group", line)
    controllers = raw.groups.get(model.CONTROLLER, [])
    if not controllers:
        add(source, model.CONTROLLER, "the slurm_controller group is missing or empty: put the "
                "Slurm controller host in it")
    elif len(controllers) > 1 and not values.get("kiln_slurm_ha", False):
        add(source, model.CONTROLLER, f"{len(controllers)} hosts in slurm_controller "
                f"({', '.join(controllers)}) but kiln_slurm_ha is not true: set kiln_slurm_ha: true in "
                "group_vars/all/ to run backup controllers, or keep one host")
    if not raw.groups.get(model.COMPUTE):
        add(source, model.COMPUTE, "the compute group is missing or empty: put the compute nodes "
                "(or node-type groups such as gpu_h100) under it")


def check_compute(raw: RawInventory, hosts: dict[str, model.Host], add: Any) -> None:
    missing: dict[tuple[str, str], list[str]] = defaultdict(list)
    for host in hosts.values():
        if host.is_compute:
            for key, value in (("kiln_cpus", host.cpus), ("kiln_memory_mb", host.memory_mb)):
                if value is None and key not in raw.hosts[host.name].vars:
                    missing[(host.node_type or model.COMPUTE, key)].append(host.name)
        if host.gpu_count and not host.gpu_model and "kiln_gpu_model" not in raw.hosts[host.name].vars:
            missing[(host.node_type or (host.groups[0] if host.groups else None), "kiln_gpu_model")].append(host.name)
        if host.setting("gpu_nvlink_layout") == "bridged" and not host.setting("gpu_nvlinks"):
            file, line = raw.origin("kiln_gpu_nvlink_layout", host.name)
            add(file, "kiln_gpu_nvlink_layout", "bridged NVLink needs kiln_gpu_nvlinks: the active links each GPU "
                "must have through its bridges (e.g. 4 a bridge on A100 PCIe)", line)
        if host.fabric.type in ("infiniband", "roce", "rxe") and host.fabric.hca_count == 0:
            file, line = raw.origin("kiln_fabric", host.name)
            add(file, "kiln_fabric.hca_count", f"fabric type {host.fabric.type} needs hca_count > 0", line)
        paths = [m.path for m in host.storage_mounts]
        for dup in sorted(p for p, n in Counter(paths).items() if n > 1):
            file, line = raw.origin("kiln_storage_mounts", host.name)
            add(file, "kiln_storage_mounts", f"mount point {dup} is listed twice", line)
    for (group, key), names in missing.items():
        what = {"kiln_cpus": "CPU count", "kiln_memory_mb": "memory (MiB)",
                "kiln_gpu_model": "GPU model (kiln_gpu_count is set)"}[key]
        sample = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        add(hint_file(raw, group), key, f"{len(names)} host(s) of {group} ({sample}) have no {what}: "
                f"set {key} for the group")


def check_storage_servers(raw: RawInventory, hosts: dict[str, model.Host], add: Any) -> None:
    """Exports and volumes only on storage servers, each once; a mount from a storage server of this
    inventory names one of its exports (nfs) or volumes (glusterfs)."""
    served: dict[str, dict[str, set[str]]] = {}
    for host in hosts.values():
        exports, volumes = host.setting("storage_nfs_exports"), host.setting("storage_gluster_volumes")
        for key, items, ident in (("kiln_storage_nfs_exports", exports, "path"),
                                  ("kiln_storage_gluster_volumes", volumes, "name")):
            if not items:
                continue
            file, line = raw.origin(key, host.name)
            if not host.in_group(model.STORAGE):
                add(file, key, f"{host.name} is not in the {model.STORAGE} group: only storage servers serve "
                        f"filesystems; put it in {model.STORAGE} or remove {key}", line)
                continue
            if key == "kiln_storage_gluster_volumes" and host.os == "rocky9":
                add(file, key, f"{host.name} runs rocky9, whose repositories have no glusterfs-server (only the "
                        "client): serve GlusterFS from a Debian or Ubuntu storage server", line)
            if key == "kiln_storage_gluster_volumes":
                for v in items:
                    parent = brick_parent(v.brick)
                    near = [e.path for e in exports or [] if e.path == parent or e.path.startswith(parent + "/")
                            or parent.startswith(e.path.rstrip("/") + "/")]
                    if near:
                        add(file, key, f"{host.name}: brick {v.brick} and NFS export {near[0]} overlap: kiln closes "
                                f"the brick's parent {parent} to all but root, and a brick must not be reachable over "
                                "NFS; give them directories apart", line)
            names = [getattr(item, ident) for item in items]
            for dup in sorted(n for n, c in Counter(names).items() if c > 1):
                add(file, key, f"{host.name}: {ident} {dup} is listed twice", line)
        if host.in_group(model.STORAGE):
            served[host.name] = {"nfs": {e.path for e in exports}, "glusterfs": {"/" + v.name for v in volumes}}
    reported: set[tuple[str, str]] = set()
    for host in hosts.values():
        for i, m in enumerate(host.storage_mounts):
            server, sep, remote = m.source.partition(":")
            if not sep or server not in served or m.type not in ("nfs", "glusterfs") or (server, m.source) in reported:
                continue
            offered = served[server][m.type]
            # nothing offered: the server's own list is missing or was refused above; one error is enough
            if offered and remote.rstrip("/") not in offered and remote not in offered:
                reported.add((server, m.source))
                file, line = raw.origin("kiln_storage_mounts", host.name)
                what = "exports" if m.type == "nfs" else "serves the volumes"
                add(file, f"kiln_storage_mounts[{i}].source", f"{host.name} mounts {m.source}, but {server} {what} "
                        f"{', '.join(sorted(offered))}", line)


# mount type -> (the client setting it needs, the pin it needs or None)
CLIENT_SETTINGS = {"lustre": ("kiln_lustre", "lustre"), "beegfs": ("kiln_beegfs", "beegfs"), "cephfs": ("kiln_ceph", None)}


def check_filesystem_clients(raw: RawInventory, hosts: dict[str, model.Host], values: dict[str, Any],
                             add: Any) -> None:
    """Every parallel filesystem a node mounts has its client described once, cluster-wide, and pinned:
    Lustre (LNet networks, the lustre pin), BeeGFS (management host, the beegfs pin), CephFS (monitors)."""
    pins = values.get("kiln_versions", {})
    for fstype, (key, pin) in CLIENT_SETTINGS.items():
        users = [h.name for h in hosts.values() if any(m.type == fstype for m in h.storage_mounts)]
        if not users:
            continue
        sample = ", ".join(users[:3]) + (f" and {len(users) - 3} more" if len(users) > 3 else "")
        if values.get(key) is None and key not in _raw_keys(raw):
            add("group_vars/all/", key, f"{len(users)} host(s) ({sample}) mount {fstype}, which needs {key}: "
                    "describe the client there (see docs/settings.md)")
        if pin and not pins.get(pin):
            file, line = raw.origin("kiln_versions", default="group_vars/all/versions.yml")
            add(file, f"kiln_versions.{pin}", f"{len(users)} host(s) ({sample}) mount {fstype}: pin its client "
                    f"packages (kiln_versions.{pin})", line)
    lustre = values.get("kiln_lustre")
    if lustre is not None and lustre.modules == "kmod" and not pins.get("kernel") and any(
            h.os != "rocky9" for h in hosts.values() if any(m.type == "lustre" for m in h.storage_mounts)):
        file, line = raw.origin("kiln_lustre")
        add(file, "kiln_lustre.modules", "prebuilt Lustre modules on Debian and Ubuntu are built for one kernel: "
                "pin it (kiln_versions.kernel) or use dkms", line)


def _raw_keys(raw: RawInventory) -> set[str]:
    """kiln keys set anywhere in the inventory (a set but refused value was reported where it was read)."""
    return {k for h in raw.hosts.values() for k in h.vars}


def check_fabric(raw: RawInventory, hosts: dict[str, model.Host], values: dict[str, Any], add: Any) -> None:
    """The fabric's settings, before any connection: an IPoIB address per node in its subnet and unique,
    lossless RoCE only with a stack that has mlnx_qos, an OFED stack pinned, opensm only on InfiniBand."""
    import ipaddress
    owners: dict[str, list[str]] = defaultdict(list)
    for host in hosts.values():
        fabric = host.fabric
        file, line = raw.origin("kiln_fabric", host.name)
        if fabric.ipoib is not None:
            address = host.setting("ipoib_address")
            afile, aline = raw.origin("kiln_ipoib_address", host.name)
            if not address:
                add(file, "kiln_ipoib_address", f"{host.name} is on an IPoIB fabric ({fabric.ipoib.subnet}) but has no "
                        "kiln_ipoib_address: give each node its address (a host variable)", line)
            else:
                try:
                    inside = ipaddress.ip_address(address) in ipaddress.ip_network(fabric.ipoib.subnet)
                except ValueError:
                    inside = False
                if not inside:
                    add(afile, "kiln_ipoib_address", f"{host.name}: {address} is not in the IPoIB subnet "
                            f"{fabric.ipoib.subnet}", aline)
                owners[address].append(host.name)
        roce = fabric.roce
        if roce is not None and fabric.stack == "inbox" and (roce.dscp_trust or roce.ecn or roce.pfc_priority is not None):
            add(file, "kiln_fabric.roce", f"{host.name}: lossless RoCE settings (PFC, DSCP trust, ECN) are applied with "
                    "mlnx_qos, which comes with NVIDIA's stack: set stack doca or mlnx_ofed, or set them on the NICs "
                    "yourself and leave them out here", line)
        if roce is not None and (roce.dscp_trust or roce.ecn or roce.pfc_priority is not None) and not roce.interfaces:
            add(file, "kiln_fabric.roce.interfaces", f"{host.name}: name the RoCE netdevs the settings apply to", line)
        if fabric.stack != "inbox" and fabric.type in ("infiniband", "roce") and \
                not values.get("kiln_versions", {}).get("ofed"):
            ofile, oline = raw.origin("kiln_versions", default="group_vars/all/versions.yml")
            add(ofile, "kiln_versions.ofed", f"{host.name} uses NVIDIA's {fabric.stack} stack: pin it "
                    "(kiln_versions.ofed)", oline)
        if host.setting("opensm") and fabric.type != "infiniband":
            sfile, sline = raw.origin("kiln_opensm", host.name)
            add(sfile, "kiln_opensm", f"{host.name} runs a subnet manager but its fabric is {fabric.type}: opensm "
                    "is for InfiniBand only", sline)
    for address, names in owners.items():
        if len(names) > 1:
            file, line = raw.origin("kiln_ipoib_address", names[1])
            add(file, "kiln_ipoib_address", f"IPoIB address {address} is used by {len(names)} hosts "
                    f"({', '.join(names[:4])}): give each its own", line)


def check_addresses(raw: RawInventory, hosts: dict[str, model.Host], values: dict[str, Any], add: Any) -> None:
    """Each host has its own address, and none is this machine (loopback, unspecified, localhost):
    kiln would deploy onto, reboot or drain the operator's own machine. A benchmark or testbed whose
    nodes listen on loopback says so with kiln_local_nodes."""
    by_address: dict[str, list[str]] = defaultdict(list)
    local = values.get("kiln_local_nodes", False)
    for host in hosts.values():
        by_address[host.address].append(host.name)
        if not local and is_this_machine(host.address):
            file, line = raw.origin("ansible_host", host.name)
            add(file, "ansible_host" if "ansible_host" in raw.hosts[host.name].vars else host.name,
                f"{host.name}'s address {host.address} is this machine (loopback): kiln would deploy onto it; give "
                "the node's own address (kiln_local_nodes: true is for a benchmark whose nodes listen on loopback)",
                line)
    for address, names in by_address.items():
        if len(names) > 1:
            file, line = raw.origin("ansible_host", names[1])
            add(file, "ansible_host", f"address {address} is used by {len(names)} hosts "
                    f"({', '.join(names[:4])}): give each host its own address", line)


def check_partitions(raw: RawInventory, values: dict[str, Any], add: Any) -> None:
    parts = values.get("kiln_slurm_partitions", [])
    file, line = raw.origin("kiln_slurm_partitions")
    counts = Counter(p.name for p in parts)
    for i, part in enumerate(parts):
        for group in part.groups:
            if group not in raw.groups:
                add(file, f"kiln_slurm_partitions[{i}].groups", f"partition {part.name!r} names group "
                    f"{group!r}, which is not in the inventory{suggest(group, raw.groups)}", line)
        if counts[part.name] > 1:
            add(file, f"kiln_slurm_partitions[{i}].name", f"partition {part.name!r} is defined twice", line)
    if sum(p.default for p in parts) > 1:
        add(file, "kiln_slurm_partitions", "more than one partition has default: true", line)


def check_teams(raw: RawInventory, values: dict[str, Any], add: Any) -> None:
    teams = values.get("kiln_teams", [])
    file, line = raw.origin("kiln_teams")
    uids: dict[str, int] = {}
    local: dict[str, str] = {}  # user -> a local team of theirs
    remote: dict[str, str] = {}  # user -> a directory team of theirs
    counts = Counter(t.name for t in teams)
    for i, team in enumerate(teams):
        if counts[team.name] > 1:
            add(file, f"kiln_teams[{i}].name", f"team {team.name!r} is defined twice", line)
        for j, user in enumerate(team.users):
            (remote if team.directory else local).setdefault(user.name, team.name)
            other = (local if team.directory else remote).get(user.name)
            if other is not None:
                add(file, f"kiln_teams[{i}].users[{j}].name", f"user {user.name!r} is in team {team.name!r} and in "
                    f"team {other!r}, one from the directory and one local: a local account would hide the "
                    "directory's (another uid); keep the user in teams of one kind", line)
            if user.uid is not None and uids.setdefault(user.name, user.uid) != user.uid:
                add(file, f"kiln_teams[{i}].users[{j}].uid", f"user {user.name!r} has uid {user.uid} "
                    f"here and {uids[user.name]} in another team", line)
    for i, team in enumerate(teams):  # a probe account never runs a job: no user of any team
        member = local.get(team.probe_user) or remote.get(team.probe_user) if team.probe_user else None
        if member is not None:
            add(file, f"kiln_teams[{i}].probe_user", f"the probe account {team.probe_user!r} is a user of team "
                f"{member!r}, which gets a Slurm association and runs jobs: name a directory account that is in "
                "no team's users", line)


def check_team_logins(raw: RawInventory, hosts: dict[str, model.Host], values: dict[str, Any], add: Any) -> None:
    """A team's login_hosts names hosts where users log in: the login group's, or the controllers where
    the inventory has no login group (kiln writes the teams' pam_access rules there)."""
    logins = [h for h in hosts.values() if model.LOGIN in h.groups] or [
        h for h in hosts.values() if model.CONTROLLER in h.groups]
    names = {h.name for h in logins}
    file, line = raw.origin("kiln_teams")
    for i, team in enumerate(values.get("kiln_teams", [])):
        for j, name in enumerate(team.login_hosts or []):
            if name not in names:
                add(file, f"kiln_teams[{i}].login_hosts[{j}]", f"{name!r} is not a host where users log in "
                    f"(the login group, else the controllers): {', '.join(sorted(names)) or 'none'}", line)


SLURM_DEFAULT_QOS = "normal"  # the QoS every Slurm accounting database has


def check_qos(raw: RawInventory, values: dict[str, Any], add: Any) -> None:
    """QoS names unique; preemption names defined QoS, never itself or a QoS that preempts it back (in
    any number of steps); GPU limits ordered (per user <= per team <= all: a larger one could never be
    reached); each team's QoS defined, its default among them."""
    qos = values.get("kiln_qos", [])
    file, line = raw.origin("kiln_qos")
    names = [q.name for q in qos]
    known = set(names) | {SLURM_DEFAULT_QOS}
    counts = Counter(names)
    for i, q in enumerate(qos):
        where = f"kiln_qos[{i}]"
        if counts[q.name] > 1:
            add(file, f"{where}.name", f"QoS {q.name!r} is defined twice", line)
        for target in q.preempt:
            if target == q.name:
                add(file, f"{where}.preempt", f"QoS {q.name!r} cannot preempt itself", line)
            elif target not in known:
                add(file, f"{where}.preempt", f"QoS {q.name!r} preempts {target!r}, which is not in kiln_qos"
                    f"{suggest(target, names)}", line)
        limits = [(k, getattr(q, k)) for k in ("max_gpus_per_user", "max_gpus_per_team", "max_gpus")
                  if getattr(q, k) is not None]
        for (small, a), (big, b) in zip(limits, limits[1:]):
            if a > b:
                add(file, f"{where}.{small}", f"QoS {q.name!r}: {small} {a} is more than {big} {b}, so it could "
                    "never be reached", line)
    cyclic = in_cycles({q.name: [t for t in q.preempt if t != q.name] for q in qos})
    for i, q in enumerate(qos):
        if q.name in cyclic and q.name not in q.preempt:
            add(file, f"kiln_qos[{i}].preempt", f"QoS {q.name!r} preempts a QoS that preempts it back: preemption "
                "must go one way", line)
    teams = values.get("kiln_teams", [])
    tfile, tline = raw.origin("kiln_teams")
    for i, team in enumerate(teams):
        for j, name in enumerate(team.qos):
            if name not in known:
                add(tfile, f"kiln_teams[{i}].qos[{j}]", f"team {team.name!r} uses QoS {name!r}, which is not in "
                    f"kiln_qos{suggest(name, names)}", tline)
        if team.default_qos is not None and team.default_qos not in team.qos:
            add(tfile, f"kiln_teams[{i}].default_qos", f"team {team.name!r}: default_qos {team.default_qos!r} is "
                f"not one of its qos ({', '.join(team.qos) or 'none'})", tline)


def in_cycles(edges: dict[str, list[str]]) -> set[str]:
    """The nodes of ``edges`` that lie on a cycle (strongly connected components of more than one node),
    in time linear in nodes and edges (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: set[str] = set()
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges.get(root, ())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.update(component)
    return out


def check_topology(raw: RawInventory, values: dict[str, Any], add: Any) -> None:
    topo = values.get("kiln_topology", {})
    file, line = raw.origin("kiln_topology")
    for switch, members in topo.items():
        for member in members:
            if member not in raw.hosts and member not in topo:
                add(file, f"kiln_topology.{switch}", f"{member!r} is neither a host nor a switch", line)


def check_service_accounts(raw: RawInventory, values: dict[str, Any], add: Any) -> None:
    file, line = raw.origin("kiln_service_uids")
    for account, uid in values.get("kiln_service_uids", {}).items():
        if account not in SERVICE_ACCOUNTS:
            add(file, f"kiln_service_uids.{account}", f"unknown service account {account!r}: kiln "
                f"manages {', '.join(SERVICE_ACCOUNTS)}{suggest(account, SERVICE_ACCOUNTS)}", line)
        elif not 100 <= uid <= 999:
            add(file, f"kiln_service_uids.{account}", f"uid {uid} is outside the system range 100-999 "
                "that distribution packages accept for service accounts", line)


def check_cluster_name(raw: RawInventory, values: dict[str, Any], add: Any) -> None:
    name = values.get("kiln_cluster_name", SETTINGS["kiln_cluster_name"].default)
    if not CLUSTER_NAME.match(name):
        file, line = raw.origin("kiln_cluster_name")
        add(file, "kiln_cluster_name", f"cluster name {name!r} must be lower case letters, digits and "
            "'-' (Slurm ClusterName)", line)


def check_versions(raw: RawInventory, hosts: dict[str, model.Host], values: dict[str, Any],
                    add: Any) -> dict[str, str]:
    if "kiln_versions" not in values and any("kiln_versions" in h.vars for h in raw.hosts.values()):
        return {}  # the pins themselves are malformed and already reported
    pins = values.get("kiln_versions", {})
    origin = raw.origin("kiln_versions", default="group_vars/all/versions.yml")
    for key in pins:
        if key not in PINS:
            add(origin[0], f"kiln_versions.{key}", f"unknown version pin{suggest(key, PINS)}; pins are "
                    "listed in kiln/versions.py", origin[1])
    roles_hosts: dict[str, list[str]] = defaultdict(list)
    for host in hosts.values():
        for role in host.roles:
            roles_hosts[role].append(host.name)
    for pin in required_pins(set(roles_hosts)):
        if pin not in pins or (not pins[pin] and not PINS[pin].optional):
            users = roles_hosts[PINS[pin].role]
            add(origin[0], f"kiln_versions.{pin}", f"no pin for {pin}, which role {PINS[pin].role} needs "
                    f"on {len(users)} host(s) ({', '.join(users[:3])}): add it to group_vars/all/versions.yml",
                    origin[1])
    slurm = pins.get("slurm")
    if isinstance(slurm, str) and slurm:
        from kiln.patch.slurm_versions import RELEASES, release_of
        release = release_of(slurm)
        if release is None or release not in RELEASES:
            add(origin[0], "kiln_versions.slurm", f"{slurm!r} is not a Slurm release kiln can upgrade in "
                f"SchedMD's order: give the package version (YY.MM.patch and its suffix) of a release from "
                f"{RELEASES[0]} to {RELEASES[-1]}", origin[1])
    resolved = {name: pin.default for name, pin in PINS.items() if pin.default is not None}
    resolved.update({k: v for k, v in pins.items() if k in PINS})
    return resolved


def check_one_slurm_os(raw: RawInventory, hosts: dict[str, model.Host], add: Any) -> None:
    """The hosts that run Slurm run one OS release. A cluster has one Slurm pin, and a package version
    names one release's package (``22.05.8-4+deb12u3`` is Debian 12's; Debian 13 carries 24.11): a
    Debian 12 controller beside Debian 13 compute nodes would be asked to install a package that is
    not there, or to run a slurmd newer than its slurmctld, which Slurm never allows (and 22.05 to
    24.11 is four majors apart, past SchedMD's window). Hosts outside Slurm (a storage server) may run
    another OS. Each host of an OS other than the most common one is named, with its kiln_os line."""
    by_os: dict[str, list[str]] = defaultdict(list)
    for host in hosts.values():
        if "slurm" in host.roles and host.os:
            by_os[host.os].append(host.name)
    if len(by_os) < 2:
        return
    counts = sorted(by_os.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    main_os, main_hosts = counts[0]
    for other_os, names in counts[1:]:
        for name in names[:5]:
            file, line = raw.origin("kiln_os", host=name)
            add(file, "kiln_os", f"{name} runs {other_os} but {len(main_hosts)} other Slurm host(s) "
                f"({', '.join(main_hosts[:3])}) run {main_os}: the hosts that run Slurm share one Slurm pin and "
                f"must run one OS release (a package version names one release's package, and slurmd may never "
                f"be newer than slurmctld); move a cluster to a new release by reinstalling it, or keep the "
                f"other release in a cluster of its own", line)


def check_secrets_dir(raw: RawInventory, values: dict[str, Any], add: Any) -> None:
    """The secrets directory stays in a place the operator owns: a relative kiln_secrets_dir may not
    climb out of the directory that holds the inventory (``../../other-team/secrets`` would hand
    another cluster's munge key to this one), and the nearest directory of it that exists belongs to
    the user running kiln (or root) and is writable by no one else."""
    value = values.get("kiln_secrets_dir")
    if not value:
        return
    file, line = raw.origin("kiln_secrets_dir")
    base = raw.root.parent.resolve()
    path = Path(os.path.normpath(base / str(value)))
    if not Path(str(value)).is_absolute() and not path.is_relative_to(base):
        add(file, "kiln_secrets_dir", f"{value!r} leaves {base}, the directory that holds the inventory: keep a "
            "relative secrets directory inside it, or give an absolute path the operator owns", line)
        return
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    info = existing.stat()
    if info.st_uid not in (os.geteuid(), 0) or info.st_mode & 0o022:
        add(file, "kiln_secrets_dir", f"{existing} (holding the secrets directory {path}) belongs to uid "
            f"{info.st_uid} with mode {info.st_mode & 0o777:o}: the secrets directory must sit in a directory of "
            "the user running kiln (or root) that no one else may write", line)


def check_firewall_addresses(raw: RawInventory, hosts: dict[str, model.Host], values: dict[str, Any],
                             add: Any) -> None:
    """With the firewall on, every host's address is an IP address: each rule names the hosts a port is
    open to by address, and a name would be resolved once, when the rules load, by whatever DNS says then;
    and no NFS mount asks for v2 or v3, which need ports the storage servers' rules do not open."""
    firewall = values.get("kiln_firewall")
    if firewall is None or not firewall.enabled:
        return
    for host in hosts.values():
        try:
            ipaddress.ip_address(host.address)
        except ValueError:
            file, line = raw.origin("ansible_host", host.name)
            add(file, "ansible_host" if "ansible_host" in raw.hosts[host.name].vars else host.name,
                f"{host.name}'s address {host.address} is a name: with kiln_firewall enabled every host needs an "
                "IP address (its rules open ports to hosts by address)", line)
        for mount in host.storage_mounts:
            words = set(mount.options.split(","))
            if mount.type == "nfs" and words & {"vers=2", "vers=3", "nfsvers=2", "nfsvers=3", "v2", "v3"}:
                file, line = raw.origin("kiln_storage_mounts", host.name)
                add(file, "kiln_storage_mounts", f"{host.name} mounts {mount.path} with NFS {mount.options}: with "
                    "kiln_firewall enabled the storage servers open NFSv4's port 2049 only (NFSv3 needs rpcbind and "
                    "mountd on ports of their own): mount it with vers=4.2", line)


def check_bmcs(raw: RawInventory, hosts: dict[str, model.Host], add: Any) -> None:
    """A BMC is named for a compute node only (kiln-remediate repairs those), its CA file is a PEM
    certificate in the inventory's directory, and no two nodes name the same BMC system."""
    seen: dict[tuple, str] = {}
    for host in hosts.values():
        bmc = host.settings.get("kiln_bmc")
        if bmc is None:
            continue
        file, line = raw.origin("kiln_bmc", host.name)
        if not host.is_compute:
            add(file, "kiln_bmc", f"{host.name} is no compute node: kiln-remediate power-cycles compute nodes only", line)
        if bmc.ca_file is not None:
            path = raw.root / bmc.ca_file
            try:
                pem = path.read_text(errors="replace")[:1 << 20]
            except OSError as e:
                add(file, "kiln_bmc.ca_file", f"{host.name}: cannot read {path}: {e.strerror}", line)
            else:
                if "-----BEGIN CERTIFICATE-----" not in pem:
                    add(file, "kiln_bmc.ca_file", f"{host.name}: {path} holds no PEM certificate", line)
        key = (bmc.host, bmc.port_number, bmc.system)
        if key in seen:
            add(file, "kiln_bmc", f"{host.name} names the BMC system of {seen[key]} ({bmc.address}"
                f"{' ' + bmc.system if bmc.system else ''}): give each node its own (system: on a shared BMC)", line)
        seen.setdefault(key, host.name)
