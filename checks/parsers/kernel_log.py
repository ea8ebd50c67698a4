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
import time
from dataclasses import dataclass

from checks.parsers.xid_catalog import classify

NOW_MARK = "@@kiln-now "
RESET_MARK = "@@kiln-gpu-reset "  # when kiln-node-repair last reset the node's GPUs (epoch), or nothing
RESET_FILE = "/var/lib/kiln/gpu-reset"  # written by kiln-node-repair after a reset that succeeded
# {since} is filled in by the inventory (a custom kiln_check_kernel_log command takes it too)
COMMAND = "journalctl -k --since={since} --no-pager -o short-iso 2>/dev/null || dmesg --time-format iso"
WINDOW = "-24h"


def log_command(template: str = COMMAND) -> str:
    """The kernel log command the suites share: the node's clock, then the last 24 h of the log."""
    return (f"echo {NOW_MARK}$(date +%s); echo {RESET_MARK}$(head -c 32 {RESET_FILE} 2>/dev/null | tr -cd 0-9.); "
            + template.replace("{since}", WINDOW))


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


def after_gpu_reset(text: str) -> tuple[str, int]:
    """``text`` without the GPU driver's lines (``NVRM:``) from before the node's last GPU reset (the
    reset mark), and how many were left out: a reset clears what those lines reported, so an Xid a reset
    repaired stops failing the check at once instead of for ``hours``. NVSwitch (SXid) lines stay (a GPU
    reset does not clear the switches), and so does every line whose time kiln cannot read."""
    lines = text.splitlines()
    mark = next((l[len(RESET_MARK):].strip() for l in lines if l.startswith(RESET_MARK)), "")
    if not re.fullmatch(r"\d{9,11}(\.\d{1,9})?", mark, re.ASCII):
        return text, 0
    reset = float(mark)
    keep, dropped = [], 0
    for line in lines:
        when = _epoch(line)
        if "NVRM:" in line and when is not None and when < reset:
            dropped += 1
            continue
        keep.append(line)
    return ("\n".join(keep) + "\n" if keep else ""), dropped


_XID = re.compile(r"NVRM: Xid \((?P<pci>[^)]+)\): (?P<code>\d+),\s*(?P<rest>.*)$")
_SXID = re.compile(r"nvidia-nvswitch\d*: SXid \((?P<pci>[^)]+)\): (?P<code>\d+), (?P<rest>.*)$")
# The lines an NVSwitch driver prints after an SXid's event line, with the same code: one event, not three
_SXID_MORE = re.compile(r"^(Severity \d+|Data \{)")
# The driver's own line when a GPU drops off the bus, printed with or without an Xid 79 line
_OFF_BUS = re.compile(r"NVRM: .*fallen off the bus")
_NVRM_PCI = re.compile(r"NVRM: .*?\b(?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.\d)?)\b")
_PID = re.compile(r"pid='?(?P<pid>[^',]*)'?,\s*name=(?P<name>[^,]*),\s*(?P<msg>.*)$")
_STAMP = re.compile(r"^\s*(\[[^\]]+\]|\S+T\S+|\w{3} +\d+ [\d:]+ \S+)")
BURST_SECONDS = 10  # the same event again within this many seconds is one event


@dataclass
class Xid:
    """One Xid or SXid event, however many lines the driver printed for it (``count``: how many times it
    came in one burst)."""

    pci: str
    code: int
    pid: str
    process: str
    message: str
    stamp: str
    nvswitch: bool = False
    count: int = 1

    @property
    def severity(self) -> str:
        """"fail" (drains), "warn" (reported: an SXid without its event line, an Xid kiln does not know,
        an Xid the driver itself calls non-fatal) or "ok" (non-fatal SXid, an application's Xid). Where
        the driver prints the event's severity on its line (SXids; Blackwell's NVLink Xids: "Fatal",
        "Nonfatal"), its own word decides; otherwise the catalog."""
        said = _said_severity(self.message)
        if self.nvswitch:
            if said == "nonfatal":
                return "ok"
            return "fail" if said == "fatal" else "warn"
        if said == "nonfatal" and classify(self.code, self.message)[0] == "fail":
            return "warn"
        if said == "fatal":
            return "fail"
        return classify(self.code, self.message)[0]

    @property
    def fatal(self) -> bool:
        return self.severity == "fail"

    @property
    def action(self) -> str:
        if self.nvswitch:
            return "a fatal NVSwitch error: reset the GPUs and NVSwitches (reboot the node); if it recurs, service it"
        return classify(self.code, self.message)[1]


_SEVERITY_WORD = re.compile(r"(?:^|[\s,])(Non-?fatal|Fatal)\b", re.IGNORECASE)


def _said_severity(message: str) -> str | None:
    """"fatal" or "nonfatal" where the driver wrote the word in the event's message, else None."""
    found = _SEVERITY_WORD.search(message)
    if not found:
        return None
    return "nonfatal" if found.group(1).lower().startswith("non") else "fatal"


def _pci(text: str) -> str:
    """PCI:0000:3b:00 and 0000:3b:00.0 name one device."""
    text = text.removeprefix("PCI:").lower()
    return text[:-2] if re.search(r"\.\d$", text) else text


def _seconds(stamp: str) -> float | None:
    """Seconds of a line's stamp, comparable within one log: ``[ 5321.442100]`` (since boot), ``dmesg -T``'s
    ``[Mon Dec  1 10:00:00 2025]`` (local time, read as UTC: only differences count), or ISO."""
    if stamp.startswith("["):
        inner = " ".join(stamp.strip("[]").split())
        try:
            return float(inner)
        except ValueError:
            pass
        try:
            return float(calendar.timegm(time.strptime(inner, "%a %b %d %H:%M:%S %Y")))
        except ValueError:
            return None
    return _epoch(stamp)


def parse_xids(text: str) -> list[Xid]:
    """Xid and SXid events in ``text``, one per occurrence: an SXid's "Severity"/"Data" lines join its
    event line, a "fallen off the bus" line without its Xid is an Xid 79, and the same event repeated
    within BURST_SECONDS counts once (``count`` says how many lines came)."""
    events: list[Xid] = []
    open_sxid: set[tuple[str, int]] = set()  # switches whose last SXid event line came already
    partial_sxid: dict[tuple[str, int], Xid] = {}  # SXids seen only by their Severity/Data lines so far
    last_pci = "unknown"  # older drivers print the notice over three NVRM lines, the address on the first
    for line in text.splitlines():
        stamp_match = _STAMP.match(line)
        stamp = stamp_match.group(1) if stamp_match else ""
        match = _XID.search(line)
        if match:
            detail = _PID.match(match.group("rest"))
            pid, name, msg = (detail.group("pid"), detail.group("name"), detail.group("msg")) if detail \
                else ("", "", match.group("rest"))
            events.append(Xid(_pci(match.group("pci")), int(match.group("code")), pid, name, msg.strip(), stamp))
            continue
        match = _SXID.search(line)
        if match:
            pci, code, rest = _pci(match.group("pci")), int(match.group("code")), match.group("rest").strip()
            partial = _SXID_MORE.match(rest) is not None
            if partial and ((pci, code) in open_sxid or (pci, code) in partial_sxid):
                continue  # its event line (or another of its lines) came already; other switches' may stand between
            if not partial and (pci, code) in partial_sxid:
                # its Severity/Data lines came first (newer drivers): the event line gives the event its words
                event = partial_sxid.pop((pci, code))
                event.message = rest
                open_sxid.add((pci, code))
                continue
            event = Xid(pci, code, "", "", rest, stamp, nvswitch=True)
            events.append(event)
            if partial:
                partial_sxid[(pci, code)] = event  # reported as an SXid without its event line unless one comes
            else:
                open_sxid.add((pci, code))
            continue
        named = _NVRM_PCI.search(line)
        if named:
            last_pci = _pci(named.group("pci"))
        if _OFF_BUS.search(line):
            events.append(Xid(last_pci, 79, "", "", "GPU has fallen off the bus (no Xid line)", stamp))
    return _bursts(events)


def _bursts(events: list[Xid]) -> list[Xid]:
    out: list[Xid] = []
    for event in events:
        last = out[-1] if out else None
        if last and (last.pci, last.code, last.nvswitch) == (event.pci, event.code, event.nvswitch):
            a, b = _seconds(last.stamp), _seconds(event.stamp)
            if (a is None or b is None) and last.stamp == event.stamp or \
                    a is not None and b is not None and 0 <= b - a <= BURST_SECONDS:
                last.count += 1
                continue
        out.append(event)
    return out


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
