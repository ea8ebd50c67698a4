"""Zones suite: each of kiln's firewall rules proven by a connection, never read off a file. From this node,
a TCP connection to each port kiln's firewall knows on other kiln hosts: where the rules let this node in,
the port must answer (a connection, or a reset: the firewall passed it and nothing listens there); where
they do not, the connection must go unanswered (the firewall dropped it).

- ZONES_FIREWALL: a port the rules shut answers this node, or one they open does not.

Expectations (``expect["zones"]``): probes, ``[{host, address, port, allowed}]`` (kiln/check/expectations.py
works out ``allowed`` from roles/firewall_rules.py); empty where kiln_firewall is off. Never in the
node-local runner: the dropped probes each wait out their timeout.
"""

from __future__ import annotations

import re
import shlex

from checks.node import Node
from checks.verdict import Verdict, fail, ok

TIMEOUT = 3  # seconds a dropped connection is waited for (all probes wait at once)
_LINE = re.compile(r"^kiln-probe (\S+) (\d+) (open|refused|dropped)$")


def probe_command(probes: list[dict]) -> str:
    """One shell line: every probe at once, each printing ``kiln-probe ADDRESS PORT open|refused|dropped``
    (bash's /dev/tcp: exit 0 connected, 124 timed out, else refused)."""
    parts = []
    for p in probes:
        target = shlex.quote(f"</dev/tcp/{p['address']}/{int(p['port'])}")
        parts.append(f"(timeout {TIMEOUT} bash -c {target} 2>/dev/null; rc=$?; "
                     f"case $rc in 0) r=open;; 124) r=dropped;; *) r=refused;; esac; "
                     f"echo kiln-probe {shlex.quote(p['address'])} {int(p['port'])} $r) &")
    return "(" + " ".join(parts) + " wait)" if parts else "true"  # one command, wherever it is put


def parse_probes(output: str) -> dict[tuple[str, int], str]:
    """(address, port) -> open, refused or dropped, from probe_command's output."""
    found = {}
    for line in output.splitlines():
        m = _LINE.match(line.strip())
        if m:
            found[(m.group(1), int(m.group(2)))] = m.group(3)
    return found


def commands(expect: dict) -> list[str]:
    probes = (expect.get("zones") or {}).get("probes") or []
    return [probe_command(probes)] if probes else []


def judge(probes: list[dict], found: dict[tuple[str, int], str]) -> Verdict:
    wrong, missing = [], []
    for p in probes:
        got = found.get((p["address"], int(p["port"])))
        if got is None:
            missing.append(f"{p['host']}:{p['port']}")
        elif p["allowed"] and got == "dropped":
            wrong.append(f"{p['host']}:{p['port']} went unanswered (the rules let this node in)")
        elif not p["allowed"] and got != "dropped":
            wrong.append(f"{p['host']}:{p['port']} {'answered' if got == 'open' else 'reset the connection'} "
                         "(the rules shut it to this node)")
    if wrong or missing:
        text = "; ".join(wrong[:6]) + (f" and {len(wrong) - 6} more" if len(wrong) > 6 else "")
        if missing:
            text += ("; " if text else "") + f"no answer to the probes of {', '.join(missing[:4])}"
        return fail("ZONES_FIREWALL", f"{text}: compare each host's rules (nft list table inet kiln) with "
                    "roles/firewall_rules.py; kiln deploy puts them back")
    let_in = sum(1 for p in probes if p["allowed"])
    return ok("ZONES_FIREWALL", f"{len(probes)} probes as the rules say: {let_in} let in, {len(probes) - let_in} "
              "dropped")


def run(node: Node, expect: dict) -> list[Verdict]:
    probes = (expect.get("zones") or {}).get("probes") or []
    if not probes:
        return []
    return [judge(probes, parse_probes(node.run(probe_command(probes)).stdout))]
