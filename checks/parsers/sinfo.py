"""``sinfo``: the one reader of its output. Pure, standard library only.

Asked one node a line (``-N``) with a separator made for the call (checks/parsers/delimited.py) and the
node's name first and last: a drain reason (an admin's or a tool's free text) holding a newline and
another node's line stays that reason's text.

Text, not ``sinfo --json``, by choice: Slurm 22.05 (Debian 12) prints JSON that holds these fields
(openapi v0.0.38: ``state``, ``reason``, ``reason_changed_at``), but the releases kiln runs print it in
different shapes (24.11 on Debian 13: data_parser v0.0.40+, states as lists, times as ``{set, infinite,
number}`` objects), and every node's every field on each call; the framed text is the same on both
releases, holds only what kiln reads, and no value can forge it.
"""

from __future__ import annotations

from dataclasses import dataclass

from checks.parsers.delimited import Records, records

NODE_NAME = r"[A-Za-z0-9_.-]{1,128}"
# The marks sinfo puts after a long state (%T): * not responding, ~ powered off, # powering up, ! power-down
# pending, % powering down, $ maintenance, @ reboot pending, ^ reboot issued, - planned
STATE_MARKS = "*~#!%$@^-+"


def nodes_command(sep: str, names: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Every node (or those of ``names``) once per partition: name, long state, when its reason was set,
    the reason, the name again."""
    only = ["-n", ",".join(names)] if names else []
    return ["sinfo", "-h", "-N", *only, "-o", sep.join(("%N", "%T", "%H", "%E", "%N"))]


@dataclass(frozen=True)
class SinfoNode:
    name: str
    state: str         # sinfo's long state: idle, drained, draining, down*, mixed, ...
    reason_time: str   # Slurm's time the reason was set, or Unknown
    reason: str        # '' when Slurm has none


def base_state(long_state: str) -> str:
    """A long state without its marks, in lower case: ``drained^`` -> ``drained``, ``DOWN*`` -> ``down``."""
    return long_state.strip().rstrip(STATE_MARKS).lower()


def out_of_service(long_state: str) -> bool:
    """Slurm schedules nothing there: drained or draining, down, failed, ``inval`` (it refused the node's
    registration: fewer GPUs, memory or CPUs than configured), or being rebooted. A node Slurm reboots shows
    ``reboot^`` (issued) or ``reboot@``/``reboot`` (asked), and before its drain: Slurm 22.05 and later print
    the reboot first for a node neither allocated nor mixed, so a drained node mid-reboot reads ``reboot^``."""
    s = base_state(long_state)
    return "drain" in s or s.startswith(("down", "fail", "inval", "reboot"))


def rebooting(long_state: str) -> bool:
    """Slurm has a reboot of the node asked or under way (``reboot``, ``reboot@``, ``reboot^``, ``reboot*``)."""
    return base_state(long_state).startswith("reboot")


def read_nodes(text: str, sep: str) -> tuple[dict[str, SinfoNode], Records]:
    """``nodes_command``'s output: node -> its first line (a node is listed once per partition)."""
    framed = records(text, sep, 5, first=NODE_NAME, last=NODE_NAME)
    nodes: dict[str, SinfoNode] = {}
    for name, state, when, reason, again in framed.rows:
        if name != again:
            framed.refuse(sep.join((name, state, when, reason, again)))
            continue
        nodes.setdefault(name, SinfoNode(name, state.strip(), when, "" if reason in ("none", "(null)") else reason))
    return nodes, framed
