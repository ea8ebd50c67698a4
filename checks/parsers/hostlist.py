"""Slurm's host lists (``gpu[01-02],cpu05``) expanded on hosts, with the standard library only (hosts have
no ClusterShell; the operator's side uses it in kiln/hostlist.py, and a test holds the two equal). A list
is counted from its ranges and refused over a bound before anything is expanded. Pure."""

from __future__ import annotations

import re

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


def expand_hostlist(expression: str, limit: int = HOSTLIST_LIMIT) -> list[str]:
    """``gpu[01-02],cpu05`` -> ['gpu01', 'gpu02', 'cpu05'] (several ranges per name, text after a bracket,
    zero padding as written); a list of more than ``limit`` names is refused before it is expanded."""
    expression = expression.strip()
    if not expression or expression in ("(null)", "None", "n/a"):
        return []
    size = hostlist_size(expression)
    if size > limit:
        raise SlurmRecordError(f"host list {expression[:60]!r} stands for {size} names, over {limit}")
    names: list[str] = []
    for term in _terms(expression):
        parts = re.split(r"\[([^\[\]]*)\]", term)
        found = [parts[0]]
        for i in range(1, len(parts), 2):
            items = [n for r in parts[i].split(",") for n in _range(r)]
            found = [f + n + parts[i + 1] for f in found for n in items]
        names += found
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


def _range(text: str) -> list[str]:
    a, b = _bounds(text)
    width = len(a) if a.startswith("0") and len(a) > 1 else 0
    return [f"{i:0{width}d}" for i in range(int(a), int(b) + 1)]
