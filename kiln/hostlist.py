"""Host lists as Slurm and ClusterShell write them (``gpu[001-031,033]``), through ClusterShell's NodeSet:
folded here, expanded by checks/parsers/hostlist.py (the hosts' reader, the same library).

Used for every list kiln folds for a person (summaries, progress) or for Slurm (slurm.conf's NodeName and
Nodes=), and to read the node lists Slurm prints (``squeue -o %N``) without asking ``scontrol show
hostnames`` over SSH.
"""

from __future__ import annotations

from collections.abc import Iterable

from ClusterShell.NodeSet import NodeSet, NodeSetParseError

from checks.parsers.hostlist import HOSTLIST_LIMIT, expand_hostlist
from checks.parsers.scontrol import SlurmRecordError


class HostListError(ValueError):
    pass


def fold(names: Iterable[str]) -> str:
    """``["gpu001", "gpu002", "gpu004"]`` -> ``gpu[001-002,004]`` (sorted, duplicates once)."""
    names = list(names)
    if not names:
        return ""
    try:
        return str(NodeSet.fromlist(names))
    except NodeSetParseError as e:
        raise HostListError(f"cannot fold host names {names[:3]}...: {e}") from None


def expand(expression: str, limit: int = HOSTLIST_LIMIT) -> list[str]:
    """``gpu[001-002,004],ctl`` -> its host names, as Slurm lists them (sorted). A list of more than
    ``limit`` names is refused before anything is expanded (a range of a hundred million names would take
    minutes and gigabytes to reach its first)."""
    try:
        return expand_hostlist(expression, limit)
    except SlurmRecordError as e:
        raise HostListError(f"not a host list kiln reads: {e}") from None


def group(outcomes: dict[str, object]) -> list[tuple[object, list[str]]]:
    """Hosts with the same outcome together: [(outcome, hosts)], in the order outcomes first appear."""
    groups: dict[object, list[str]] = {}
    for host, outcome in outcomes.items():
        groups.setdefault(outcome, []).append(host)
    return list(groups.items())
