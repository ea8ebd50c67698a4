"""The batches of a rollout and the rule that bounds them: pure functions of the inventory and of what
Slurm says about the nodes (``scontrol show node -o``), tested without a cluster.

Service nodes (controller, database, login: anything not in ``compute``) come first, one at a time,
never drained: the controller is upgraded before the nodes that talk to it. Compute nodes follow: a
canary batch, then batches of at most ``max_unavailable``. Before each compute batch the rollout
asks Slurm again and shrinks the batch so that at least N - max_unavailable compute nodes stay in
service, counting nodes that are out for any other reason; kiln never takes out the last one allowed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from checks.parsers.scontrol import SlurmRecordError, show_nodes
from checks.drain_reasons import KILNS, classify

OUT_OF_SERVICE = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "REBOOT", "POWER", "INVAL")  # INVAL: INVALID_REG


class PlanError(ValueError):
    """Options that cannot make a rollout (nothing touched)."""


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str            # e.g. IDLE, MIXED, IDLE+DRAIN, DOWN*
    reason: str = ""
    boot_time: str = ""

    @property
    def flags(self) -> set[str]:
        return set(re.split(r"[+]", self.state.rstrip("*~#!%$@^-")))

    @property
    def in_service(self) -> bool:
        return not self.state.endswith("*") and not any(f.startswith(OUT_OF_SERVICE) for f in self.flags)

    @property
    def down(self) -> bool:
        return self.state.endswith("*") or bool(self.flags & {"DOWN", "NOT_RESPONDING", "FAIL"})

    @property
    def drained_by_person(self) -> bool:
        return any(f.startswith("DRAIN") for f in self.flags) and classify(self.reason).by not in KILNS

    @property
    def drained_by_kiln(self) -> bool:
        return any(f.startswith("DRAIN") for f in self.flags) and classify(self.reason).by in KILNS


def parse_nodes(text: str) -> dict[str, SlurmNode]:
    """``scontrol show node -o`` (one node a line) -> name -> SlurmNode. An answer that does not parse
    whole (a drain reason that holds a newline and another node's line) raises PlanError."""
    try:
        shown = show_nodes(text)
    except SlurmRecordError as e:
        raise PlanError(f"scontrol show node printed what kiln cannot read whole: {e}") from None
    nodes = {}
    for name, f in shown.items():
        nodes[name] = SlurmNode(name, f.get("State", ""), f.get("Reason", ""), f.get("BootTime", ""))
    return nodes


def parse_max_unavailable(text: str, total: int) -> int:
    """``2`` or ``25%`` of ``total`` compute nodes (at least 1)."""
    m = re.fullmatch(r"\s*(\d+)\s*(%?)\s*", str(text))
    if not m or int(m.group(1)) == 0:
        raise PlanError(f"--max-unavailable {text!r}: give a count such as 2 or a share such as 25% (above 0)")
    if m.group(2):
        return max(1, math.floor(total * int(m.group(1)) / 100))
    return int(m.group(1))


@dataclass
class Plan:
    service: list[str]                       # one at a time, not drained
    compute: list[list[str]]                 # batches, canary first
    skipped: dict[str, str] = field(default_factory=dict)  # node -> why (kept as it is)
    total_compute: int = 0
    max_unavailable: int = 1
    service_after: list[str] = field(default_factory=list)  # after the compute nodes (a Slurm upgrade's clients)
    slurm_upgrade: dict = field(default_factory=dict)       # from, to, steps (kiln/patch/slurm_upgrade.py)

    def as_dict(self) -> dict:
        return {"service": self.service, "compute_batches": self.compute, "skipped": self.skipped,
                "total_compute": self.total_compute, "max_unavailable": self.max_unavailable,
                "service_after": self.service_after, "slurm_upgrade": self.slurm_upgrade}

    @classmethod
    def from_dict(cls, data: dict) -> "Plan":
        """The plan as ``as_dict`` wrote it into a journal's start record."""
        return cls(data["service"], data["compute_batches"], data["skipped"], data["total_compute"],
                   data["max_unavailable"], data.get("service_after", []), data.get("slurm_upgrade", {}))


def make_plan(service: list[str], compute: list[str], all_compute: list[str], slurm: dict[str, SlurmNode],
              max_unavailable: int, canary: int) -> Plan:
    """Batches for the selected ``service`` and ``compute`` hosts (inventory order). Nodes drained by a
    person are skipped with their reason kept; nodes Slurm has down are reported and skipped."""
    plan = Plan(list(service), [], total_compute=len(all_compute), max_unavailable=max_unavailable)
    queue = []
    for name in compute:
        node = slurm.get(name)
        if node is None:
            plan.skipped[name] = "unknown to Slurm (not in slurm.conf yet? run kiln deploy first)"
        elif node.down:
            plan.skipped[name] = f"down in Slurm ({node.state}{': ' + node.reason if node.reason else ''})"
        elif node.drained_by_person:
            plan.skipped[name] = f"drained by a person, kept: {node.reason!r}"
        else:
            queue.append(name)
    if canary and queue:
        plan.compute.append(queue[:canary])
        queue = queue[canary:]
    while queue:
        plan.compute.append(queue[:max_unavailable])
        queue = queue[max_unavailable:]
    return plan


def next_batch(queue: list[str], slurm: dict[str, SlurmNode], all_compute: list[str], max_unavailable: int,
               size: int, held: set[str]) -> list[str]:
    """The next compute batch, in plan order. Nodes this rollout drained already (``held``: its journal
    says so, and Slurm still shows kiln's drain; a resumed rollout) come first and need no room; a node
    already out of service for another reason takes no room either; the others join while ``room``
    allows, up to ``size``. Empty: no node may leave service now."""
    left = room(slurm, all_compute, max_unavailable)
    batch = [n for n in queue if n in held and slurm.get(n) and slurm[n].drained_by_kiln] if held else []
    chosen = set(batch)
    for n in queue:
        if len(batch) >= size:
            break
        if n in chosen:
            continue
        if slurm.get(n) and not slurm[n].in_service:
            batch.append(n)
        elif left > 0:
            batch.append(n)
            left -= 1
    return batch


def budget_spent(failed: list[str], budget: int) -> bool:
    """Whether the failed nodes use up the rollout's failure budget (it stops then)."""
    return len(failed) >= budget


def room(slurm: dict[str, SlurmNode], all_compute: list[str], max_unavailable: int) -> int:
    """How many more compute nodes may leave service now without fewer than N - max_unavailable in service."""
    in_service = sum(1 for n in all_compute if n in slurm and slurm[n].in_service)
    return max(0, in_service - (len(all_compute) - max_unavailable))
