"""Validate a whole inventory before anything connects, and build the typed ``Cluster`` from it.

Every problem found is collected (not only the first), each naming its file and key, so an operator
fixes an inventory in one pass. Nothing here opens a connection or imports pyinfra.
"""

from __future__ import annotations

import difflib
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, TypeAdapter, ValidationError

from kiln.inventory import model
from kiln.inventory.errors import InventoryError, InventoryInvalid
from kiln.inventory.loader import RawHost, RawInventory, load_raw
from kiln.inventory.schema import (CLUSTER_NAME, CONNECTION_VARS, PREFIX, SERVICE_ACCOUNTS, SETTINGS,
                                   SUPPORTED_OS, Fabric, Setting)
from kiln.inventory import identities, nvidia_stack
from kiln.inventory.formats import CONTROL
from kiln.versions import PINS, required_pins

def _adapter(annotation: Any) -> TypeAdapter:
    # Models carry their own (strict) config; plain types get strict checking here, so "8" is no int.
    return TypeAdapter(annotation, config=None if hasattr(annotation, "model_fields") else ConfigDict(strict=True))


_ADAPTERS: dict[str, TypeAdapter] = {s.name: _adapter(s.annotation) for s in SETTINGS.values()}
_NODE_FACTS = ("kiln_cpus", "kiln_memory_mb", "kiln_gpu_count", "kiln_gpu_model", "kiln_nvswitch", "kiln_fabric")


def suggest(word: str, choices: Any) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


class _Collector:
    """Errors, deduplicated: a bad value in group_vars is reported once, not once per host."""

    def __init__(self) -> None:
        self._seen: dict[tuple, InventoryError] = {}

    def add(self, file: str, key: str, message: str, line: int | None = None) -> None:
        self._seen.setdefault((file, line, key, message), InventoryError(file, key, message, line))

    def extend(self, errors: list[InventoryError]) -> None:
        for e in errors:
            self.add(e.file, e.key, e.message, e.line)

    @property
    def errors(self) -> list[InventoryError]:
        return list(self._seen.values())


def load_cluster(root: Path | str, vault_password_file: str | None = None) -> model.Cluster:
    """The validated cluster, or ``InventoryInvalid`` carrying every error."""
    cluster, errors = validate(root, vault_password_file)
    if errors or cluster is None:
        raise InventoryInvalid(str(root), errors)
    return cluster


def validate(root: Path | str, vault_password_file: str | None = None
             ) -> tuple[model.Cluster | None, list[InventoryError]]:
    """The cluster and no errors, or None and every error. ``vault_password_file``: as Ansible's option
    (default: ANSIBLE_VAULT_PASSWORD_FILE)."""
    raw = load_raw(root, vault_password_file)
    out = _Collector()
    out.extend(raw.errors)
    if raw.errors:
        return None, out.errors
    identities.check_host_names(raw, out.add)
    kiln_groups = [g for g in model.KILN_GROUPS if g in raw.groups]
    managed = [n for n, h in raw.hosts.items() if set(h.groups) & set(kiln_groups)]
    ignored = tuple(n for n in raw.hosts if n not in set(managed))
    settings = {name: _host_settings(raw, raw.hosts[name], out) for name in managed}
    cluster_values = _cluster_settings(raw, settings, out)
    hosts = {name: _build_host(raw.hosts[name], settings[name], out) for name in managed}
    node_types = _node_types(raw, hosts, out)
    hosts = {n: _with_node_type(h, node_types) for n, h in hosts.items()}
    _check_groups(raw, cluster_values, out)
    _check_compute(raw, hosts, out)
    _check_addresses(raw, hosts, out)
    _check_partitions_teams(raw, cluster_values, out)
    identities.check_ids(raw, cluster_values, out.add)
    versions = _check_versions(raw, hosts, cluster_values, out)
    if not out.errors:
        nvidia_stack.check(raw, hosts, cluster_values, versions, out)
    if out.errors:
        return None, out.errors
    get = lambda key: cluster_values.get(key, SETTINGS[key].default)  # noqa: E731
    cluster = model.Cluster(
        name=get("kiln_cluster_name"),
        path=raw.root,
        hosts=hosts,
        groups={g: tuple(n for n in members if n in hosts) for g, members in raw.groups.items()},
        node_types={
            n: model.NodeType(n, tuple(members), hosts[members[0]].cpus, hosts[members[0]].memory_mb,
                              hosts[members[0]].gpu_count, hosts[members[0]].gpu_model)
            for n, members in node_types.items() if members
        },
        partitions=tuple(get("kiln_slurm_partitions")),
        teams=tuple(get("kiln_teams")),
        versions=versions,
        slurm_ha=get("kiln_slurm_ha"),
        secrets_dir=(raw.root.parent / get("kiln_secrets_dir")).resolve(),
        health_check_interval=get("kiln_health_check_interval"),
        topology=get("kiln_topology"),
        ignored=ignored,
        settings={s.name: get(s.name) for s in SETTINGS.values() if s.scope == "cluster"},
    )
    return cluster, []


def _format_loc(key: str, loc: tuple) -> str:
    return key + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)


def _check_type(setting: Setting, value: Any) -> list[tuple[str, str]]:
    """(key path, message) for each way ``value`` does not fit ``setting``."""
    if setting.name == "kiln_os" and value not in SUPPORTED_OS:
        return [(setting.name, f"unsupported OS {value!r}: kiln supports {', '.join(SUPPORTED_OS)}")]
    if setting.name == "kiln_versions" and isinstance(value, dict):
        bad = [(f"{setting.name}.{k}", f"version pin {v!r} must be a string: quote it in YAML "
                f"({k}: \"{v}\") so 12.10 does not become 12.1")
               for k, v in value.items() if not isinstance(v, str)]
        if bad:
            return bad
    try:
        _ADAPTERS[setting.name].validate_python(value)
        return []
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(p for p in err["loc"]
                        if not (isinstance(p, str) and (p.startswith(("function-", "literal[")) or p == "[key]")))
            path = _format_loc(setting.name, loc)
            if err["type"] == "extra_forbidden":
                model_fields = _fields_at(setting.annotation, loc[:-1])
                problems.append((path, f"unknown key {loc[-1]!r}{suggest(str(loc[-1]), model_fields)}"))
            elif err["type"] == "missing":
                problems.append((path, f"{loc[-1]!r} is required"))
            elif err["type"] == "value_error":
                problems.append((path, err["msg"].removeprefix("Value error, ")))
            else:
                problems.append((path, f"{err['msg'].lower()}, got {err.get('input')!r}"))
        return problems


def _control_characters(path: str, value: Any) -> list[tuple[str, str]]:
    """(key path, message) for each string in ``value`` (dict keys too) holding a control character."""
    if isinstance(value, str):
        found = CONTROL.search(value)
        return [(path, f"holds the control character {found.group()!r} (at {found.start()}): inventory values "
                 "are one line of text")] if found else []
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _control_characters(f"{path}.{k}", k)
                + _control_characters(f"{path}.{k}", v)]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _control_characters(f"{path}[{i}]", v)]
    return []


def _fields_at(annotation: Any, loc: tuple) -> list[str]:
    fields = getattr(annotation, "model_fields", None)
    if fields is None:
        args = getattr(annotation, "__args__", ())
        inner = args[-1] if args else None
        return _fields_at(inner, loc[1:] if loc else loc) if inner is not None else []
    if not loc:
        return list(fields)
    field = fields.get(str(loc[0]))
    return _fields_at(field.annotation, loc[1:]) if field else list(fields)


def _host_settings(raw: RawInventory, host: RawHost, out: _Collector) -> dict[str, Any]:
    """The host's kiln settings that are known and well typed; the rest become errors."""
    good: dict[str, Any] = {}
    for key, value in host.vars.items():
        if not key.startswith(PREFIX):
            continue
        file, line = host.origins.get(key, (host.source, None))
        setting = SETTINGS.get(key)
        if setting is None:
            out.add(file, key, f"unknown kiln setting{suggest(key, SETTINGS)}; kiln's settings are "
                    "listed in kiln/inventory/schema.py", line)
            continue
        problems = _control_characters(key, value) or _check_type(setting, value)
        for path, message in problems:
            out.add(file, path, message, line)
        if not problems:
            good[key] = _ADAPTERS[key].validate_python(value)
    return good


def _cluster_settings(raw: RawInventory, settings: dict[str, dict], out: _Collector) -> dict[str, Any]:
    """Cluster-wide settings must have one value on every host: set once, in group_vars/all/."""
    values: dict[str, Any] = {}
    for setting in (s for s in SETTINGS.values() if s.scope == "cluster"):
        seen: dict[str, list[str]] = defaultdict(list)
        for name, host_settings in settings.items():
            if setting.name in raw.hosts[name].vars and setting.name not in host_settings:
                break  # already reported as badly typed
            value = host_settings.get(setting.name, setting.default)
            seen[json.dumps(_jsonable(value), sort_keys=True)].append(name)
        else:
            if len(seen) > 1:
                files = sorted({raw.hosts[h].origins[setting.name][0]
                                for hs in seen.values() for h in hs if setting.name in raw.hosts[h].origins})
                out.add(files[-1] if files else raw.files.sources[0], setting.name,
                        "cluster-wide setting differs between hosts (set in " + ", ".join(files)
                        + "): set it once in group_vars/all/")
            elif seen and settings:
                first = next(iter(settings))
                values[setting.name] = settings[first].get(setting.name, setting.default)
    return values


def _jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump()
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def _connection(host: RawHost, out: _Collector) -> dict[str, Any]:
    data: dict[str, Any] = {"ssh_strict_host_key_checking": "yes"}
    for var, (key, kind) in CONNECTION_VARS.items():
        if var not in host.vars:
            continue
        value, (file, line) = host.vars[var], host.origins.get(var, (host.source, None))
        if kind is int:
            if isinstance(value, bool) or not str(value).isdigit() or not 0 < int(value) < 65536:
                out.add(file, var, f"must be a TCP port number, got {value!r}", line)
                continue
            value = int(value)
        elif kind is bool:
            text = str(value).lower()
            if text not in ("true", "false", "yes", "no", "1", "0"):
                out.add(file, var, f"must be true or false, got {value!r}", line)
                continue
            value = text in ("true", "yes", "1")
        else:
            try:
                value = kind(value) if isinstance(value, str) else kind(str(value))
            except ValueError as exc:
                out.add(file, var, str(exc), line)
                continue
        data[key] = value
    for var, key in (("kiln_ssh_known_hosts_file", "ssh_known_hosts_file"),
                     ("kiln_ssh_config_file", "ssh_config_file")):
        if var in host.vars:
            data[key] = str(host.vars[var])
    return data


def _build_host(host: RawHost, s: dict[str, Any], out: _Collector) -> model.Host:
    conn = _connection(host, out)
    get = lambda key: s.get(key, SETTINGS[key].default)  # noqa: E731
    return model.Host(
        name=host.name, groups=tuple(host.groups), address=str(conn.get("ssh_hostname", host.name)),
        connection=conn, os=get("kiln_os"), node_type=None, cpus=get("kiln_cpus"),
        sockets=get("kiln_sockets"), cores_per_socket=get("kiln_cores_per_socket"),
        threads_per_core=get("kiln_threads_per_core"), memory_mb=get("kiln_memory_mb"),
        gpu_count=get("kiln_gpu_count"), gpu_model=get("kiln_gpu_model"), nvswitch=get("kiln_nvswitch"),
        features=tuple(get("kiln_features")), fabric=get("kiln_fabric") or Fabric(),
        storage_mounts=tuple(get("kiln_storage_mounts")), sysctls=get("kiln_sysctls"), vars=host.vars,
        settings={k: get(k) for k, setting in SETTINGS.items() if setting.scope == "host"},
    )


def _node_types(raw: RawInventory, hosts: dict[str, model.Host], out: _Collector) -> dict[str, list[str]]:
    """Direct sub-groups of ``compute`` are node types; compute hosts outside them form type 'compute'."""
    types = {child: list(raw.groups.get(child, [])) for child in raw.children.get(model.COMPUTE, [])}
    typed = {h for members in types.values() for h in members}
    loose = [h for h in raw.groups.get(model.COMPUTE, []) if h not in typed]
    if loose:
        types[model.COMPUTE] = loose
    membership: dict[str, list[str]] = defaultdict(list)
    for name, members in types.items():
        for h in members:
            membership[h].append(name)
    for host, names in membership.items():
        if len(names) < 2:
            continue
        for fact in _NODE_FACTS:
            defined = {}
            for group in names:
                inline = raw.group_inline_vars.get(group, {})
                from_files = raw.files.group_defined(group)
                if fact in from_files:
                    defined[group] = from_files[fact]
                elif fact in inline:
                    defined[group] = (inline[fact], raw.files.host_source.get(host, raw.files.sources[0]))
            if len({json.dumps(v[0], sort_keys=True) for v in defined.values()}) > 1:
                detail = ", ".join(f"{g}={v[0]!r} ({v[1]})" for g, v in defined.items())
                out.add(raw.files.host_source.get(host, raw.files.sources[0]), f"{host}.{fact}",
                        f"host {host} is in node types {' and '.join(names)} whose facts conflict: {detail}; "
                        "put the host in one node type")
    return types


def _with_node_type(host: model.Host, types: dict[str, list[str]]) -> model.Host:
    from dataclasses import replace

    for name, members in types.items():
        if host.name in members:
            return replace(host, node_type=name)
    return host


def _hint_file(raw: RawInventory, group: str | None) -> str:
    if group and raw.files.group_vars.get(group):
        return sorted(raw.files.group_vars[group])[0]
    return f"group_vars/{group}.yml" if group else "group_vars/all/"


def _check_groups(raw: RawInventory, values: dict[str, Any], out: _Collector) -> None:
    source = raw.files.sources[0]
    controllers = raw.groups.get(model.CONTROLLER, [])
    if not controllers:
        out.add(source, model.CONTROLLER, "the slurm_controller group is missing or empty: put the "
                "Slurm controller host in it")
    elif len(controllers) > 1 and not values.get("kiln_slurm_ha", False):
        out.add(source, model.CONTROLLER, f"{len(controllers)} hosts in slurm_controller "
                f"({', '.join(controllers)}) but kiln_slurm_ha is not true: set kiln_slurm_ha: true in "
                "group_vars/all/ to run backup controllers, or keep one host")
    if not raw.groups.get(model.COMPUTE):
        out.add(source, model.COMPUTE, "the compute group is missing or empty: put the compute nodes "
                "(or node-type groups such as gpu_h100) under it")


def _check_compute(raw: RawInventory, hosts: dict[str, model.Host], out: _Collector) -> None:
    missing: dict[tuple[str, str], list[str]] = defaultdict(list)
    for host in hosts.values():
        if host.is_compute:
            for key, value in (("kiln_cpus", host.cpus), ("kiln_memory_mb", host.memory_mb)):
                if value is None and key not in raw.hosts[host.name].vars:
                    missing[(host.node_type or model.COMPUTE, key)].append(host.name)
        if host.gpu_count and not host.gpu_model and "kiln_gpu_model" not in raw.hosts[host.name].vars:
            missing[(host.node_type or (host.groups[0] if host.groups else None), "kiln_gpu_model")].append(host.name)
        if host.fabric.type in ("infiniband", "roce") and host.fabric.hca_count == 0:
            file, line = raw.hosts[host.name].origins.get("kiln_fabric", (raw.hosts[host.name].source, None))
            out.add(file, "kiln_fabric.hca_count", f"fabric type {host.fabric.type} needs hca_count > 0", line)
        paths = [m.path for m in host.storage_mounts]
        for dup in sorted({p for p in paths if paths.count(p) > 1}):
            file, line = raw.hosts[host.name].origins.get("kiln_storage_mounts", (raw.hosts[host.name].source, None))
            out.add(file, "kiln_storage_mounts", f"mount point {dup} is listed twice", line)
    for (group, key), names in missing.items():
        what = {"kiln_cpus": "CPU count", "kiln_memory_mb": "memory (MiB)",
                "kiln_gpu_model": "GPU model (kiln_gpu_count is set)"}[key]
        sample = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        out.add(_hint_file(raw, group), key, f"{len(names)} host(s) of {group} ({sample}) have no {what}: "
                f"set {key} for the group")


def _check_addresses(raw: RawInventory, hosts: dict[str, model.Host], out: _Collector) -> None:
    by_address: dict[str, list[str]] = defaultdict(list)
    for host in hosts.values():
        by_address[host.address].append(host.name)
    for address, names in by_address.items():
        if len(names) > 1:
            file, line = raw.hosts[names[1]].origins.get("ansible_host", (raw.hosts[names[1]].source, None))
            out.add(file, "ansible_host", f"address {address} is used by {len(names)} hosts "
                    f"({', '.join(names[:4])}): give each host its own address", line)


def _check_partitions_teams(raw: RawInventory, values: dict[str, Any], out: _Collector) -> None:
    file_of = lambda key: next((h.origins[key] for h in raw.hosts.values() if key in h.origins),  # noqa: E731
                               (raw.files.sources[0], None))
    parts = values.get("kiln_slurm_partitions", [])
    file, line = file_of("kiln_slurm_partitions")
    names = [p.name for p in parts]
    for i, part in enumerate(parts):
        for group in part.groups:
            if group not in raw.groups:
                out.add(file, f"kiln_slurm_partitions[{i}].groups", f"partition {part.name!r} names group "
                        f"{group!r}, which is not in the inventory{suggest(group, raw.groups)}", line)
        if names.count(part.name) > 1:
            out.add(file, f"kiln_slurm_partitions[{i}].name", f"partition {part.name!r} is defined twice", line)
    if sum(p.default for p in parts) > 1:
        out.add(file, "kiln_slurm_partitions", "more than one partition has default: true", line)
    teams = values.get("kiln_teams", [])
    file, line = file_of("kiln_teams")
    uids: dict[str, int] = {}
    for i, team in enumerate(teams):
        if [t.name for t in teams].count(team.name) > 1:
            out.add(file, f"kiln_teams[{i}].name", f"team {team.name!r} is defined twice", line)
        for j, user in enumerate(team.users):
            if uids.setdefault(user.name, user.uid) != user.uid:
                out.add(file, f"kiln_teams[{i}].users[{j}].uid", f"user {user.name!r} has uid {user.uid} "
                        f"here and {uids[user.name]} in another team", line)
    topo = values.get("kiln_topology", {})
    file, line = file_of("kiln_topology")
    for switch, members in topo.items():
        for member in members:
            if member not in raw.hosts and member not in topo:
                out.add(file, f"kiln_topology.{switch}", f"{member!r} is neither a host nor a switch", line)
    file, line = file_of("kiln_service_uids")
    for account, uid in values.get("kiln_service_uids", {}).items():
        if account not in SERVICE_ACCOUNTS:
            out.add(file, f"kiln_service_uids.{account}", f"unknown service account {account!r}: kiln "
                    f"manages {', '.join(SERVICE_ACCOUNTS)}{suggest(account, SERVICE_ACCOUNTS)}", line)
        elif not 100 <= uid <= 999:
            out.add(file, f"kiln_service_uids.{account}", f"uid {uid} is outside the system range 100-999 "
                    "that distribution packages accept for service accounts", line)
    name = values.get("kiln_cluster_name", SETTINGS["kiln_cluster_name"].default)
    if not CLUSTER_NAME.match(name):
        file, line = file_of("kiln_cluster_name")
        out.add(file, "kiln_cluster_name", f"cluster name {name!r} must be lower case letters, digits and "
                "'-' (Slurm ClusterName)", line)


def _check_versions(raw: RawInventory, hosts: dict[str, model.Host], values: dict[str, Any],
                    out: _Collector) -> dict[str, str]:
    if "kiln_versions" not in values and any("kiln_versions" in h.vars for h in raw.hosts.values()):
        return {}  # the pins themselves are malformed and already reported
    pins = values.get("kiln_versions", {})
    origin = next((h.origins["kiln_versions"] for h in raw.hosts.values() if "kiln_versions" in h.origins),
                  ("group_vars/all/versions.yml", None))
    for key in pins:
        if key not in PINS:
            out.add(origin[0], f"kiln_versions.{key}", f"unknown version pin{suggest(key, PINS)}; pins are "
                    "listed in kiln/versions.py", origin[1])
    roles_hosts: dict[str, list[str]] = defaultdict(list)
    for host in hosts.values():
        for role in host.roles:
            roles_hosts[role].append(host.name)
    for pin in required_pins(set(roles_hosts)):
        if pin not in pins or (not pins[pin] and not PINS[pin].optional):
            users = roles_hosts[PINS[pin].role]
            out.add(origin[0], f"kiln_versions.{pin}", f"no pin for {pin}, which role {PINS[pin].role} needs "
                    f"on {len(users)} host(s) ({', '.join(users[:3])}): add it to group_vars/all/versions.yml",
                    origin[1])
    resolved = {name: pin.default for name, pin in PINS.items() if pin.default is not None}
    resolved.update({k: v for k, v in pins.items() if k in PINS})
    return resolved
