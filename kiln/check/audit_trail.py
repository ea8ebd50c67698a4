"""ISOLATION_AUDIT_TRAIL, settled by kiln check across hosts: the sudo each team's probe account is refused
on a login host (checks/isolation.py's ISOLATION_SUDO probe, its command carrying this run's token) must
reach the log host (kiln/log_host.py) within ``AUDIT_WAIT`` seconds, read back from the files of the login
host's own address. A refused privilege that leaves no trace where the node's root cannot reach it fails
the login host: its uploader is stopped, the log host does not take its entries, or sudo logs nowhere.

Only sudo's own entries are read (``SYSLOG_IDENTIFIER=sudo``), and only one that sudo wrote for the probe
counts: its message begins with the probe's name (sudo's ``USER : reason ; ... COMMAND=...``: sudo writes the
invoking user there, the user only the command), it holds this run's token (new each run), and its ``_UID`` is
the probe's. ``_UID`` is what the sending process's kernel credentials said (journald's trusted field; sudo
logs under the invoking user's real UID: seen 2191 for kiln-probe-vision on Debian 12's sudo 1.9.13p3), so
another user who saw the token cannot stand in for the probe: not with ``logger -t sudo`` and the probe's
words, not with their own refused sudo whose command names the probe and the token.
"""

from __future__ import annotations

import time
from typing import Callable

from checks.node import Node
from checks.verdict import Verdict, fail, ok
from kiln.inventory.model import Host
from kiln.log_host import Entry, parse, read_command

CHECK = "ISOLATION_AUDIT_TRAIL"
AUDIT_WAIT = 60.0  # seconds a refused sudo may take to reach the log host
POLL = 2.0
SINCE_MARGIN = 600.0  # the senders' clocks may differ from the operator's; the token tells this run's entry


def traced(entries: list[Entry], host: str, probe: str, uid: int, token: str) -> bool:
    """Whether ``host``'s files on the log host hold sudo's entry of ``probe``'s (UID ``uid``) command with
    ``token``."""
    return any(e.host == host and e.program == "sudo" and e.uid == str(uid) and e.message.startswith(f"{probe} : ")
               and token in e.message for e in entries)


def audit_trail(log_node: Node, log_name: str, hosts: dict[str, tuple[Host, list[str]]], uids: dict[str, int],
                token: str, since: float, wait: float = AUDIT_WAIT, poll: float = POLL,
                clock: Callable[[], float] = time.monotonic,
                sleep: Callable[[float], None] = time.sleep) -> dict[str, Verdict]:
    """Host name -> its ISOLATION_AUDIT_TRAIL verdict: ``hosts`` maps each login host checked to (its Host,
    the probe accounts that tried sudo there), ``uids`` each probe account to its UID; the log host
    (``log_node``, ``log_name``) is asked again every ``poll`` seconds until every probe's attempt is there or
    ``wait`` has passed."""
    started = clock()
    missing = {name: set(probes) for name, (_, probes) in hosts.items()}
    arrived: dict[str, float] = {}
    why = ""
    while True:
        out = log_node.run(read_command([h for h, _ in hosts.values()], since - SINCE_MARGIN, None,
                                        ("SYSLOG_IDENTIFIER=sudo",)))
        if out.rc != 0:
            why = (out.stderr or out.stdout).strip()[-200:]
        entries, _ = parse(out.stdout)
        for name in list(missing):
            missing[name] = {p for p in missing[name] if not traced(entries, name, p, uids.get(p, -1), token)}
            if not missing[name]:
                del missing[name]
                arrived[name] = clock() - started
        if not missing or clock() - started >= wait:
            break
        sleep(poll)
    verdicts = {}
    for name, (_, probes) in hosts.items():
        if name in arrived:
            verdicts[name] = ok(CHECK, f"the sudo refused to {', '.join(probes)} here reached the log host "
                                       f"{log_name} in {arrived[name]:.0f} s")
        else:
            verdicts[name] = fail(CHECK, f"the sudo refused to {', '.join(sorted(missing[name]))} here did not reach "
                                         f"the log host {log_name} within {wait:.0f} s"
                                         + (f" ({why})" if why else "") +
                                         ": a privilege tried leaves no trace the node's root cannot erase; kiln "
                                         "check --suite logs says whether this host's uploader ships its journal")
    return verdicts
