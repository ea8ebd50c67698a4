"""Ansible host patterns (``--limit``) resolved on the validated cluster, the way Ansible resolves them.

Supported, as in Ansible: ``all``, host and group names, globs (``gpu0*``), regular expressions
(``~gpu0[12]``), subscripts (``compute[0]``, ``compute[1:3]``, ``compute[1-3]``, ``compute[-1]``; as in
Ansible, ``name[1-3]`` is a subscript, not a glob), and lists joined with ``,`` or ``:``
where ``&name`` intersects and ``!name`` excludes. Unions are taken first, then intersections, then
exclusions; the result keeps inventory order. A term that matches nothing is an error, since a
typo in ``--limit`` must not silently deploy to fewer hosts than meant.
"""

from __future__ import annotations

import fnmatch
import re

from kiln.inventory.model import Cluster

# Ansible's subscripts: [N], [-N], [A:B], [A-B], [A:]
_SUBSCRIPT = re.compile(r"^(?P<pattern>.+)\[(?:(?P<index>-?\d+)|(?P<start>\d+)[:-](?P<end>\d+)?)\]$", re.ASCII)


class LimitError(ValueError):
    pass


def split_patterns(pattern: str) -> list[str]:
    """Split on ``,``; without commas on ``:`` outside brackets (Ansible's rule)."""
    pattern = pattern.strip()
    if "," in pattern:
        return [p.strip() for p in pattern.split(",") if p.strip()]
    terms, depth, current = [], 0, ""
    for ch in pattern:
        depth += (ch == "[") - (ch == "]")
        if ch == ":" and depth == 0 and not current.startswith("~"):
            terms.append(current)
            current = ""
        else:
            current += ch
    terms.append(current)
    return [t.strip() for t in terms if t.strip()]


def _match(cluster: Cluster, term: str) -> list[str]:
    subscript = _SUBSCRIPT.match(term)
    if subscript and not term.startswith("~"):
        hosts = _match(cluster, subscript["pattern"])
        if subscript["index"] is not None:
            index = int(subscript["index"])
            return [hosts[index]] if -len(hosts) <= index < len(hosts) else []
        start = int(subscript["start"])
        end = int(subscript["end"]) if subscript["end"] else len(hosts) - 1
        return hosts[start:end + 1]
    if term.startswith("~"):
        regex = re.compile(term[1:])
        match_name = lambda name: bool(regex.match(name))  # noqa: E731
    else:
        match_name = lambda name: fnmatch.fnmatchcase(name, term)  # noqa: E731
    if term in ("all", "*"):
        return list(cluster.hosts)
    if term in cluster.groups:
        return list(cluster.groups[term])
    if term in cluster.hosts:
        return [term]
    found: list[str] = []
    for group, members in cluster.groups.items():
        if match_name(group):
            found += [h for h in members if h not in found]
    found += [h for h in cluster.hosts if match_name(h) and h not in found]
    return found


def resolve_limit(cluster: Cluster, pattern: str | None) -> list[str]:
    """Host names selected by ``pattern`` (all hosts when None), in inventory order."""
    if not pattern:
        return list(cluster.hosts)
    union: list[str] = []
    intersections: list[set[str]] = []
    exclusions: set[str] = set()
    for term in split_patterns(pattern):
        kind, name = ("!", term[1:]) if term.startswith("!") else ("&", term[1:]) if term.startswith("&") else ("", term)
        hosts = _match(cluster, name)
        if not hosts and kind != "!":
            raise LimitError(f"--limit term {term!r} matches no host or group of the inventory")
        if kind == "!":
            exclusions |= set(hosts)
        elif kind == "&":
            intersections.append(set(hosts))
        else:
            union += [h for h in hosts if h not in union]
    if not union and (intersections or exclusions):
        union = list(cluster.hosts)
    chosen = [h for h in union if h not in exclusions and all(h in s for s in intersections)]
    order = {name: i for i, name in enumerate(cluster.hosts)}
    return sorted(chosen, key=order.__getitem__)
