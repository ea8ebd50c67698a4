"""journalctl's JSON output (``-o json``): one object per line; a field is a string, or an array of bytes
where it is not UTF-8 (or a list where a sender wrote it several times). Read by kiln logs (kiln/log_host.py)
and by the logs suite on hosts (checks/logs.py)."""

from __future__ import annotations

import json


def entry(line: str) -> dict | None:
    """One line of ``journalctl -o json`` as its fields, None when it is not one entry."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def text(value) -> str:
    """A field as text: a string, or the byte array journalctl gives for one that is not UTF-8."""
    if isinstance(value, list):
        if all(isinstance(b, int) and 0 <= b < 256 for b in value):
            return bytes(value).decode("utf-8", errors="replace")
        return " ".join(text(v) for v in value)  # a field a sender wrote several times
    return value if isinstance(value, str) else ""


def written(data: dict) -> float | None:
    """When the sender's journal received the entry (epoch seconds), None when the entry has no such time."""
    try:
        return int(text(data.get("__REALTIME_TIMESTAMP"))) / 1e6
    except ValueError:
        return None
