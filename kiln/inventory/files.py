"""Read every file of an inventory directory before Ansible does, so that a broken file is reported
with its path and line instead of Ansible's generic "unable to parse" warning.

Pure file work: it returns the parsed content of each file and the errors found; it never connects
anywhere and never imports Ansible.
"""

from __future__ import annotations

import configparser
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kiln.inventory.errors import InventoryError

VARS_DIRS = ("group_vars", "host_vars")
VARS_EXTS = ("", ".yml", ".yaml", ".json")
# Ansible skips these in an inventory directory; kiln does the same.
IGNORED_EXTS = (".md", ".txt", ".rst", ".orig", ".cfg", ".retry", ".bak", ".swp", "~", ".pyc")

_RANGE = re.compile(r"\[([^\]]*)\]")


class _Loader(yaml.SafeLoader):
    """A safe loader that accepts Ansible's tags (``!vault``, ``!unsafe``) as plain values."""


def _tagged(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_mapping(node)


_Loader.add_multi_constructor("!", _tagged)


@dataclass
class InventoryFiles:
    """What was read: host sources (hosts.yml, hosts.ini) and vars files, keyed by relative path."""

    root: Path
    sources: list[str] = field(default_factory=list)
    group_vars: dict[str, dict[str, tuple[dict[str, Any], str]]] = field(default_factory=dict)
    host_vars: dict[str, dict[str, tuple[dict[str, Any], str]]] = field(default_factory=dict)
    host_source: dict[str, str] = field(default_factory=dict)
    errors: list[InventoryError] = field(default_factory=list)

    def group_defined(self, group: str) -> dict[str, tuple[Any, str]]:
        """Variables a group's own vars files set: name -> (value, file)."""
        out: dict[str, tuple[Any, str]] = {}
        for rel, (data, _) in sorted(self.group_vars.get(group, {}).items()):
            for key, value in data.items():
                out[key] = (value, rel)
        return out


def read_inventory_files(root: Path) -> InventoryFiles:
    """Read and parse every file kiln and Ansible would read under ``root``."""
    files = InventoryFiles(root=root)
    if not root.is_dir():
        files.errors.append(InventoryError(str(root), "-", "inventory directory not found: give -i DIR "
                                           "or set KILN_INVENTORY"))
        return files
    for entry in sorted(root.iterdir()):
        name = entry.name
        if name.startswith(".") or name.endswith(IGNORED_EXTS) or name in VARS_DIRS:
            continue
        if entry.is_file():
            files.sources.append(name)
            _read_source(files, entry)
    if not files.sources:
        files.errors.append(InventoryError(".", "-", f"no hosts file (hosts.yml or hosts.ini) in {root}"))
    for kind in VARS_DIRS:
        base = root / kind
        if base.is_dir():
            _read_vars_dir(files, base, kind)
    return files


def _rel(files: InventoryFiles, path: Path) -> str:
    return os.path.relpath(path, files.root)


def _read_text(files: InventoryFiles, path: Path) -> str | None:
    rel = _rel(files, path)
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        files.errors.append(InventoryError(rel, "-", f"file is not UTF-8 text (byte {exc.start}): "
                                           "save it as UTF-8"))
    except OSError as exc:
        files.errors.append(InventoryError(rel, "-", f"cannot read the file: {exc.strerror}"))
    return None


def _parse_yaml(files: InventoryFiles, path: Path, text: str) -> Any:
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        what = (exc.problem or "syntax error").strip()
        files.errors.append(InventoryError(_rel(files, path), "-", f"YAML syntax error: {what}", line))
    except yaml.YAMLError as exc:
        files.errors.append(InventoryError(_rel(files, path), "-", f"YAML error: {exc}"))
    return None


def _read_vars_dir(files: InventoryFiles, base: Path, kind: str) -> None:
    target = files.group_vars if kind == "group_vars" else files.host_vars
    for entry in sorted(base.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            owner = entry.name
            paths = sorted(p for p in entry.rglob("*") if p.is_file() and not p.name.startswith("."))
        else:
            owner, ext = os.path.splitext(entry.name)
            if ext not in VARS_EXTS:
                continue
            paths = [entry]
        for path in paths:
            if path.suffix not in VARS_EXTS:
                continue
            if not path.exists():
                files.errors.append(InventoryError(_rel(files, path), "-", "broken symbolic link"))
                continue
            text = _read_text(files, path)
            if text is None:
                continue
            data = _parse_yaml(files, path, text)
            if data is None:
                data = {}
            if not isinstance(data, dict):
                files.errors.append(InventoryError(_rel(files, path), "-", "a vars file must hold a "
                                                   f"mapping of variable names, not a {type(data).__name__}"))
                continue
            target.setdefault(owner, {})[_rel(files, path)] = (data, _rel(files, path))


def _read_source(files: InventoryFiles, path: Path) -> None:
    text = _read_text(files, path)
    if text is None:
        return
    rel = _rel(files, path)
    if path.suffix in (".yml", ".yaml", ".json"):
        data = _parse_yaml(files, path, text)
        if data is None:
            return
        if not isinstance(data, dict):
            files.errors.append(InventoryError(rel, "-", "a YAML inventory must be a mapping of groups"))
            return
        for group, body in data.items():
            _walk_yaml_group(files, rel, str(group), body)
    else:
        _walk_ini(files, rel, text)


def _walk_yaml_group(files: InventoryFiles, rel: str, group: str, body: Any) -> None:
    if body is None:
        return
    if not isinstance(body, dict):
        files.errors.append(InventoryError(rel, group, "a group must be a mapping with hosts, "
                                           "children or vars"))
        return
    unknown = set(body) - {"hosts", "children", "vars"}
    if unknown:
        files.errors.append(InventoryError(rel, f"{group}.{sorted(unknown)[0]}", "a group holds only "
                                           "'hosts', 'children' and 'vars'"))
    hosts = body.get("hosts") or {}
    if isinstance(hosts, dict):
        for pattern in hosts:
            _record_pattern(files, rel, f"{group}.hosts.{pattern}", str(pattern))
    children = body.get("children") or {}
    if isinstance(children, dict):
        for child, child_body in children.items():
            _walk_yaml_group(files, rel, str(child), child_body)


def _walk_ini(files: InventoryFiles, rel: str, text: str) -> None:
    section = "ungrouped"
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        if section.endswith((":vars", ":children")):
            continue
        pattern = line.split()[0]
        err = _record_pattern(files, rel, f"[{section}] {pattern}", pattern)
        if err:
            err.line = number  # type: ignore[misc]
    try:
        parser = configparser.ConfigParser(allow_no_value=True, delimiters=("=",), strict=False)
        parser.read_string("[ungrouped]\n" + text)
    except configparser.Error as exc:
        files.errors.append(InventoryError(rel, "-", f"INI syntax error: {exc.message.splitlines()[0]}"))


def _record_pattern(files: InventoryFiles, rel: str, key: str, pattern: str) -> InventoryError | None:
    try:
        names = expand_host_pattern(pattern)
    except ValueError as exc:
        err = InventoryError(rel, key, str(exc))
        files.errors.append(err)
        return err
    for name in names:
        files.host_source.setdefault(name, rel)
    return None


def expand_host_pattern(pattern: str) -> list[str]:
    """Expand Ansible's host ranges: ``gpu[001:004]``, ``gpu[1:9:2]``, ``rack[a:c]-n[1:2]``.

    Raises ValueError with a message naming the faulty part.
    """
    if pattern.count("[") != pattern.count("]"):
        raise ValueError(f"invalid host range {pattern!r}: unbalanced brackets")
    match = _RANGE.search(pattern)
    if not match:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end():]
    parts = match.group(1).split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"invalid host range {pattern!r}: write [start:end] or [start:end:step]")
    start, end = parts[0], parts[1]
    step = parts[2] if len(parts) == 3 else "1"
    if start.isdigit() and end.isdigit() and step.isdigit():
        lo, hi, st = int(start), int(end), int(step)
        width = len(start) if start.startswith("0") else 0
        values = [str(i).zfill(width) for i in range(lo, hi + 1, st)] if st > 0 else []
    elif len(start) == 1 and len(end) == 1 and start.isalpha() and end.isalpha() and step.isdigit():
        st = int(step)
        values = [chr(c) for c in range(ord(start), ord(end) + 1, st)] if st > 0 else []
    else:
        raise ValueError(f"invalid host range {pattern!r}: start, end and step must be numbers "
                         "(or single letters)")
    if not values:
        raise ValueError(f"invalid host range {pattern!r}: it expands to no hosts (start after end, "
                         "or step 0)")
    return [f"{head}{v}{rest}" for v in values for rest in expand_host_pattern(tail)]
