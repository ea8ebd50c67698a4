"""Validate a whole inventory before anything connects, and build the typed ``Cluster`` from it.

Every problem found is collected (not only the first), each naming its file and key, so an operator
fixes an inventory in one pass. Nothing here opens a connection or imports pyinfra.
"""

from __future__ import annotations

import functools
import json
import os
import dataclasses
from collections import defaultdict
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, TypeAdapter, ValidationError

from kiln.inventory import (cluster_checks, encryption, gluster, kerberos, identities, model, monitoring_checks, nvidia_stack, quotas, ssh_config,
                            tls_checks)
from kiln.inventory.errors import InventoryError, InventoryInvalid
from kiln.inventory.formats import CONTROL, ascii_digits
from kiln.inventory.loader import RawHost, RawInventory, load_raw
from kiln.inventory.schema import CONNECTION_VARS, PREFIX, SETTINGS, SUPPORTED_OS, Fabric, Setting
from kiln.inventory.suggest import suggest


def _adapter(annotation: Any) -> TypeAdapter:
    # Models carry their own (strict) config; plain types get strict checking here, so "8" is no int.
    return TypeAdapter(annotation, config=None if hasattr(annotation, "model_fields") else ConfigDict(strict=True))


_ADAPTERS: dict[str, TypeAdapter] = {s.name: _adapter(s.annotation) for s in SETTINGS.values()}
_NODE_FACTS = ("kiln_cpus", "kiln_memory_mb", "kiln_gpu_count", "kiln_gpu_model", "kiln_nvswitch", "kiln_fabric")


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
    managed = [n for n, h in raw.hosts.items() if not set(kiln_groups).isdisjoint(h.groups)]
    managed_set = set(managed)
    ignored = tuple(n for n in raw.hosts if n not in managed_set)
    checked: dict = {}  # hosts share their group_vars' values: each distinct value is checked once
    settings = {name: _host_settings(raw, raw.hosts[name], out, checked) for name in managed}
    cluster_values = _cluster_settings(raw, settings, out)
    hosts = {name: _build_host(raw.hosts[name], settings[name], out, raw.root) for name in managed}
    node_types = _node_types(raw, hosts, out)
    type_of = {h: t for t, members in reversed(node_types.items()) for h in members}  # the first type wins
    hosts = {n: _with_node_type(h, type_of) for n, h in hosts.items()}
    if any(h in hosts for h in raw.groups.get(model.MONITORING, ())):
        hosts = {n: dataclasses.replace(h, monitored=True) for n, h in hosts.items()}
    cluster_checks.check_groups(raw, cluster_values, out.add)
    cluster_checks.check_compute(raw, hosts, out.add)
    cluster_checks.check_one_slurm_os(raw, hosts, out.add)
    cluster_checks.check_addresses(raw, hosts, cluster_values, out.add)
    cluster_checks.check_storage_servers(raw, hosts, out.add)
    cluster_checks.check_bmcs(raw, hosts, out.add)
    cluster_checks.check_firewall_addresses(raw, hosts, cluster_values, out.add)
    cluster_checks.check_filesystem_clients(raw, hosts, cluster_values, out.add)
    cluster_checks.check_fabric(raw, hosts, cluster_values, out.add)
    cluster_checks.check_partitions(raw, cluster_values, out.add)
    cluster_checks.check_teams(raw, cluster_values, out.add)
    cluster_checks.check_team_logins(raw, hosts, cluster_values, out.add)
    cluster_checks.check_qos(raw, cluster_values, out.add)
    cluster_checks.check_topology(raw, cluster_values, out.add)
    cluster_checks.check_service_accounts(raw, cluster_values, out.add)
    cluster_checks.check_cluster_name(raw, cluster_values, out.add)
    cluster_checks.check_secrets_dir(raw, cluster_values, out.add)
    monitoring_checks.check_monitoring(raw, hosts, cluster_values, out.add)
    monitoring_checks.check_usage_prices(raw, node_types, hosts, cluster_values, out.add)
    identities.check_ids(raw, cluster_values, out.add)
    identities.check_directory(raw, cluster_values, out.add)
    identities.check_slurm_names(raw, cluster_values, out.add)
    identities.check_team_directories(raw, hosts, cluster_values, out.add)
    quotas.check(raw, hosts, cluster_values, out.add)
    gluster.check(raw, hosts, cluster_values, out.add)
    encryption.check(raw, hosts, cluster_values, out.add)
    kerberos.check(raw, hosts, cluster_values, out.add)
    versions = cluster_checks.check_versions(raw, hosts, cluster_values, out.add)
    tls_checks.check_tls(raw, cluster_values, versions, out.add)
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
                # only the first letter lowered: the rest may quote a pattern or a value, whose case matters
                problems.append((path, f"{err['msg'][:1].lower()}{err['msg'][1:]}, got {err.get('input')!r}"))
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


def _host_settings(raw: RawInventory, host: RawHost, out: _Collector, checked: dict) -> dict[str, Any]:
    """The host's kiln settings that are known and well typed; the rest become errors.

    ``checked``: (key, id(value)) -> (problems, typed value) of values checked already. The loader
    gives hosts that read one value from the same file the same object (kiln.inventory.loader), so
    10,000 hosts of one group_vars file check its values once; ``raw`` keeps every value alive, so an
    id is never reused for another value while ``checked`` is in use."""
    good: dict[str, Any] = {}
    for key, value in host.vars.items():
        if not key.startswith(PREFIX):
            continue
        setting = SETTINGS.get(key)
        known = checked.get((key, id(value)))
        if known is None:
            if setting is None:
                known = ([(key, f"unknown kiln setting{suggest(key, SETTINGS)}; kiln's settings are "
                           "listed in kiln/inventory/schema.py")], None)
            else:
                problems = _control_characters(key, value) or _check_type(setting, value)
                known = (problems, None if problems else _ADAPTERS[key].validate_python(value))
            checked[(key, id(value))] = known
        problems, typed = known
        if problems:
            file, line = raw.origin(key, host.name)
            for path, message in problems:
                out.add(file, path, message, line)
        else:
            good[key] = typed
    return good


def _cluster_settings(raw: RawInventory, settings: dict[str, dict], out: _Collector) -> dict[str, Any]:
    """Cluster-wide settings must have one value on every host: set once, in group_vars/all/."""
    values: dict[str, Any] = {}
    # keys some host sets but whose value was refused (reported already, per host)
    refused = set().union(*(raw.hosts[h].vars.keys() - hs.keys() for h, hs in settings.items()))
    for setting in (s for s in SETTINGS.values() if s.scope == "cluster"):
        name, default = setting.name, setting.default
        if name in refused:
            continue  # already reported as badly typed
        by_object: dict[int, tuple[Any, list[str]]] = {}  # hosts mostly share one value object
        if len({id(hs.get(name, default)) for hs in settings.values()}) == 1:
            if settings:
                first = next(iter(settings))
                by_object[0] = (settings[first].get(name, default), list(settings))
        else:
            for host, host_settings in settings.items():
                value = host_settings.get(name, default)
                by_object.setdefault(id(value), (value, []))[1].append(host)
        seen: dict[str, list[str]] = defaultdict(list)
        for value, names in by_object.values():
            seen[json.dumps(_jsonable(value), sort_keys=True)].extend(names)
        if len(seen) > 1:
            files = sorted({raw.hosts[h].origins[name][0]
                            for hs in seen.values() for h in hs if name in raw.hosts[h].origins})
            out.add(files[-1] if files else raw.files.sources[0], name,
                    "cluster-wide setting differs between hosts (set in " + ", ".join(files)
                    + "): set it once in group_vars/all/")
        elif seen and settings:
            first = next(iter(settings))
            values[name] = settings[first].get(name, default)
    return values


def _jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump()
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def _connection(host: RawHost, out: _Collector, root: Path) -> dict[str, Any]:
    data: dict[str, Any] = {"ssh_strict_host_key_checking": "yes"}
    for var, (key, kind) in CONNECTION_VARS.items():
        if var not in host.vars:
            continue
        value, (file, line) = host.vars[var], host.origins.get(var, (host.source, None))  # this host's own
        if kind is int:
            if isinstance(value, bool) or not ascii_digits(str(value)) or not 0 < int(value) < 65536:
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
                value = kind(str(value))
            except ValueError as exc:
                out.add(file, var, str(exc), line)
                continue
        data[key] = value
    for var, key in (("kiln_ssh_known_hosts_file", "ssh_known_hosts_file"),
                     ("kiln_ssh_config_file", "ssh_config_file")):
        if var in host.vars:
            # relative to the inventory directory, wherever kiln runs (ssh alone would take the working directory)
            data[key] = str(root / str(host.vars[var]))
    config = data.get("ssh_config_file")
    if config:
        why = _ssh_config_problem(config)
        if why:
            file, line = host.origins.get("kiln_ssh_config_file", (host.source, None))
            out.add(file, "kiln_ssh_config_file", why, line)
    return data


def _ssh_config_problem(path: str) -> str | None:
    """Hosts mostly share one ssh_config: it is read once while it is unchanged."""
    try:
        info = os.stat(path)
    except OSError:
        return ssh_config.problem(path)
    return _ssh_config_read(path, info.st_mtime_ns, info.st_size)


@functools.lru_cache(maxsize=64)
def _ssh_config_read(path: str, mtime_ns: int, size: int) -> str | None:  # noqa: ARG001 - the cache's key
    return ssh_config.problem(path)


def _build_host(host: RawHost, s: dict[str, Any], out: _Collector, root: Path) -> model.Host:
    conn = _connection(host, out, root)
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


def _with_node_type(host: model.Host, type_of: dict[str, str]) -> model.Host:
    from dataclasses import replace

    return replace(host, node_type=type_of[host.name]) if host.name in type_of else host
