"""The log host: where every host's journal goes (roles/logs.py), and how ``kiln logs`` reads it back.

Pure: which host it is, the port, the files each host's journal lands in, the one command that reads them,
and the reader of its output. systemd-journal-remote (Debian's is built without GnuTLS's client
certificate checks: ``--trust`` is refused) names each sender's files after the address the connection came
from (``--split-mode=host``: ``remote-ADDRESS.journal``, archived as ``remote-ADDRESS@...journal[~]``), so kiln
reads a host's entries from its address's files: what a node writes into its own entries (``_HOSTNAME``, a
message that claims to be sshd's) never decides which host they are shown as. Only kiln's uploader (a fixed
UID) may connect to the log host (roles/firewall_rules.py's output rule); a user on a node cannot add
entries there.

Every entry is read from ``journalctl -o json``: one JSON object per line, so nothing an entry holds (a
newline in a message, a line that looks like the next host's marker) can split or forge another; messages
are printed with their control characters escaped, so none reaches the operator's terminal as a control.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone

from checks.parsers import journal
from kiln.inventory.formats import url_host
from kiln.inventory.model import MONITORING, Cluster, Host
from kiln.shell import command

PORT = 19532  # systemd-journal-remote's HTTPS port
REMOTE_DIR = "/var/log/journal/remote"
UPLOADER = "systemd-journal-upload"  # the uploader's account (kiln_service_uids): alone let through to PORT
UPLOAD_UNIT, REMOTE_UNIT, REMOTE_SOCKET = ("systemd-journal-upload.service", "systemd-journal-remote.service",
                                          "systemd-journal-remote.socket")
# where the uploader keeps the cursor of the last entry the log host accepted (StateDirectory of a DynamicUser)
UPLOAD_STATE = "/var/lib/private/systemd/journal-upload/state"
MARKER = "@kiln-log-host "  # starts the line before each host's entries; never JSON, so no entry forges it
MAX_ENTRIES = 100_000  # per host and call: a window wider than this shows its newest entries


def log_host(cluster: Cluster) -> Host | None:
    """The host that receives every journal: the first of the monitoring group, where log shipping is on."""
    hosts = cluster.group(MONITORING)
    if not hosts or not cluster.setting("log_shipping"):
        return None
    return hosts[0]


def url(host: Host) -> str:
    """The log host's upload URL (an IPv6 address in brackets)."""
    return f"https://{url_host(host.address)}:{PORT}"


def journal_files(host: Host) -> list[str]:
    """The globs of ``host``'s files on the log host, the one being written, the archived ones, and those
    systemd-journal-remote set aside as uncleanly closed (``...journal~``: still read by journalctl, and
    holding what arrived just before; on the VM tier the entries of a minute went there once) (no glob of
    one address matches another's: 10.0.0.1 never reads 10.0.0.12)."""
    return [f"{REMOTE_DIR}/remote-{host.address}[.@]*journal*"]


def read_command(hosts: list[Host], since: float, until: float | None, matches: tuple[str, ...] = ()) -> str:
    """One shell command for the log host: for each host a marker line with its name, then its entries in
    [since, until] (only those with every field of ``matches``, journalctl's FIELD=VALUE) as JSON lines
    (every value one quoted word; journalctl expands the globs itself)."""
    window = [f"--since=@{int(since)}"] + ([f"--until=@{int(until) + 1}"] if until is not None else []) + list(matches)
    parts = []
    for h in hosts:
        files = [f"--file={g}" for g in journal_files(h)]
        parts.append(f"echo {command(MARKER + h.name)}; "
                     f"{command('journalctl', *files, '-o', 'json', '-q', '--no-pager', *window)} 2>/dev/null"
                     f" | tail -n {MAX_ENTRIES}")
    return "; ".join(parts)


@dataclass(frozen=True)
class Entry:
    host: str       # the inventory host whose files held it (never the entry's own _HOSTNAME)
    time: float     # epoch seconds (UTC), when the sender's journal received it
    unit: str       # the systemd unit it came from ("" for none)
    program: str    # SYSLOG_IDENTIFIER, else _COMM
    pid: str
    uid: str        # _UID: set by the sender's journald, not by the program
    message: str

    def as_dict(self) -> dict:
        return {"host": self.host, "time": datetime.fromtimestamp(self.time, timezone.utc).isoformat(),
                "unit": self.unit, "program": self.program, "pid": self.pid, "uid": self.uid, "message": self.message}


def parse(text: str) -> tuple[list[Entry], int]:
    """Entries of ``read_command``'s output, each with the host of the marker above it, and how many lines
    were not entries (cut short, not JSON)."""
    entries, bad, host = [], 0, None
    for line in text.splitlines():
        if line.startswith(MARKER):
            host = line[len(MARKER):].strip()
            continue
        data = journal.entry(line)
        when = journal.written(data) if data is not None else None
        if when is None or host is None:
            bad += bool(line.strip())
            continue
        entries.append(Entry(host=host, time=when, unit=journal.text(data.get("_SYSTEMD_UNIT")),
                             program=journal.text(data.get("SYSLOG_IDENTIFIER")) or journal.text(data.get("_COMM")),
                             pid=journal.text(data.get("_PID")), uid=journal.text(data.get("_UID")),
                             message=journal.text(data.get("MESSAGE"))))
    return sorted(entries, key=lambda e: (e.time, e.host)), bad


_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")


def shown(text: str) -> str:
    """``text`` with every control character written as an escape (\\n, \\x1b): one line, no terminal control."""
    return _CONTROL.sub(lambda m: {"\n": "\\n", "\r": "\\r"}.get(m.group(), f"\\x{ord(m.group()):02x}"
                                                                 if ord(m.group()) < 256 else f"\\u{ord(m.group()):04x}"),
                        text)


def line(entry: Entry) -> str:
    """One entry as ``kiln logs`` prints it: UTC time, host, program[pid] (uid), message."""
    when = datetime.fromtimestamp(entry.time, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    who = f"{shown(entry.program) or '?'}[{entry.pid or '?'}]" + (f" uid={entry.uid}" if entry.uid else "")
    return f"{when} {entry.host} {who}: {shown(entry.message)}"


def job_pattern(job_id: str) -> re.Pattern:
    """What names job ``job_id`` in Slurm's daemons' messages: JobId=N, StepId=N.x, "job N", [N.batch]."""
    n = re.escape(job_id)
    return re.compile(rf"(JobId={n}\b|StepId={n}\.|\b[Jj]ob[ _]?(?:id[ =:])?\s*{n}\b|\[{n}[.\]])")
