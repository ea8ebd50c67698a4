"""Load an Ansible inventory directory with ansible-core: hosts, groups and resolved variables.

Ansible does the parts operators rely on (YAML and INI sources, group_vars/host_vars files and
directories, host ranges, precedence); kiln then renders ``{{ }}`` and turns Ansible's tagged values
into plain Python types, remembering which file each variable came from so errors can name it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kiln.inventory.errors import InventoryError
from kiln.inventory.files import InventoryFiles, read_inventory_files

# Ansible reads its settings at import time: parse only YAML and INI, and fail on an unparsable source
# instead of warning and going on with an empty inventory.
os.environ.setdefault("ANSIBLE_INVENTORY_ENABLED", "yaml,ini")
os.environ["ANSIBLE_INVENTORY_UNPARSED_FAILED"] = "True"
os.environ["ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED"] = "True"
os.environ.setdefault("ANSIBLE_LOCALHOST_WARNING", "False")
os.environ.setdefault("ANSIBLE_HOST_PATTERN_MISMATCH", "ignore")

# Variables Ansible adds to every host; they are not the operator's.
_MAGIC = frozenset({
    "inventory_hostname", "inventory_hostname_short", "inventory_file", "inventory_dir", "groups",
    "group_names", "omit", "playbook_dir", "ansible_playbook_python", "ansible_config_file",
    "ansible_version", "ansible_check_mode", "ansible_diff_mode", "ansible_forks",
    "ansible_inventory_sources", "ansible_skip_tags", "ansible_run_tags", "ansible_verbosity",
    "ansible_search_path", "ansible_collection_name", "ansible_play_name", "hostvars",
    "environment", "role_names", "play_hosts", "ansible_play_hosts", "ansible_play_batch",
    "ansible_play_hosts_all", "ansible_play_role_names", "ansible_role_names", "ansible_dependent_role_names",
    "ansible_facts",
})


@dataclass
class RawHost:
    """One host as Ansible resolves it, with plain values and where each top-level variable came from."""

    name: str
    groups: list[str]
    vars: dict[str, Any]
    origins: dict[str, tuple[str, int | None]]
    source: str


@dataclass
class RawInventory:
    root: Path
    files: InventoryFiles
    hosts: dict[str, RawHost] = field(default_factory=dict)
    # group -> every host in it (descendants included), in inventory order
    groups: dict[str, list[str]] = field(default_factory=dict)
    # group -> child groups
    children: dict[str, list[str]] = field(default_factory=dict)
    # group -> variables set on the group itself in a hosts file
    group_inline_vars: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: list[InventoryError] = field(default_factory=list)


def plain(value: Any) -> Any:
    """Ansible's tagged values as plain Python types (str, int, float, bool, None, list, dict)."""
    if isinstance(value, bool) or value is None:
        return value if value is None else bool(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, dict):
        return {str.__str__(str(k)): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v) for v in value]
    return str(value)


def _origin(value: Any, root: Path, default: str) -> tuple[str, int | None]:
    from ansible.module_utils._internal._datatag import AnsibleTagHelper

    for tag in AnsibleTagHelper.tags(value):
        path = getattr(tag, "path", None)
        if path:
            return os.path.relpath(path, root), getattr(tag, "line_num", None)
    return default, None


def _needs_template(value: Any) -> bool:
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, dict):
        return any(_needs_template(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_needs_template(v) for v in value)
    return False


def load_raw(root: Path | str) -> RawInventory:
    """Read ``root`` with ansible-core. Errors come back in ``.errors``; nothing is raised for bad input."""
    root = Path(root).resolve()
    files = read_inventory_files(root)
    raw = RawInventory(root=root, files=files, errors=list(files.errors))
    if raw.errors:
        return raw  # Ansible would stop on the same files with a less precise message.

    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar
    from ansible.vars.manager import VariableManager

    loader = DataLoader()
    try:
        inventory = InventoryManager(loader=loader, sources=[str(root)])
        variables = VariableManager(loader=loader, inventory=inventory)
    except AnsibleError as exc:
        raw.errors.append(InventoryError(files.sources[0], "-", _ansible_message(exc)))
        return raw

    for name, group in inventory.groups.items():
        if name == "all":
            continue
        raw.groups[name] = [h.name for h in group.get_hosts()]
        raw.children[name] = [c.name for c in group.child_groups]
        raw.group_inline_vars[name] = plain(group.get_vars())

    templar = _caching_templar(Templar(loader=loader))
    default_source = files.sources[0]
    for host in inventory.get_hosts():
        name = str(host.name)
        source = files.host_source.get(name, default_source)
        try:
            resolved = variables.get_vars(host=host, include_hostvars=False)
        except AnsibleError as exc:
            raw.errors.append(InventoryError(source, name, _ansible_message(exc)))
            continue
        own = {str.__str__(k): v for k, v in resolved.items() if k not in _MAGIC}
        origins = {k: _origin(v, root, source) for k, v in own.items()}
        values: dict[str, Any] = {}
        for key, value in own.items():
            if _needs_template(value):
                templar.available_variables = resolved
                try:
                    value = templar.template(value)
                except AnsibleError as exc:
                    file, line = origins[key]
                    raw.errors.append(InventoryError(file, key, "cannot render template: "
                                                     f"{_ansible_message(exc)}", line))
                    continue
            values[key] = plain(value)
        groups = [g.name for g in host.get_groups() if g.name != "all"]
        raw.hosts[name] = RawHost(name, groups, values, origins, source)
    return raw


def _caching_templar(templar: Any) -> Any:
    """Compile each distinct template string once, not once per host.

    A range of 2,000 hosts shares one ``ansible_host: "10.0.{{ ... }}"``; ansible-core compiles it anew
    for every host (3 ms each). The compiled template does not depend on the variables, so it is reused.
    If ansible-core's internals change shape, templating still works, only slower.
    """
    engine = getattr(templar, "_engine", None)
    compile_template = getattr(engine, "_compile_template", None)
    if compile_template is None:
        return templar
    cache: dict[tuple[str, str], Any] = {}

    def cached(template: str, options: Any) -> Any:
        key = (str.__str__(template), repr(options))
        if key not in cache:
            cache[key] = compile_template(template, options)
        return cache[key]

    engine._compile_template = cached
    return templar


def _ansible_message(exc: Exception) -> str:
    text = getattr(exc, "message", None) or str(exc)
    return " ".join(str(text).split())[:400]
