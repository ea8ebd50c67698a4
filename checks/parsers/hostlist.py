"""Slurm's host lists (``gpu[01-02],cpu05``) read one way on both sides: ClusterShell's NodeSet (the
library Slurm sites use; Debian packages it for hosts as python3-clustershell, which the health role
installs wherever kiln's host package goes), behind three rules of kiln's:

- only Slurm's own syntax reaches NodeSet: names, ``[ranges]``, commas (no ``@group`` that NodeSet would
  resolve through a configuration file, no ``!``/``&``/``^`` set operators, no ``/`` steps, no spaces);
- the list is counted from its ranges and refused over a bound before anything is expanded;
- every name it stands for is a node name (letters, digits, ``_ . -``).

kiln/hostlist.py folds lists with the same library and expands through ``expand_hostlist``. Pure."""

from __future__ import annotations

import re

from ClusterShell.NodeSet import NodeSet, NodeSetParseError, RangeSetParseError

from checks.parsers.scontrol import SlurmRecordError

HOSTLIST_LIMIT = 100_000  # names one host list may stand for; more is refused before it is expanded


def hostlist_size(expression: str) -> int:
    """How many names ``expression`` stands for, counted without expanding it."""
    total = 0
    for term in _terms(expression):
        size = 1
        for ranges in re.findall(r"\[([^\[\]]*)\]", term):
            size *= sum(_range_size(r) for r in ranges.split(","))
        total += size
    return total


SLURM_SYNTAX = re.compile(r"[A-Za-z0-9_.,\[\]-]+", re.ASCII)


def expand_hostlist(expression: str, limit: int = HOSTLIST_LIMIT) -> list[str]:
    """``gpu[01-02],cpu05`` -> ['cpu05', 'gpu01', 'gpu02'] (NodeSet's order: sorted; several ranges per
    name, text after a bracket, zero padding as written); a list of more than ``limit`` names is refused
    before it is expanded."""
    expression = expression.strip()
    if not expression or expression in ("(null)", "None", "n/a"):
        return []
    if not SLURM_SYNTAX.fullmatch(expression):
        raise SlurmRecordError(f"host list {expression[:60]!r} holds what no Slurm host list does")
    size = hostlist_size(expression)
    if size > limit:
        raise SlurmRecordError(f"host list {expression[:60]!r} stands for {size} names, over {limit}")
    try:
        names = list(NodeSet(expression))
    except (NodeSetParseError, RangeSetParseError) as e:
        raise SlurmRecordError(f"host list {expression[:60]!r}: {e}") from None
    for name in names:
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,128}", name):
            raise SlurmRecordError(f"host list {expression[:60]!r} names {name[:60]!r}, not a node name")
    return names


def _terms(expression: str) -> list[str]:
    """The comma-separated names of a host list, commas inside brackets kept."""
    terms, depth, start = [], 0, 0
    for i, c in enumerate(expression):
        if c == "[":
            depth += 1
            if depth > 1:
                raise SlurmRecordError(f"nested brackets in host list {expression[:60]!r}")
        elif c == "]":
            depth -= 1
            if depth < 0:
                raise SlurmRecordError(f"unbalanced brackets in host list {expression[:60]!r}")
        elif c == "," and depth == 0:
            terms.append(expression[start:i])
            start = i + 1
    if depth:
        raise SlurmRecordError(f"unbalanced brackets in host list {expression[:60]!r}")
    terms.append(expression[start:])
    if any(not t for t in terms):
        raise SlurmRecordError(f"an empty name in host list {expression[:60]!r}")
    return terms


def _bounds(text: str) -> tuple[str, str]:
    m = re.fullmatch(r"(\d{1,18})(?:-(\d{1,18}))?", text)
    if not m or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
        raise SlurmRecordError(f"{text[:40]!r} is not a range of a host list")
    return m.group(1), m.group(2) or m.group(1)


def _range_size(text: str) -> int:
    a, b = _bounds(text)
    return int(b) - int(a) + 1

