"""Read every file of an inventory directory before Ansible does, so that a broken file is reported
with its path and line instead of Ansible's generic "unable to parse" warning.

Pure file work: it returns the parsed content of each file and the errors found; it never connects
anywhere and never imports Ansible.
"""

from __future__ import annotations

import configparser
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kiln.inventory.errors import InventoryError
from kiln.inventory import yaml_reading
from kiln.inventory.formats import CONTROL, ascii_digits, check_hostname, read_by_kiln

VARS_DIRS = ("group_vars", "host_vars")
VARS_EXTS = ("", ".yml", ".yaml", ".json")
# Ansible skips these in an inventory directory; kiln does the same.
IGNORED_EXTS = (".md", ".txt", ".rst", ".orig", ".cfg", ".retry", ".bak", ".swp", "~", ".pyc")

_RANGE = re.compile(r"\[([^\]]*)\]", re.ASCII)

# Limits that keep a hostile or broken inventory from costing minutes or gigabytes before it is refused.
MAX_FILE_BYTES = 8 * 1024 * 1024  # one hosts or vars file
MAX_FILES = 10_000  # vars files under group_vars/ and host_vars/
MAX_HOSTS = 100_000  # hosts after expanding every range


@dataclass
class InventoryFiles:
    """What was read: host sources (hosts.yml, hosts.ini) and vars files, keyed by relative path."""

    root: Path
    sources: list[str] = field(default_factory=list)
    group_vars: dict[str, dict[str, tuple[dict[str, Any], str]]] = field(default_factory=dict)
    host_vars: dict[str, dict[str, tuple[dict[str, Any], str]]] = field(default_factory=dict)
    host_source: dict[str, str] = field(default_factory=dict)
    # host -> the line of its hosts file that names it (or its range)
    host_line: dict[str, int | None] = field(default_factory=dict)
    # group -> (hosts file, line) where it is first named
    group_at: dict[str, tuple[str, int | None]] = field(default_factory=dict)
    # vars file -> each top-level key's line (for values Ansible gives no origin: numbers, booleans)
    key_lines: dict[str, dict[str, int]] = field(default_factory=dict)
    # group -> its child groups, each with the hosts file and line that made it one
    children: dict[str, dict[str, tuple[str, int | None]]] = field(default_factory=dict)
    # vars files encrypted whole with Ansible Vault (Ansible decrypts them, given the password)
    encrypted: list[str] = field(default_factory=list)
    errors: list[InventoryError] = field(default_factory=list)
    # absolute path -> the data of a YAML file kiln parsed that uses none of Ansible's tags: handed to
    # Ansible instead of a second parse (kiln/inventory/loader.py), which took 7 s for 20,000 teams
    parsed: dict[str, Any] = field(default_factory=dict)

    def vars_origin(self, host: str, groups: list[str], key: str) -> tuple[str, int | None] | None:
        """The vars file (and line) that gives ``key`` to ``host``: its host_vars, else its groups' from
        the most specific (``groups`` in that order); None when no vars file sets it."""
        for files in [self.host_vars.get(host, {})] + [self.group_vars.get(g, {}) for g in groups]:
            for rel, (data, _) in sorted(files.items(), reverse=True):
                if key in data:
                    return rel, self.key_lines.get(rel, {}).get(key)
        return None

    def group_defined(self, group: str) -> dict[str, tuple[Any, str]]:
        """Variables a group's own vars files set: name -> (value, file)."""
        out: dict[str, tuple[Any, str]] = {}
        for rel, (data, _) in sorted(self.group_vars.get(group, {}).items()):
            for key, value in data.items():
                out[key] = (value, rel)
        return out


def read_inventory_files(root: Path) -> InventoryFiles:
    """Read and parse every file kiln and Ansible would read under ``root``: its hosts files at any
    depth (Ansible reads a directory's subdirectories as sources too), then group_vars/ and host_vars/
    as Ansible's host_group_vars finds them. Every limit (size, FIFOs and devices, file count) holds for
    every file read, at any depth; a link whose target is outside the inventory is refused."""
    files = InventoryFiles(root=root)
    if not root.is_dir():
        files.errors.append(InventoryError(str(root), "-", "inventory directory not found: give -i DIR "
                                           "or set KILN_INVENTORY"))
        return files
    _read_sources(files, root, set())
    _check_group_cycles(files)
    if not files.sources and not files.errors:
        files.errors.append(InventoryError(".", "-", f"no hosts file (hosts.yml or hosts.ini) in {root}"))
    for kind in VARS_DIRS:
        base = root / kind
        if base.is_dir() and not _outside(files, base):
            _read_vars_dir(files, base, kind)
    return files


def _check_group_cycles(files: InventoryFiles) -> None:
    """A group that contains itself through its children is an error naming the child entry that closes
    the loop (Ansible says only "recursive dependency loop", with no file or line)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(group: str, path: list[str]) -> bool:
        state[group] = 1
        for child, (rel, line) in files.children.get(group, {}).items():
            if state.get(child) == 1:
                loop = " -> ".join(path[path.index(child):] + [group, child]) if child in path else f"{group} -> {child}"
                files.errors.append(InventoryError(rel, f"{group}.children.{child}", f"group {child!r} contains "
                                                   f"{group!r}, which lists it as a child: a loop ({loop}); remove "
                                                   "one of the two", line))
                return True
            if state.get(child) is None and visit(child, path + [group]):
                return True
        state[group] = 2
        return False

    for group in list(files.children):
        if state.get(group) is None and visit(group, []):
            return


def _outside(files: InventoryFiles, path: Path) -> bool:
    """A link under the inventory whose target is outside it: refused (an error is recorded)."""
    if not path.is_symlink():
        return False
    target = path.resolve()
    if target.is_relative_to(files.root.resolve()):
        return False
    files.errors.append(InventoryError(_rel(files, path), "-", f"links to {target}, outside the inventory: kiln "
                                       "reads only the inventory's own files; copy what it needs into it"))
    return True


def _read_sources(files: InventoryFiles, directory: Path, seen: set[Path]) -> None:
    """Hosts files in ``directory`` and, as Ansible does, in its subdirectories (not group_vars/,
    host_vars/, vars_plugins/, hidden or ignored names); a directory reached twice through links is
    read once."""
    real = directory.resolve()
    if real in seen:
        return
    seen.add(real)
    for entry in sorted(directory.iterdir()):
        name = entry.name
        if name.startswith(".") or name.endswith(IGNORED_EXTS) or name in (*VARS_DIRS, "vars_plugins"):
            continue
        if _outside(files, entry):
            continue
        if entry.is_dir():
            _read_sources(files, entry, seen)
            continue
        if len(files.sources) >= MAX_FILES:
            files.errors.append(InventoryError(_rel(files, directory), "-", f"holds more than {MAX_FILES} hosts files"))
            return
        files.sources.append(_rel(files, entry))
        _read_source(files, entry)


def _rel(files: InventoryFiles, path: Path) -> str:
    return os.path.relpath(path, files.root)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def _read_text(files: InventoryFiles, path: Path) -> str | None:
    """The file's text; only regular files (a link is followed to see what it names) of at most
    MAX_FILE_BYTES: a FIFO would hang the read, /dev/zero would never end."""
    rel = _rel(files, path)
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            files.errors.append(InventoryError(rel, "-", f"{'links to ' if path.is_symlink() else 'is '}"
                                               f"{_kind(info.st_mode)}, not a regular file: inventory files are "
                                               "plain files"))
            return None
        if info.st_size > MAX_FILE_BYTES:
            files.errors.append(InventoryError(rel, "-", f"file is {info.st_size} bytes, over kiln's limit of "
                                               f"{MAX_FILE_BYTES} for one inventory file"))
            return None
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            files.errors.append(InventoryError(rel, "-", f"file grew over kiln's limit of {MAX_FILE_BYTES} bytes "
                                               "while it was read"))
            return None
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        files.errors.append(InventoryError(rel, "-", f"file is not UTF-8 text (byte {exc.start}): "
                                           "save it as UTF-8"))
    except OSError as exc:
        files.errors.append(InventoryError(rel, "-", f"cannot read the file: {exc.strerror}"))
    return None


def _parse_yaml(files: InventoryFiles, path: Path, text: str, hosts_file: bool = False) -> yaml_reading.Document | None:
    """The parsed document; its problems (a key given twice, a surprising number in a value kiln reads)
    are reported as errors of this file. None when it does not parse."""
    try:
        doc = yaml_reading.load(text, read_by_kiln, hosts_file=hosts_file)
        for p in doc.problems:
            files.errors.append(InventoryError(_rel(files, path), p.key, p.message, p.line))
        if not doc.tags and not hosts_file and doc.template_lines is not None:
            files.parsed[str(path.resolve())] = (doc.data, doc.template_lines)  # a hosts file keeps Ansible's
        return doc
    except RecursionError:
        files.errors.append(InventoryError(_rel(files, path), "-", "YAML error: nested too deeply"))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        what = (exc.problem or "syntax error").strip()
        files.errors.append(InventoryError(_rel(files, path), "-", f"YAML syntax error: {what}", line))
    except yaml.YAMLError as exc:
        files.errors.append(InventoryError(_rel(files, path), "-", f"YAML error: {exc}"))
    return None


def _vars_paths(files: InventoryFiles, entry: Path) -> list[Path] | None:
    """The files of a group_vars/host_vars directory entry that is itself a directory, at any depth;
    links inside the inventory are followed (as Ansible follows them), links out of it refused."""
    paths: list[Path] = []
    seen: set[Path] = set()
    stack = [entry]
    while stack:
        directory = stack.pop()
        if directory.resolve() in seen:
            continue
        seen.add(directory.resolve())
        for item in sorted(directory.iterdir()):
            if item.name.startswith(".") or _outside(files, item):
                continue
            if item.is_dir():
                stack.append(item)
            else:
                paths.append(item)
            if len(paths) > MAX_FILES:
                files.errors.append(InventoryError(_rel(files, entry), "-", f"holds more than {MAX_FILES} files"))
                return None
    return sorted(paths)


def _read_vars_dir(files: InventoryFiles, base: Path, kind: str) -> None:
    """Each owner's vars as Ansible's host_group_vars finds them: for a name X the first of X (a
    directory, or a file), X.yml, X.yaml, X.json that exists is read and the others never are; a
    group_vars file of a group no hosts file names is not read (Ansible never reads it)."""
    target = files.group_vars if kind == "group_vars" else files.host_vars
    chosen: dict[str, tuple[int, Path]] = {}
    for entry in sorted(base.iterdir()):
        if entry.name.startswith("."):
            continue
        owner, ext = (entry.name, "") if entry.is_dir() else os.path.splitext(entry.name)
        if ext not in VARS_EXTS:
            continue
        rank = VARS_EXTS.index(ext)  # "" (a directory or a bare file) first, then .yml, .yaml, .json
        if owner not in chosen or rank < chosen[owner][0]:
            chosen[owner] = (rank, entry)
    known_groups = set(files.group_at) | {"all", "ungrouped"}
    for owner, (_, entry) in sorted(chosen.items()):
        if kind == "group_vars" and owner not in known_groups:
            continue
        if kind == "host_vars" and owner not in files.host_source:
            continue
        if _outside(files, entry):
            continue
        if entry.is_dir():
            paths = _vars_paths(files, entry)
            if paths is None:
                return
        else:
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
            if text.startswith("$ANSIBLE_VAULT;"):
                files.encrypted.append(_rel(files, path))
                continue
            doc = _parse_yaml(files, path, text)
            if doc is None:
                continue
            data = {} if doc.data is None else doc.data
            if not isinstance(data, dict):
                files.errors.append(InventoryError(_rel(files, path), "-", "a vars file must hold a "
                                                   f"mapping of variable names, not a {type(data).__name__}"))
                continue
            target.setdefault(owner, {})[_rel(files, path)] = (data, _rel(files, path))
            files.key_lines[_rel(files, path)] = doc.key_lines


def _read_source(files: InventoryFiles, path: Path) -> None:
    text = _read_text(files, path)
    if text is None:
        return
    rel = _rel(files, path)
    if path.suffix in (".yml", ".yaml", ".json"):
        doc = _parse_yaml(files, path, text, hosts_file=True)
        if doc is None or doc.data is None:
            return
        if not isinstance(doc.data, dict):
            files.errors.append(InventoryError(rel, "-", "a YAML inventory must be a mapping of groups"))
            return
        for group, body in doc.data.items():
            _walk_yaml_group(files, rel, doc.key_lines, str(group), body)
    else:
        _walk_ini(files, rel, text)


def _walk_yaml_group(files: InventoryFiles, rel: str, lines: dict[str, int], group: str, body: Any) -> None:
    """Record the hosts of ``group`` and its children; ``lines``: each key's first line in the file."""
    files.group_at.setdefault(group, (rel, lines.get(group)))
    if body is None:
        return
    if not isinstance(body, dict):
        files.errors.append(InventoryError(rel, group, "a group must be a mapping with hosts, "
                                           "children or vars", lines.get(group)))
        return
    unknown = set(body) - {"hosts", "children", "vars"}
    if unknown:
        files.errors.append(InventoryError(rel, f"{group}.{sorted(unknown)[0]}", "a group holds only "
                                           "'hosts', 'children' and 'vars'", lines.get(group)))
    hosts = body.get("hosts") or {}
    if isinstance(hosts, dict):
        for pattern in hosts:
            _record_pattern(files, rel, f"{group}.hosts.{pattern}", str(pattern), lines.get(str(pattern)))
    children = body.get("children") or {}
    if isinstance(children, dict):
        for child, child_body in children.items():
            files.children.setdefault(group, {}).setdefault(str(child), (rel, lines.get(group)))
            _walk_yaml_group(files, rel, lines, str(child), child_body)


def _walk_ini(files: InventoryFiles, rel: str, text: str) -> None:
    section = "ungrouped"
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            files.group_at.setdefault(section.split(":")[0], (rel, number))
            continue
        if section.endswith(":vars"):
            continue
        if section.endswith(":children"):
            files.group_at.setdefault(line.split()[0], (rel, number))
            files.children.setdefault(section.rsplit(":", 1)[0], {}).setdefault(line.split()[0], (rel, number))
            continue
        pattern = line.split()[0]
        _record_pattern(files, rel, f"[{section}] {pattern}", pattern, number)
    try:
        parser = configparser.ConfigParser(allow_no_value=True, delimiters=("=",), strict=False)
        parser.read_string("[ungrouped]\n" + text)
    except configparser.Error as exc:
        files.errors.append(InventoryError(rel, "-", f"INI syntax error: {exc.message.splitlines()[0]}"))


def _record_pattern(files: InventoryFiles, rel: str, key: str, pattern: str, line: int | None) -> None:
    control = CONTROL.search(pattern)
    if control:
        files.errors.append(InventoryError(rel, key, f"host name holds the control character {control.group()!r}",
                                           line))
        return
    try:
        count = count_host_pattern(pattern)
        if len(files.host_source) + count > MAX_HOSTS:
            raise ValueError(f"host range {pattern!r} would make the inventory over {MAX_HOSTS} hosts "
                             f"({count} here): split the inventory")
        names = expand_host_pattern(pattern)
    except ValueError as exc:
        files.errors.append(InventoryError(rel, key, str(exc), line))
        return
    for name in names:
        try:
            check_hostname(name)
        except ValueError as exc:
            files.errors.append(InventoryError(rel, key, str(exc), line))
            return
        files.host_source.setdefault(name, rel)
        files.host_line.setdefault(name, line)


def _range_parts(pattern: str) -> tuple[str, list[str], str] | None:
    """(head, the range's values, tail) of the first range in ``pattern``; None without one."""
    if pattern.count("[") != pattern.count("]"):
        raise ValueError(f"invalid host range {pattern!r}: unbalanced brackets")
    match = _RANGE.search(pattern)
    if not match:
        return None
    parts = match.group(1).split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"invalid host range {pattern!r}: write [start:end] or [start:end:step]")
    start, end = parts[0], parts[1]
    step = parts[2] if len(parts) == 3 else "1"
    if ascii_digits(start) and ascii_digits(end) and ascii_digits(step) and len(start) <= 9 and len(end) <= 9:
        lo, hi, st = int(start), int(end), int(step)
        width = len(start) if start.startswith("0") else 0
        values = range(lo, hi + 1, st) if st > 0 else range(0)
        render = lambda i: str(i).zfill(width)  # noqa: E731
    elif len(start) == 1 and len(end) == 1 and start.isascii() and end.isascii() and start.isalpha() and end.isalpha() and ascii_digits(step):
        st = int(step)
        values = range(ord(start), ord(end) + 1, st) if st > 0 else range(0)
        render = chr
    else:
        raise ValueError(f"invalid host range {pattern!r}: start, end and step must be numbers of at most 9 "
                         "digits (or single letters)")
    if not len(values):
        raise ValueError(f"invalid host range {pattern!r}: it expands to no hosts (start after end, "
                         "or step 0)")
    return pattern[: match.start()], _LazyValues(values, render), pattern[match.end():]


class _LazyValues:
    """A range's host name parts, made only when iterated: counting them costs nothing."""

    def __init__(self, values: range, render: Any) -> None:
        self.values, self.render = values, render

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self):
        return (self.render(v) for v in self.values)


def count_host_pattern(pattern: str) -> int:
    """How many hosts ``pattern`` expands to, without expanding it."""
    parts = _range_parts(pattern)
    if parts is None:
        return 1
    head, values, tail = parts
    return len(values) * count_host_pattern(tail)


def expand_host_pattern(pattern: str) -> list[str]:
    """Expand Ansible's host ranges: ``gpu[001:004]``, ``gpu[1:9:2]``, ``rack[a:c]-n[1:2]``.

    Raises ValueError with a message naming the faulty part.
    """
    parts = _range_parts(pattern)
    if parts is None:
        return [pattern]
    head, values, tail = parts
    rests = expand_host_pattern(tail)
    return [f"{head}{v}{rest}" for v in values for rest in rests]
