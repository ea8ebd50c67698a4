"""Logs suite. On every host that sends its journal to the log host (``expect["logs"]``), LOG_SHIPPING: the
uploader (systemd-journal-upload) runs, and the oldest entry of the host's journal the log host has not
accepted yet is younger than ``lag_seconds``. The uploader keeps the cursor of the last entry the log host
accepted (its state file); the entries after it are what has not arrived. A log host that is down, a port
the firewall shuts, a certificate the log host refuses: each leaves entries behind, and the check names
how long ago the first of them was written.

Expectations (``expect["logs"]``): log_host (ADDRESS:PORT), lag_seconds, state (the uploader's state
file), unit. Read as root (the state file is the uploader's private directory's).

On every host where kiln's audit is on (``expect["audit"]``: the keys of kiln's rules), AUDIT_RULES: auditd
runs and the kernel holds a rule under each key (``auditctl -l``, the rules loaded, not the files). In a
container the kernel's audit is the host's: the check passes saying so.
"""

from __future__ import annotations

import re
import shlex

from checks.node import Node
from checks.parsers import journal
from checks.verdict import Verdict, fail, ok

_ACTIVE = re.compile(r"^kiln-upload (\S+)$", re.M)
_NOW = re.compile(r"^kiln-now (\d+)$", re.M)
_CURSOR = re.compile(r"^kiln-cursor (set|none)$", re.M)


def probe_command(logs: dict) -> str:
    """One shell line: whether the uploader runs, whether it has a cursor, the first entry after it (JSON),
    and the time on the node."""
    state, unit = shlex.quote(logs["state"]), shlex.quote(logs["unit"])
    return (f"echo kiln-upload $(systemctl is-active {unit}); "
            f"c=$(sed -n 's/^LAST_CURSOR=//p' {state} 2>/dev/null | tail -n 1); "
            "if [ -n \"$c\" ]; then echo kiln-cursor set; "
            "journalctl --after-cursor=\"$c\" -o json -q --no-pager 2>/dev/null | head -n 1; "
            "else echo kiln-cursor none; fi; echo kiln-now $(date +%s)")


AUDIT_PROBE = ("if systemd-detect-virt --container >/dev/null 2>&1; then echo kiln-container; else "
               "echo kiln-auditd $(systemctl is-active auditd.service); auditctl -l 2>&1; fi")


def commands(expect: dict) -> list[str]:
    logs = expect.get("logs") or {}
    return ([probe_command(logs)] if logs else []) + ([AUDIT_PROBE] if expect.get("audit") else [])


def audit_rules(audit: dict, output: str) -> Verdict:
    if output.strip() == "kiln-container":
        return ok("AUDIT_RULES", "a container: the kernel's audit is its host's (kiln's rules are not loaded here)")
    state = re.search(r"^kiln-auditd (\S+)$", output, re.M)
    if not state:
        return fail("AUDIT_RULES", f"could not ask the audit system here ({output.strip()[-160:] or 'no output'})")
    loaded = set(re.findall(r"(?:-k |key=)(\S+)", output))
    missing = [k for k in audit["keys"] if k not in loaded]
    if state.group(1) != "active" or missing:
        said = [f"auditd is {state.group(1)}"] if state.group(1) != "active" else []
        said += [f"no rule loaded under {', '.join(missing)}"] if missing else []
        return fail("AUDIT_RULES", "; ".join(said) + ": augenrules --load (kiln's rules are /etc/audit/rules.d/"
                    "kiln.rules), systemctl start auditd, or kiln deploy")
    return ok("AUDIT_RULES", f"auditd runs with kiln's rules ({len(audit['keys'])} keys loaded)")


def oldest_unsent(output: str) -> float | None:
    """When the first entry after the uploader's cursor was written (epoch seconds), None when there is none."""
    for line in output.splitlines():
        if line.startswith("{"):
            data = journal.entry(line)
            return journal.written(data) if data is not None else None
    return None


def judge(logs: dict, output: str) -> Verdict:
    where = f"the log host {logs['log_host']}"
    active, now, cursor = _ACTIVE.search(output), _NOW.search(output), _CURSOR.search(output)
    if not (active and now and cursor):
        return fail("LOG_SHIPPING", f"could not read the journal uploader's state here ({output.strip()[-160:] or 'no output'})")
    # activating: between the tries of an uploader the log host refused (Restart=always): judged by what waits
    if active.group(1) not in ("active", "activating"):
        return fail("LOG_SHIPPING", f"systemd-journal-upload is {active.group(1)}: this host's journal is not sent to "
                    f"{where}; systemctl status systemd-journal-upload, then kiln deploy")
    if cursor.group(1) == "none":
        return fail("LOG_SHIPPING", f"{where} has not accepted one entry of this host's journal yet: is "
                    "systemd-journal-remote.socket listening there, and the port open (kiln check's zones suite)? "
                    "journalctl -u systemd-journal-upload says why")
    first = oldest_unsent(output)
    lag = max(0.0, int(now.group(1)) - first) if first is not None else 0.0
    if lag > logs["lag_seconds"]:
        return fail("LOG_SHIPPING", f"this host's journal entries of the last {lag:.0f} s have not reached {where} "
                    f"(more than {logs['lag_seconds']} s): journalctl -u systemd-journal-upload says why; on the log "
                    "host, systemctl status systemd-journal-remote")
    return ok("LOG_SHIPPING", f"this host's journal reaches {where}" + (f" ({lag:.0f} s behind)" if first else ""))


def run(node: Node, expect: dict) -> list[Verdict]:
    logs, audit = expect.get("logs") or {}, expect.get("audit") or {}
    found = [judge(logs, node.run(probe_command(logs)).stdout)] if logs else []
    return found + ([audit_rules(audit, node.run(AUDIT_PROBE).stdout)] if audit else [])
