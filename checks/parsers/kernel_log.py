"""Kernel log lines: NVIDIA Xid/SXid events and network link flaps.

The gpu and fabric suites read the same command's output (one read of the node's journal per run): the
last 24 h, after a line with the node's own clock (``@@kiln-now <epoch>``). Link flaps count over all
of it; Xids over the last hours only (``recent``), by each line's ISO timestamp. A line whose time kiln
cannot read is kept, so a fatal Xid is never dropped for its format. Timestamps in any of the kernel's
formats are kept as text for the message.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass

NOW_MARK = "@@kiln-now "
# {since} is filled in by the inventory (a custom kiln_check_kernel_log command takes it too)
COMMAND = "journalctl -k --since={since} --no-pager -o short-iso 2>/dev/null || dmesg --time-format iso"
WINDOW = "-24h"


def log_command(template: str = COMMAND) -> str:
    """The kernel log command the suites share: the node's clock, then the last 24 h of the log."""
    return f"echo {NOW_MARK}$(date +%s); " + template.replace("{since}", WINDOW)


DEFAULT_COMMAND = log_command()  # the gpu and fabric suites' command when the expectations name none


_ISO = re.compile(r"^\s*(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:[.,]\d+)?(Z|[+-]\d\d:?\d\d)?")


def _epoch(line: str) -> float | None:
    m = _ISO.match(line)
    if not m or not m.group(7):
        return None
    stamp = calendar.timegm(tuple(int(g) for g in m.groups()[:6]) + (0, 0, 0))
    zone = m.group(7)
    if zone == "Z":
        return stamp
    sign = -1 if zone[0] == "-" else 1
    digits = zone[1:].replace(":", "")
    return stamp - sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)


def recent(text: str, hours: float) -> str:
    """The lines of ``text`` from the last ``hours`` before the node's clock line (all of them when the
    output has no clock line, as a recorded log has not)."""
    lines = text.splitlines()
    now = next((float(l[len(NOW_MARK):]) for l in lines if l.startswith(NOW_MARK) and
                l[len(NOW_MARK):].strip().isdigit()), None)
    if now is None:
        return text
    keep = []
    for line in lines:
        if line.startswith(NOW_MARK):
            continue
        when = _epoch(line)
        if when is None or when >= now - hours * 3600:
            keep.append(line)
    return "\n".join(keep) + "\n" if keep else ""

_XID = re.compile(r"NVRM: Xid \((?P<pci>[^)]+)\): (?P<code>\d+),\s*(?P<rest>.*)$")
_SXID = re.compile(r"nvidia-nvswitch\d*: SXid \((?P<pci>[^)]+)\): (?P<code>\d+), (?P<rest>.*)$")
_PID = re.compile(r"pid='?(?P<pid>[^',]*)'?,\s*name=(?P<name>[^,]*),\s*(?P<msg>.*)$")
_STAMP = re.compile(r"^\s*(\[[^\]]+\]|\S+T\S+|\w{3} \d+ [\d:]+ \S+)")

# NVIDIA's Xid catalog: errors that mean the GPU or node needs attention (drain), and errors an
# application causes (its own bug or a killed job) that must never drain a node.
FATAL_XIDS = {48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 94, 95, 119, 120}
APPLICATION_XIDS = {13, 31, 43, 45}
XID_ACTIONS = {
    48: "double-bit ECC error: reset the GPU; if it recurs, service it",
    63: "row remapping pending: reset the GPU (or reboot) to apply it",
    64: "row remapping failed: service the GPU",
    74: "NVLink error: check NVLink and fabric manager, reset the GPU",
    79: "the GPU fell off the bus: reboot; if it recurs, service the node",
    94: "contained ECC error: restart the application; reset the GPU if it recurs",
    95: "uncontained ECC error: reset the GPU",
    119: "GSP timeout: reset the GPU or reboot",
    120: "GSP error: reset the GPU or reboot",
}


@dataclass(frozen=True)
class Xid:
    pci: str
    code: int
    pid: str
    process: str
    message: str
    stamp: str
    nvswitch: bool = False

    @property
    def fatal(self) -> bool:
        if self.nvswitch:
            return "Non-fatal" not in self.message
        return self.code in FATAL_XIDS

    @property
    def action(self) -> str:
        return XID_ACTIONS.get(self.code, "see NVIDIA's Xid catalog for this code")


def parse_xids(text: str) -> list[Xid]:
    events = []
    for line in text.splitlines():
        stamp_match = _STAMP.match(line)
        stamp = stamp_match.group(1) if stamp_match else ""
        match = _XID.search(line)
        if match:
            detail = _PID.match(match.group("rest"))
            pid, name, msg = (detail.group("pid"), detail.group("name"), detail.group("msg")) if detail \
                else ("", "", match.group("rest"))
            events.append(Xid(match.group("pci"), int(match.group("code")), pid, name, msg.strip(), stamp))
            continue
        match = _SXID.search(line)
        if match:
            events.append(Xid(match.group("pci"), int(match.group("code")), "", "", match.group("rest").strip(),
                              stamp, nvswitch=True))
    return events



def count_link_flaps(text: str) -> dict[str, int]:
    """Network device -> number of 'lost carrier' / 'link down' lines."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        if "lost carrier" not in line and "ink down" not in line:
            continue
        dev = re.search(r"\b(mlx5_\d+|ib[a-z]*\d+\w*|eth\d+|en[a-z0-9]+)\b", line)
        name = dev.group(1) if dev else "unknown"
        counts[name] = counts.get(name, 0) + 1
    return counts
