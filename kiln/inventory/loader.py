"""Load an Ansible inventory directory with ansible-core: hosts, groups and resolved variables.

Ansible does the parts operators rely on (YAML and INI sources, group_vars/host_vars files and
directories, host ranges, precedence); kiln then renders ``{{ }}`` and turns Ansible's tagged values
into plain Python types, remembering which file each variable came from so errors can name it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kiln.inventory.errors import InventoryError
from kiln.inventory import template_policy
from kiln.inventory.formats import KILN_CONNECTION_VARS, KILN_PREFIX, read_by_kiln  # noqa: F401 - kiln's API
from kiln.inventory.files import InventoryFiles, read_inventory_files

# ansible-core is configured by kiln alone, never by what sits beside the inventory: Ansible reads an
# ansible.cfg from ANSIBLE_CONFIG, else the working directory, else ~ and /etc, and takes ANSIBLE_*
# variables over any file, and such a file or variable can name plugin directories whose Python runs
# while the inventory is read (a branch's vars plugin during `kiln inventory validate`). So every
# ANSIBLE_* variable but the vault password file is dropped and ANSIBLE_CONFIG names kiln's own file
# (kiln/inventory/ansible.cfg), before Ansible is imported (it reads its settings then).
KEPT_ANSIBLE_VARIABLES = frozenset({"ANSIBLE_VAULT_PASSWORD_FILE"})
for _name in [n for n in os.environ if n.startswith("ANSIBLE_") and n not in KEPT_ANSIBLE_VARIABLES]:
    del os.environ[_name]
os.environ["ANSIBLE_CONFIG"] = str(Path(__file__).with_name("ansible.cfg"))
# Parse only YAML and INI, and fail on an unparsable source instead of warning and going on with an
# empty inventory (kiln's ansible.cfg says the same).
os.environ["ANSIBLE_INVENTORY_ENABLED"] = "yaml,ini"
os.environ["ANSIBLE_INVENTORY_UNPARSED_FAILED"] = "True"
os.environ["ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED"] = "True"
os.environ["ANSIBLE_LOCALHOST_WARNING"] = "False"
os.environ["ANSIBLE_HOST_PATTERN_MISMATCH"] = "ignore"
# Group names other tools use (kube-master) are fine for kiln: no warning about them on every run.
os.environ["ANSIBLE_TRANSFORM_INVALID_GROUP_CHARS"] = "ignore"
# An inventory has no gathered facts: not injecting them spares a per-host scan of Ansible's plugin
# directories (a fifth of reading 10,000 hosts).
os.environ["ANSIBLE_INJECT_FACT_VARS"] = "False"

@dataclass
class RawHost:
    """One host as Ansible resolves it: the variables kiln reads, as plain values, and where each came from."""

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

    def origin(self, key: str, host: str | None = None, default: str | None = None) -> tuple[str, int | None]:
        """The file and line that set ``key``: for ``host`` (else its hosts file), or, for a cluster-wide
        setting, wherever a host got it from (else ``default``, else the first hosts file)."""
        if host is not None:
            raw = self.hosts[host]
            return raw.origins.get(key, (raw.source, self.files.host_line.get(host)))
        for raw in self.hosts.values():
            if key in raw.origins:
                return raw.origins[key]
        return default or (self.files.sources[0] if self.files.sources else "."), None


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


def _origin(value: Any, root: Path, default: str, relative: dict[str, str]) -> tuple[str, int | None]:
    """The file (relative to ``root``; ``relative`` caches them) and line Ansible tagged ``value`` with."""
    from ansible.module_utils._internal._datatag import AnsibleTagHelper

    for tag in AnsibleTagHelper.tags(value):
        path = getattr(tag, "path", None)
        if path:
            if path not in relative:
                relative[path] = os.path.relpath(path, root)
            return relative[path], getattr(tag, "line_num", None)
    return default, None


def _needs_template(value: Any) -> bool:
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, dict):
        return any(_needs_template(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_needs_template(v) for v in value)
    return False


def load_raw(root: Path | str, vault_password_file: str | None = None) -> RawInventory:
    """Read ``root`` with ansible-core. Errors come back in ``.errors``; nothing is raised for bad input.

    Only the inventory directory's own group_vars/host_vars are read (never the current directory's).
    Only the variables kiln reads are rendered, with lookups refused (they run commands and read files
    on this machine); Ansible Vault values are decrypted with the password file given here or in
    ANSIBLE_VAULT_PASSWORD_FILE, and only when kiln reads them."""
    root = Path(root).resolve()
    files = read_inventory_files(root)
    raw = RawInventory(root=root, files=files, errors=list(files.errors))
    if raw.errors:
        return raw  # Ansible would stop on the same files with a less precise message.
    password_file = vault_password_file or os.environ.get("ANSIBLE_VAULT_PASSWORD_FILE") or None
    if files.encrypted and not password_file:
        for rel in files.encrypted:
            raw.errors.append(InventoryError(rel, "-", "the whole file is encrypted with Ansible Vault: give its "
                                             "password with --vault-password-file or ANSIBLE_VAULT_PASSWORD_FILE"))
        return raw

    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.template import Templar
    from ansible.vars.manager import VariableManager

    loader = _uncopied_loader(files.parsed)
    loader.set_basedir(str(root))  # not the current directory: its group_vars/ are not this inventory's
    secrets: list = []
    if password_file:
        secret, error = _vault_secret(loader, password_file)
        if error:
            raw.errors.append(InventoryError(str(password_file), "-", error))
            return raw
        secrets = [("default", secret)]
        loader.set_vault_secrets(secrets)
        undecryptable = _undecryptable(root, files.encrypted, secrets)
        if undecryptable:
            raw.errors += undecryptable
            return raw
    try:
        with _lookups_refused(), _vault_secrets(secrets), _group_vars_read_once():
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
        raw.group_inline_vars[name] = {k: _plain_or_none(v) for k, v in group.get_vars().items()
                                       if read_by_kiln(str(k))}

    templar = _caching_templar(Templar(loader=loader))
    default_source = files.sources[0]
    relative: dict[str, str] = {}
    # id(Ansible's value) -> (the value, kept alive so its id is not reused; its plain form, or None when
    # it is a template; its file and line): hosts that read a value from one group_vars file get the
    # same object from Ansible, and the same plain object here (kiln.inventory.validate checks it once).
    shared: dict[int, tuple[Any, Any, tuple[str, int | None]]] = {}
    untagged: dict[tuple, tuple[str, int | None]] = {}  # (host with host_vars, groups, key) -> origin
    with _lookups_refused(), _vault_secrets(secrets), _group_vars_read_once():
        for host in inventory.get_hosts():
            name = str(host.name)
            source = files.host_source.get(name, default_source)
            try:
                resolved = variables.get_vars(host=host, include_hostvars=False)
            except AnsibleError as exc:
                raw.errors.append(InventoryError(source, name, _ansible_message(exc), files.host_line.get(name)))
                continue
            origins: dict[str, tuple[str, int | None]] = {}
            values: dict[str, Any] = {}
            groups = None  # the host's groups, most specific first, once a value needs them
            for key, value in resolved.items():
                if not read_by_kiln(str(key)):
                    continue
                key = str.__str__(key)
                known = shared.get(id(value))
                if known is None or known[0] is not value:
                    known = (value, _Template if _needs_template(value) else _plain_or_error(value),
                             _origin(value, root, "", relative))
                    shared[id(value)] = known
                if known[2][0]:
                    origins[key] = file, line = known[2]
                else:  # Ansible tags strings only: a number or boolean is found in the vars files kiln read
                    if groups is None:
                        groups = tuple(g.name for g in sorted(host.get_groups(), key=lambda g: g.depth, reverse=True))
                    where = (name if name in files.host_vars else None, groups, key)
                    if where not in untagged:
                        untagged[where] = files.vars_origin(name, list(groups), key) or (source, None)
                    origins[key] = file, line = untagged[where]
                try:
                    if known[1] is _Template:
                        templar.available_variables = resolved
                        with template_policy.bounded_render():
                            values[key] = plain(templar.template(value))
                    elif isinstance(known[1], Exception):
                        raise known[1]
                    else:
                        values[key] = known[1]
                except (AnsibleError, ReferenceError, template_policy.TemplateRefused, template_policy.RenderBound) as exc:
                    message = template_policy.why_refused(exc) or _ansible_message(exc)
                    if "vault" in message.lower() and not password_file:
                        message = ("the value is encrypted with Ansible Vault and kiln reads it: give the password "
                                   "with --vault-password-file or ANSIBLE_VAULT_PASSWORD_FILE")
                    else:
                        message = f"cannot render template: {message}"
                    raw.errors.append(InventoryError(file, key, message, line))
            groups = [g.name for g in host.get_groups() if g.name != "all"]
            raw.hosts[name] = RawHost(name, groups, values, origins, source)
    return raw


class _Template:
    """Marks a value that is a template: rendered per host, never shared."""


def _uncopied_loader(parsed: dict[str, Any] | None = None) -> Any:
    """Ansible's DataLoader without the deep copy of a file it did not cache (``cache='none'``, as the
    YAML inventory plugin reads hosts files): nothing else holds that data, and copying a 10,000-host
    file took a quarter of reading it. A vars file kiln has parsed already (``parsed``: absolute path ->
    its data and the lines of its template strings; files without Ansible's tags only) is handed over as Ansible's own parse would give it: strings
    that hold template syntax trusted as templates where Ansible trusts the file, everything else plain
    (Ansible's parse of a 20,000-team file took 7 s, kiln's 3 s)."""
    from ansible.parsing.dataloader import DataLoader

    class UncopiedLoader(DataLoader):
        def load_from_file(self, file_name: str, cache: str = "all", unsafe: bool = False, **kwargs: Any) -> Any:
            path = str(Path(self.path_dwim(file_name)).resolve())
            if parsed is not None and path in parsed and not kwargs.get("json_only"):
                data, lines = parsed[path]
                return _as_ansible(data, lines, path, bool(kwargs.get("trusted_as_template")))
            return super().load_from_file(file_name, cache=cache, unsafe=unsafe or cache == "none", **kwargs)

    return UncopiedLoader()


TEMPLATE_MARKS = ("{{", "{%", "{#")


def _as_ansible(data: Any, lines: dict[int, int], path: str, trusted: bool) -> Any:
    """``data`` as Ansible's YAML loader makes it: a new copy whose strings with template syntax carry
    Ansible's TrustedAsTemplate tag and their origin (file and line: ``lines``, by id() of the string)
    when ``trusted``."""
    from ansible._internal._datatag._tags import Origin, TrustedAsTemplate
    from ansible.module_utils._internal._datatag import AnsibleTagHelper

    trust = TrustedAsTemplate()

    def convert(value: Any) -> Any:
        if isinstance(value, str):
            if trusted and "{" in value and any(m in value for m in TEMPLATE_MARKS):
                return AnsibleTagHelper.tag(value, [Origin(path=path, line_num=lines.get(id(value)) or 1), trust])
            return value
        if isinstance(value, dict):
            return {convert(k): convert(v) for k, v in value.items()}
        if isinstance(value, list):
            return [convert(v) for v in value]
        return value

    return convert(data)


def _plain_or_error(value: Any) -> Any:
    """``plain(value)``, or the error reading it raised (an Ansible Vault value without its password)."""
    from ansible.errors import AnsibleError

    try:
        return plain(value)
    except (AnsibleError, ReferenceError) as exc:
        return exc


def _plain_or_none(value: Any) -> Any:
    try:
        return plain(value)
    except Exception:  # noqa: BLE001 - an encrypted value without its password: checked per host
        return None


def _undecryptable(root: Path, encrypted: list[str], secrets: list) -> list[InventoryError]:
    """The whole-file vault files the password given does not open, each named (Ansible would report
    the failure against the first host that reads the file, in its hosts file)."""
    from ansible.errors import AnsibleError
    from ansible.parsing.vault import VaultLib

    vault = VaultLib(secrets)
    errors = []
    for rel in encrypted:
        try:
            vault.decrypt((root / rel).read_bytes())
        except (AnsibleError, OSError) as exc:
            errors.append(InventoryError(rel, "-", "the vault password given does not decrypt this file "
                                         f"({_ansible_message(exc)}): give the password it was encrypted with"))
    return errors


def _vault_secret(loader: Any, password_file: str) -> tuple[Any, str | None]:
    """The vault password read as ``ansible --vault-password-file`` reads it; (secret, error text)."""
    from ansible.errors import AnsibleError
    from ansible.parsing.vault import get_file_vault_secret

    try:
        secret = get_file_vault_secret(filename=password_file, vault_id="default", loader=loader)
        secret.load()
    except (AnsibleError, OSError) as exc:
        return None, f"cannot read the vault password: {_ansible_message(exc)}"
    return secret, None


@contextlib.contextmanager
def _vault_secrets(secrets: list) -> Iterator[None]:
    """Ansible decrypts inline vault values with process-wide secrets, settable once; kiln may read
    several inventories in one process, so it sets them for the time it reads one."""
    from ansible.parsing.vault import VaultSecretsContext

    saved = VaultSecretsContext._current
    VaultSecretsContext._current = VaultSecretsContext(secrets)
    try:
        yield
    finally:
        VaultSecretsContext._current = saved


class LookupRefused(Exception):
    pass


@contextlib.contextmanager
def _lookups_refused() -> Iterator[None]:
    """While kiln reads an inventory, ``lookup()``/``query()`` fail: they would run commands (``pipe``),
    read files or environment variables on the operator's machine, or write files (``password``)."""
    from ansible._internal._templating import _jinja_plugins
    from ansible.errors import AnsibleError

    class Refusing:
        def get(self, name: str, *args: Any, **kwargs: Any) -> Any:
            raise AnsibleError(f"lookup {name!r} refused: kiln never runs lookups while it reads an inventory; "
                               "write the value itself")

    saved = _jinja_plugins.lookup_loader
    _jinja_plugins.lookup_loader = Refusing()
    try:
        yield
    finally:
        _jinja_plugins.lookup_loader = saved


@contextlib.contextmanager
def _group_vars_read_once() -> Iterator[None]:
    """While kiln reads an inventory, each group's variables (its group_vars files and its inventory
    variables) are gathered once, not once per host of the group.

    ansible-core's VariableManager.get_vars looks every group of a host up again for each host: the
    vars plugins search group_vars/ for each (globbing per group and host) and merge what they find.
    The files do not change while an inventory is read, and Ansible's merge copies what it is given, so
    the result for one list of groups is kept and reused; a list with a host in it is never kept. If
    ansible-core's internals change shape, reading works as before, only slower."""
    from ansible.inventory.group import Group
    from ansible.inventory.host import Host
    from ansible.vars import manager

    names = ("get_vars_from_inventory_sources", "get_vars_from_path", "get_group_vars")
    saved = {n: getattr(manager, n, None) for n in names}
    if None in saved.values():
        yield
        return
    cache: dict[tuple, Any] = {}

    def host_vars_beside(paths: Any) -> bool:
        """Whether a host_vars directory sits in one of the inventory paths Ansible looks in."""
        key = ("host_vars", tuple(paths))
        if key not in cache:
            dirs = [p if os.path.isdir(p) else os.path.dirname(p) for p in paths if p]
            cache[key] = any(os.path.isdir(os.path.join(d, "host_vars")) for d in dirs)
        return cache[key]

    def remembering(name: str, function: Any, entities_at: int) -> Any:
        def call(*args: Any) -> Any:
            entities = args[entities_at]
            if not all(isinstance(e, Group) for e in entities):
                # a host's own files come only from host_vars/ (kiln enables no other vars plugin):
                # with none there, the per-host search of that directory (stat calls per host) is skipped
                if all(isinstance(e, Host) for e in entities) and name != names[2]:
                    paths = args[1] if isinstance(args[1], (list, tuple)) else [args[1]]
                    if not host_vars_beside(paths):
                        return {}
                return function(*args)
            key = (name, tuple(e.name for e in entities),
                   *(tuple(a) if isinstance(a, list) else a for i, a in enumerate(args) if i and i != entities_at))
            if key not in cache:
                cache[key] = function(*args)
            return cache[key]
        return call

    # (loader, sources, entities, stage), (loader, path, entities, stage), (groups)
    manager.get_vars_from_inventory_sources = remembering(names[0], saved[names[0]], 2)
    manager.get_vars_from_path = remembering(names[1], saved[names[1]], 2)
    manager.get_group_vars = remembering(names[2], saved[names[2]], 0)
    try:
        yield
    finally:
        for n, function in saved.items():
            setattr(manager, n, function)


def _caching_templar(templar: Any) -> Any:
    """Compile each distinct template string once, not once per host.

    A range of 2,000 hosts shares one ``ansible_host: "10.0.{{ ... }}"``; ansible-core compiles it anew
    for every host (3 ms each). The compiled template does not depend on the variables, so it is reused.
    Every template is checked against kiln's allow-list (template_policy) before it is compiled, the
    variables a kiln value names included. Where ansible-core's internals have another shape, kiln
    refuses to read rather than render unchecked templates.
    """
    engine = getattr(templar, "_engine", None)
    compile_template = getattr(engine, "_compile_template", None)
    if compile_template is None:
        raise RuntimeError("this ansible-core's templar has no _compile_template: kiln cannot check the templates "
                           "of an inventory before they render; install the ansible-core pyproject.toml names")
    cache: dict[tuple[str, str], Any] = {}

    def cached(template: str, options: Any) -> Any:
        key = (str.__str__(template), repr(options))
        if key not in cache:
            template_policy.check(key[0])
            cache[key] = compile_template(template, options)
        return cache[key]

    engine._compile_template = cached
    return templar


def _ansible_message(exc: Exception) -> str:
    text = getattr(exc, "message", None) or str(exc)
    return " ".join(str(text).split())[:400]
