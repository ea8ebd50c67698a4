"""Slurm QoS from ``kiln_qos`` and the QoS each team may use: the sacctmgr words and the comparison with
what the accounting database holds (read by ``roles.slurm_accounting.SlurmAccountingState``).

Pure. A QoS is made in two steps, ``sacctmgr add qos NAME`` then ``sacctmgr modify qos where name=NAME
set ...`` with every setting kiln owns, so a setting removed from the inventory is cleared (``-1``, empty)
rather than left behind, and a QoS that preempts another is set only after every QoS exists. kiln owns
the ``gres/gpu`` part of the TRES limits; other TRES a site set on the same QoS stay as they are. QoS
that are not in the inventory are left alone, and so are the QoS of a team whose ``qos`` is empty.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from checks.parsers import sacctmgr
from checks.parsers.slurm_values import tres
from kiln.inventory.schema import Qos, Team
from kiln.shell import command

# the fields SlurmAccountingState asks sacctmgr for, in this order
FIELDS = ("name", "priority", "maxwall", "maxtrespu", "maxtrespa", "grptres", "preempt", "preemptmode",
          "usagefactor", "gracetime")


@dataclass(frozen=True)
class QosRow:
    """One QoS as ``sacctmgr -nP show qos format=FIELDS`` prints it."""

    name: str
    priority: str
    max_wall: str
    max_tres_per_user: str
    max_tres_per_account: str
    grp_tres: str
    preempt: str
    preempt_mode: str
    usage_factor: str
    grace_time: str


def rows(text: str) -> tuple[QosRow, ...]:
    """The QoS of ``show_command()``'s output (lines of another shape left out)."""
    return tuple(QosRow(*(row[f] for f in FIELDS)) for row in sacctmgr.read(text, FIELDS)[0] if row["name"])


def show_command() -> list[str]:
    return sacctmgr.show_command("qos", fields=FIELDS)


def seconds(text: str) -> int | None:
    """A Slurm duration as sacctmgr prints it or an inventory gives it (minutes, MM:SS, HH:MM:SS,
    D-HH[:MM[:SS]]) in seconds; None for none/INFINITE/UNLIMITED or anything else."""
    text = text.strip()
    if not text or text.upper() in ("INFINITE", "UNLIMITED"):
        return None
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text, re.ASCII)
    if not m:
        return None
    days, a, b, c = m.group(1), int(m.group(2)), m.group(3), m.group(4)
    if days is not None:  # D-HH[:MM[:SS]]
        return int(days) * 86400 + a * 3600 + int(b or 0) * 60 + int(c or 0)
    if c is not None:     # HH:MM:SS
        return a * 3600 + int(b) * 60 + int(c)
    if b is not None:     # MM:SS
        return a * 60 + int(b)
    return a * 60         # minutes


def _gpus(tres_text: str) -> str:
    """The gres/gpu count of a TRES list, '' when it has none."""
    return tres(tres_text).get("gres/gpu", "")


def _limit(value: int | None) -> str:
    return "" if value is None else str(value)


def differs(row: QosRow, q: Qos) -> bool:
    """Whether the database's QoS differs from the inventory's in anything kiln sets."""
    try:
        factor = float(row.usage_factor)
    except ValueError:
        return True
    return (row.priority != str(q.priority)
            or seconds(row.max_wall) != (seconds(q.max_wall) if q.max_wall else None)
            or _gpus(row.max_tres_per_user) != _limit(q.max_gpus_per_user)
            or _gpus(row.max_tres_per_account) != _limit(q.max_gpus_per_team)
            or _gpus(row.grp_tres) != _limit(q.max_gpus)
            or {p for p in row.preempt.split(",") if p} != set(q.preempt)
            or row.preempt_mode.lower() != (q.preempt_mode or "cluster")
            or abs(factor - q.usage_factor) > 1e-6
            or (seconds(row.grace_time) or 0) != q.grace_seconds)


def add_qos(q: Qos) -> str:
    return command("sacctmgr", "-i", "add", "qos", q.name)


def set_qos(q: Qos) -> str:
    """Every setting kiln owns, cleared where the inventory leaves it unset."""
    gpu = lambda v: f"gres/gpu={-1 if v is None else v}"  # noqa: E731
    return command("sacctmgr", "-i", "modify", "qos", "where", f"name={q.name}", "set",
                   f"Priority={q.priority}", f"MaxWall={q.max_wall or -1}",
                   f"MaxTRESPerUser={gpu(q.max_gpus_per_user)}", f"MaxTRESPerAccount={gpu(q.max_gpus_per_team)}",
                   f"GrpTRES={gpu(q.max_gpus)}", f"Preempt={','.join(q.preempt)}",
                   f"PreemptMode={q.preempt_mode or 'cluster'}", f"UsageFactor={q.usage_factor:g}",
                   f"GraceTime={q.grace_seconds}")


def team_default_qos(team: Team) -> str:
    return team.default_qos or (team.qos[0] if team.qos else "")


def team_qos_differs(qos: str, default_qos: str, team: Team) -> bool:
    """Whether an account's QoS list and default (as sacctmgr prints them) differ from the team's; a team
    without qos is never reported different (kiln leaves its QoS alone)."""
    if not team.qos:
        return False
    return {q for q in qos.split(",") if q} != set(team.qos) or default_qos != team_default_qos(team)


def set_team_qos(cluster: str, team: Team) -> str:
    """The account's QoS and default QoS (its users' associations follow: sacctmgr modifies them too)."""
    return command("sacctmgr", "-i", "modify", "account", "where", f"name={team.name}", f"cluster={cluster}", "set",
                   f"QOS={','.join(team.qos)}", f"DefaultQOS={team_default_qos(team)}")
