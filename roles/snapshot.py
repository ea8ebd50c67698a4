"""One command per node that reads everything kiln's operations compare against.

pyinfra's stock operations each read their own facts: a deploy of ~35 operations costs ~80 SSH
round trips per node even when nothing changes. kiln's operations instead read one
``NodeSnapshot`` taken after the node's operations are prepared (so it knows every path, unit and
line they manage) and before any of them runs: a no-op deploy is one round trip per node.

The contract that keeps this correct: an operation compares against the snapshot only for things
no earlier operation of the same run changes (packages are installed before the files and services
that depend on them are compared, and installing a package never produces the exact content kiln
writes). Output parsing is pure (``parse_snapshot``) and tested on recorded output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pyinfra.api import FactBase

from kiln.shell import quote, quote_all

MARK = "@@kiln "
_VERSIONLOCK = re.compile(r"^(?P<name>[A-Za-z0-9_.+-]+?)-(?:\d+:)?(?P<version>[^-]+-[^-]+)\.\*$")


@dataclass(frozen=True)
class FileState:
    kind: str          # "regular file", "directory", "symbolic link", ...
    mode: str          # octal without leading zeros, e.g. "644", "400", "1777"
    user: str
    group: str
    sha1: str          # "" for anything but a regular file


@dataclass(frozen=True)
class UnitState:
    load: str          # loaded | not-found | masked ...
    active: str        # active | inactive | failed | activating ...
    enabled: str       # enabled | disabled | static | "" ...


@dataclass(frozen=True)
class Account:
    uid: int
    gid: int
    home: str
    shell: str


@dataclass
class NodeSnapshot:
    packages: dict[str, str] = field(default_factory=dict)     # installed name -> version
    held: set[str] = field(default_factory=set)                # apt holds / dnf versionlocks
    users: dict[str, Account] = field(default_factory=dict)
    groups: dict[str, tuple[int, set[str]]] = field(default_factory=dict)  # name -> (gid, members)
    files: dict[str, FileState] = field(default_factory=dict)  # only paths that exist
    units: dict[str, UnitState] = field(default_factory=dict)
    lines: set[int] = field(default_factory=set)               # indexes of (path, regex) pairs found
    modules: dict[str, str] = field(default_factory=dict)      # loaded watched module -> its version ("" if none)
    # what the command asked about: a Watched; None means "anything" (hand-made snapshots)
    asked: "Watched | None" = None

    def covers(self, wanted: "Watched") -> bool:
        if self.asked is None:
            return True
        asked = self.asked
        return (len(wanted.lines) <= len(asked.lines)
                and all(set(getattr(wanted, name)) <= set(getattr(asked, name))
                        for name in ("paths", "units", "modules", "anchors", "packages", "users", "groups")))

    def unit(self, name: str) -> UnitState:
        return self.units.get(name, UnitState("not-found", "inactive", ""))


@dataclass(frozen=True)
class Watched:
    """What a node's operations compare against, registered while they are prepared (``NodeContext``):
    the snapshot asks the node about these and nothing else. Only the packages, users and groups named are
    read (a node's whole package list is thousands of lines; a directory service may not list its users)."""
    paths: tuple[str, ...] = ()
    units: tuple[str, ...] = ()
    lines: tuple[tuple[str, str], ...] = ()
    modules: tuple[str, ...] = ()
    anchors: tuple[tuple[int, str], ...] = ()  # (index in lines, regex): that line counts only before it
    packages: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()

    @classmethod
    def of(cls, ctx) -> "Watched":
        return cls(tuple(ctx.paths), tuple(ctx.units), tuple(ctx.lines), tuple(ctx.modules),
                   tuple(sorted(ctx.line_anchors.items())), tuple(ctx.packages), tuple(ctx.users), tuple(ctx.groups))


def snapshot_command(watched: Watched) -> str:
    q, w = quote, watched
    names = quote_all(w.packages)
    parts = [f"echo '{MARK}packages'"]
    if w.packages:  # dpkg-query/rpm print the named packages only (and a "not installed" line, skipped)
        parts.append(f"if command -v dpkg-query >/dev/null 2>&1; then "
                     f"dpkg-query -W -f='${{db:Status-Abbrev}}|${{Package}}|${{Version}}\\n' {names} 2>/dev/null; "
                     f"else rpm -q --qf 'ii |%{{NAME}}|%{{VERSION}}-%{{RELEASE}}\\n' {names} 2>/dev/null; fi; true")
    parts += [f"echo '{MARK}held'", "(apt-mark showhold 2>/dev/null || dnf -q versionlock list 2>/dev/null || true)",
              f"echo '{MARK}passwd'"]
    if w.users:  # getent with no name would list every account
        parts.append(f"getent passwd {quote_all(w.users)}; true")
    parts.append(f"echo '{MARK}group'")
    if w.groups:
        parts.append(f"getent group {quote_all(w.groups)}; true")
    parts.append(f"echo '{MARK}files'")
    paths, units, lines, modules = w.paths, w.units, w.lines, w.modules
    if paths:
        parts.append(
            f"for p in {' '.join(q(p) for p in paths)}; do if [ -e \"$p\" ]; then "
            "printf '%s|%s|' \"$p\" \"$(stat -c '%F|%a|%U|%G' \"$p\")\"; "
            "if [ -f \"$p\" ]; then sha1sum < \"$p\" | cut -d' ' -f1; else echo; fi; fi; done")
    parts.append(f"echo '{MARK}units'")
    if units:
        parts.append(f"for u in {' '.join(q(u) for u in units)}; do echo \"Unit=$u\"; "
                     "systemctl show -p LoadState -p ActiveState -p UnitFileState \"$u\" 2>/dev/null; echo; done")
    parts.append(f"echo '{MARK}lines'")
    anchors = dict(w.anchors)
    for i, (path, regex) in enumerate(lines):
        if i in anchors:  # the first matching line's number, before the anchor's first (or no anchor)
            parts.append(f"l=$(grep -nE {q(regex)} {q(path)} 2>/dev/null | head -n1 | cut -d: -f1); "
                         f"a=$(grep -nE {q(anchors[i])} {q(path)} 2>/dev/null | head -n1 | cut -d: -f1); "
                         f"[ -n \"$l\" ] && {{ [ -z \"$a\" ] || [ \"$l\" -lt \"$a\" ]; }} && echo {i}")
        else:
            parts.append(f"grep -qE {q(regex)} {q(path)} 2>/dev/null && echo {i}")
    parts.append(f"echo '{MARK}modules'")
    if modules:
        parts.append(f"for m in {' '.join(q(m) for m in modules)}; do [ -d /sys/module/$m ] && "
                     "echo \"$m|$(cat /sys/module/$m/version 2>/dev/null)\"; done; true")
    parts.append(f"echo '{MARK}end'")
    return "; ".join(parts)


class SnapshotError(ValueError):
    pass


def parse_snapshot(output: list[str]) -> NodeSnapshot:
    sections: dict[str, list[str]] = {}
    current = None
    for line in output:
        if line.startswith(MARK):
            current = line[len(MARK):].strip()
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    if "end" not in sections:
        raise SnapshotError("the node's state could not be read completely (output ended early)")
    snap = NodeSnapshot()
    for line in sections.get("packages", []):
        status, _, rest = line.partition("|")
        name, _, version = rest.partition("|")
        if len(status) >= 2 and status[1] == "i" and name:  # "ii" installed, "hi" held and installed
            snap.packages[name.split(":")[0]] = version.strip()
    for line in sections.get("held", []):
        line = line.strip()
        match = _VERSIONLOCK.match(line)
        if match:
            snap.held.add(match["name"])
        elif line and " " not in line:
            snap.held.add(line.split(":")[0])
    for line in sections.get("passwd", []):
        f = line.split(":")
        if len(f) >= 7 and f[2].isdigit() and f[3].isdigit():
            snap.users[f[0]] = Account(int(f[2]), int(f[3]), f[5], f[6])
    for line in sections.get("group", []):
        f = line.split(":")
        if len(f) >= 4 and f[2].isdigit():
            snap.groups[f[0]] = (int(f[2]), {m for m in f[3].split(",") if m})
    for line in sections.get("files", []):
        f = line.split("|")
        if len(f) == 6:
            snap.files[f[0]] = FileState(f[1], f[2], f[3], f[4], f[5].strip())
    block: dict[str, str] = {}
    for line in sections.get("units", []) + [""]:
        if not line.strip():
            if "Unit" in block:
                snap.units[block["Unit"]] = UnitState(block.get("LoadState", ""), block.get("ActiveState", ""),
                                                    block.get("UnitFileState", ""))
            block = {}
            continue
        key, _, value = line.partition("=")
        block[key] = value.strip()
    snap.lines = {int(line) for line in sections.get("lines", []) if line.strip().isdigit()}
    for line in sections.get("modules", []):
        name, sep, version = line.partition("|")
        if sep:
            snap.modules[name.strip()] = version.strip()
    return snap


class NodeSnapshotFact(FactBase):
    """``NodeSnapshot`` of what a ``Watched`` names."""

    def command(self, watched: Watched) -> str:
        return snapshot_command(watched)

    @staticmethod
    def default() -> NodeSnapshot:
        return NodeSnapshot()

    def process(self, output: list[str]) -> NodeSnapshot:
        return parse_snapshot(output)
