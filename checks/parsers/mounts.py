"""Mounts: ``findmnt --json``, /etc/fstab, ``df --output`` and the storage probe's report."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from checks.verdict import CheckError


@dataclass(frozen=True)
class Mount:
    target: str
    source: str
    fstype: str
    options: tuple[str, ...]


def parse_findmnt_json(text: str) -> dict[str, Mount]:
    """Mount point -> Mount, from ``findmnt --json`` in list or tree mode (children flattened)."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise CheckError(f"findmnt JSON is malformed or cut short: {e}") from None
    if not isinstance(data, dict) or "filesystems" not in data:
        raise CheckError("findmnt JSON has no 'filesystems'")
    mounts: dict[str, Mount] = {}

    def walk(entries):
        for e in entries or []:
            if not isinstance(e, dict) or "target" not in e:
                raise CheckError(f"findmnt entry without a target: {str(e)[:80]}")
            opts = e.get("options") or ""
            mounts[e["target"]] = Mount(e["target"], e.get("source") or "", e.get("fstype") or "",
                                        tuple(o for o in opts.split(",") if o))
            walk(e.get("children"))
    walk(data["filesystems"])
    return mounts


def parse_fstab(text: str) -> dict[str, Mount]:
    entries = {}
    for line in text.split("\n"):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        if len(fields) < 3:
            raise CheckError(f"/etc/fstab line with fewer than 3 fields: {line[:80]!r}")
        options = fields[3] if len(fields) > 3 else "defaults"
        entries[fields[1]] = Mount(fields[1], fields[0], fields[2], tuple(options.split(",")))
    return entries


PROBE_MARK = "@@kiln-mount "


def parse_probe(text: str) -> dict[int, tuple[int, str]]:
    """The storage probe's report (checks.storage.probe_command): mount index -> (exit code, what it
    printed). Each mount's part starts with a line ``@@kiln-mount <index> <exit code>``."""
    parts: dict[int, tuple[int, str]] = {}
    index, rc, lines = None, 0, []
    for line in text.removesuffix("\n").split("\n"):  # "\n" only: a file's \r cannot start a mark
        if line.startswith(PROBE_MARK):
            if index is not None:
                parts[index] = (rc, "\n".join(lines))
            fields = line[len(PROBE_MARK):].split()
            if len(fields) != 2 or not all(f.isdigit() for f in fields):
                raise CheckError(f"storage probe line not understood: {line[:80]!r}")
            index, rc, lines = int(fields[0]), int(fields[1]), []
        elif index is not None:
            lines.append(line)
        elif line.strip():
            raise CheckError(f"storage probe printed before its first mount: {line[:80]!r}")
    if index is not None:
        parts[index] = (rc, "\n".join(lines))
    return parts


def parse_df_percent(text: str) -> dict[str, tuple[int, int | None]]:
    """``df --output=target,pcent,ipcent``: mount point -> (space % used, inodes % used or None)."""
    usage = {}
    for line in text.split("\n")[1:]:
        m = re.match(r"^(\S+)\s+(\d+)%\s+(\d+%|-)\s*$", line.strip())
        if m:
            usage[m.group(1)] = (int(m.group(2)), int(m.group(3)[:-1]) if m.group(3) != "-" else None)
        elif line.strip():
            raise CheckError(f"df line not understood: {line[:80]!r}")
    return usage


_SIZE = re.compile(r"^(\d+)([kmgt]?)$", re.I)


def _size(value: str) -> int | None:
    m = _SIZE.match(value)
    if not m:
        return None
    return int(m.group(1)) * 1024 ** " kmgt".index((m.group(2) or " ").lower())


def options_match(wanted: str, actual: tuple[str, ...]) -> list[str]:
    """The wanted options (comma separated; ``defaults`` means none in particular) missing from ``actual``.
    Flags (``rw``, ``hard``) and ``key=value`` options must match; sizes match in any unit the kernel
    prints them in (``size=64m`` is ``size=65536k``)."""
    have = set(actual)
    values = dict(o.split("=", 1) for o in actual if "=" in o)
    missing = []
    for option in (o for o in wanted.split(",") if o and o != "defaults"):
        if option in have:
            continue
        key, _, value = option.partition("=")
        if value and key in values and _size(value) is not None and _size(value) == _size(values[key]):
            continue
        missing.append(option)
    return missing


_DD = re.compile(r"^(\d+) bytes\b.*\bcopied, ([0-9.]+(?:e-?\d+)?) s\b")


def parse_dd_rate(line: str) -> float:
    """MB/s (10^6 bytes a second) from dd's summary line, computed from its byte count and seconds, as
    GNU dd prints it (``268435456 bytes (268 MB, 256 MiB) copied, 1.2 s, 224 MB/s``; older releases
    without the MiB part) in the C locale."""
    m = _DD.match(line.strip())
    if not m:
        raise CheckError(f"dd summary not understood: {line.strip()[:100]!r}")
    size, seconds = int(m.group(1)), float(m.group(2))
    if size == 0:
        raise CheckError("dd copied nothing")
    return size / max(seconds, 1e-6) / 1e6
