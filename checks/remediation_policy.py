"""kiln-remediate's decisions, pure: the journal replayed into each node's history, and for each node
what to do now. No I/O and an injected clock, so every rule is a unit test (tests/unit/test_remediation.py).

A fault episode opens when a node is seen drained (or downed) for a check, kiln's or Slurm's own
(``checks/repairs.check_of``), and closes when the node is back in service. Within it the node climbs
its check's ladder (``checks/repairs.ladder``) one step per look, each step counted as tried from the
moment it starts (a step cut short by a crash is never redone: the next look checks the node and goes
on). Nothing is done to:

+ a node drained by a person (any reason that is not kiln's or Slurm's own), or by a kiln rollout
  (``kiln: patch ...``), or already escalated (``kiln: escalated ...``, waits for a person);
+ a node running jobs, unless the step is safe for them (restarting slurmd or munge);
+ any node while the circuit breaker is open: more than ``breaker_percent`` of the compute nodes (and
  at least two) failed within ``breaker_minutes`` (a fabric or storage outage is no node fault). It stays open until a person
  resets it.

A new fault waits ``settle_seconds`` before its first step, so an outage that takes many nodes within
moments opens the breaker before any node is touched.

Escalation: the ladder's end; a step kind over its budget (``budget_per_kind`` per ``budget_hours`` per
node); a repeat offender (``repeat_offender_faults`` episodes repaired and returned within
``repeat_offender_days``); a reboot not back within ``reboot_timeout_seconds``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from checks import repairs
from checks.drain_reasons import classify
from checks.parsers import sinfo
from checks.slurm import ESCALATED_PREFIX, PATCH_PREFIX, REPAIR_PREFIX

BREAKER_MIN_NODES = 2  # one node failing is a node fault, however small the cluster
BUSY = ("draining", "mixed", "allocated", "completing")  # sinfo states of a node that runs jobs


@dataclass(frozen=True)
class NodeView:
    """One compute node as Slurm shows it now (sinfo -N, scontrol show node)."""

    name: str
    state: str               # sinfo's long state: idle, drained, draining, down, mixed, ...
    reason: str = ""
    boot_time: float | None = None
    drained_at: float | None = None  # when Slurm took the reason (sinfo %H)

    @property
    def out_of_service(self) -> bool:
        """Drained, down, failed, ``inval`` or being rebooted (checks/parsers/sinfo.py): a drained node
        that Slurm reboots for kiln's repair shows ``reboot^``, and is not back in service."""
        return sinfo.out_of_service(self.state)

    @property
    def running_jobs(self) -> bool:
        return sinfo.base_state(self.state).startswith(BUSY)


@dataclass
class Episode:
    check: str
    opened: float
    # {"step", "t", "result": None|"ok"|"failed"|"interrupted"|"unreachable"}
    steps: list[dict] = field(default_factory=list)


@dataclass
class NodeHistory:
    episode: Episode | None = None
    returned: list[float] = field(default_factory=list)    # when episodes with a repair ended in service
    step_times: list[tuple[str, float]] = field(default_factory=list)  # (kind, t) of every step started
    escalated: bool = False
    last_held: str = ""


@dataclass
class History:
    nodes: dict[str, NodeHistory] = field(default_factory=dict)
    breaker_open: bool = False
    breaker_why: str = ""

    def node(self, name: str) -> NodeHistory:
        return self.nodes.setdefault(name, NodeHistory())


def replay(events: list[dict]) -> History:
    """The history the journal's events tell, in order; unknown or malformed events are skipped."""
    h = History()
    for e in events:
        kind, name, t = e.get("event"), e.get("node", ""), e.get("t", 0.0)
        if kind == "breaker_open":
            h.breaker_open, h.breaker_why = True, e.get("why", "")
            continue
        if kind == "breaker_reset":
            h.breaker_open, h.breaker_why = False, ""
            continue
        if not isinstance(name, str) or not name:
            continue
        n = h.node(name)
        if kind == "fault":
            n.episode, n.escalated = Episode(e.get("check", ""), t), False
        elif kind == "step" and n.episode is not None:
            n.episode.steps.append({"step": e.get("step", ""), "t": t, "result": None})
            n.step_times.append((repairs.kind(e.get("step", "")), t))
        elif kind == "result" and n.episode is not None and n.episode.steps:
            n.episode.steps[-1]["result"] = e.get("result")
            n.episode.steps[-1]["detail"] = str(e.get("detail", ""))
        elif kind == "escalated":
            n.escalated = True
        elif kind == "closed":  # the episode's own fault cleared; a new one follows at once
            n.episode, n.escalated = None, False
        elif kind in ("returned", "released"):
            if kind == "returned" and n.episode is not None and n.episode.steps:
                n.returned.append(t)
            n.episode, n.escalated = None, False
        elif kind == "held":
            n.last_held = e.get("why", "")
    return h


@dataclass(frozen=True)
class Settings:
    settle_seconds: int = 60
    budget_per_kind: int = 2
    budget_hours: int = 24
    repeat_offender_faults: int = 2
    repeat_offender_days: int = 7
    breaker_percent: int = 50
    breaker_minutes: int = 10
    reboot_timeout_seconds: int = 900


@dataclass(frozen=True)
class Decision:
    """``action``: none | open | step | verify | return | escalate | hold | release."""

    action: str
    why: str = ""
    step: str = ""
    check: str = ""


_CHECK_ID = re.compile(repairs.CHECK_ID)


def judge(check: str, passed: bool, failing: list[str]) -> tuple[str, str]:
    """A step's result, judged by the check it was for: ``("ok", "")`` when the node passes,
    ``("failed", "")`` while it still fails that check (or its checks could not be read, or the fault
    was Slurm's own, which no node check names), ``("ok", OTHER)`` when that check passes now and the
    node fails OTHER instead: a new fault (the node came back and failed again between two looks, or
    the repair showed another fault), which gets its own episode and ladder instead of the next rung of
    the old one."""
    if passed:
        return "ok", ""
    ids = [line.split(" ", 1)[0] for line in failing]
    if check.startswith("SLURM_") or not ids or check in ids or not all(_CHECK_ID.fullmatch(i) for i in ids):
        return "failed", ""
    return "ok", ids[0]


# How heavy a ladder's first step is: a fault that needs a person first, then a reboot (which also
# restarts every service and resets every GPU), a GPU reset, a service restart
_WEIGHT = {repairs.ESCALATE: 4, repairs.REBOOT: 3, repairs.RESET: 2}


def most_severe(checks: list[str]) -> str:
    """Of the faults a node has at once (its drain reason's and those its checks fail now), the one whose
    ladder it climbs: the heaviest first step, the first given on a tie. A node whose slurmd stopped
    (restart) and whose GPU fell off the bus (Xid 79: reboot) is rebooted, which cures both."""
    known = [c for c in checks if c and c != "UNKNOWN"] or list(checks[:1])
    return max(known, key=lambda c: (_WEIGHT.get(repairs.ladder(c)[0], 1), -known.index(c)))


def owner(view: NodeView) -> str:
    """Who holds the node out of service: "" (in service), "kiln" (a check or kiln's repair), "slurm"
    (Slurm's own reason), "rollout", "escalated" or "person" (a ``kiln:`` reason naming no check, too)."""
    if not view.out_of_service:
        return ""
    drain = classify(view.reason)
    if drain.by == "repair" or (drain.by == "kiln" and drain.check):
        return "kiln"
    return drain.by if drain.by in ("rollout", "escalated", "slurm") else "person"


def breaker(views: list[NodeView], history: History, s: Settings, now: float) -> str:
    """Why the breaker must open now, or "": the share of compute nodes that kiln or Slurm took out of
    service within the window (episodes opened then, or about to open)."""
    if not views:
        return ""
    recent = []
    for v in views:
        if owner(v) not in ("kiln", "slurm"):
            continue
        ep = history.nodes.get(v.name, NodeHistory()).episode
        opened = ep.opened if ep is not None else (v.drained_at or now)
        if now - opened <= s.breaker_minutes * 60:
            recent.append(v.name)
    if len(recent) >= BREAKER_MIN_NODES and 100 * len(recent) > s.breaker_percent * len(views):
        return (f"{len(recent)} of {len(views)} compute nodes failed within {s.breaker_minutes} min "
                f"(more than {s.breaker_percent} %): {', '.join(sorted(recent)[:8])}")
    return ""


def decide(view: NodeView, n: NodeHistory, s: Settings, now: float, breaker_open: bool,
           bmc: bool = False) -> Decision:
    """What to do with one node now; ``bmc``: the inventory names the node's BMC (a node that answers
    nothing can be power-cycled)."""
    who = owner(view)
    ep = n.episode
    if who == "":
        return Decision("return", "back in service") if ep is not None else Decision("none")
    if who in ("person", "rollout"):
        why = "in a kiln rollout" if who == "rollout" else \
            "rebooted by a person" if sinfo.rebooting(view.state) else "drained by a person"
        return Decision("release", why) if ep is not None else Decision("hold", why)
    if who == "escalated":
        return Decision("hold", "escalated: waits for a person")
    if ep is None:
        check = repairs.check_of(view.reason) or "UNKNOWN"
        return Decision("open", f"drained: {view.reason}", check=check)
    if breaker_open:
        return Decision("hold", "circuit breaker open: no automatic repair until kiln remediate --reset-breaker")
    last = ep.steps[-1] if ep.steps else None
    if last is not None and last["result"] == "unreachable":
        return _out_of_band(ep, n, s, now, bmc)
    if last is not None and last["step"] == repairs.POWER_CYCLE and last["result"] == "failed":
        return Decision("escalate", f"its BMC did not power-cycle it: {last.get('detail', '')}"[:300], check=ep.check)
    if last is not None and last["result"] is None:
        if last["step"] in (repairs.REBOOT, repairs.POWER_CYCLE):
            what = "its reboot" if last["step"] == repairs.REBOOT else "its power cycle"
            if view.boot_time is not None and view.boot_time > last["t"] and "*" not in view.state:
                return Decision("verify", f"back from {what}", step=last["step"], check=ep.check)
            if now - last["t"] > s.reboot_timeout_seconds:
                return Decision("escalate", f"not back {s.reboot_timeout_seconds} s after {what}", check=ep.check)
            return Decision("hold", f"{what.removeprefix('its ')} in progress")
        return Decision("verify", "a step was cut short", step=last["step"], check=ep.check)
    ladder = repairs.ladder(ep.check)
    if not ep.steps and now - ep.opened < s.settle_seconds:
        return Decision("hold", f"settling: a new fault waits {s.settle_seconds} s (an outage of many nodes opens "
                        "the breaker first)")
    if not ep.steps:
        window = s.repeat_offender_days * 86400
        repaired = [t for t in n.returned if now - t <= window]
        if len(repaired) >= s.repeat_offender_faults:
            return Decision("escalate", f"repeat offender: repaired {len(repaired)} times within "
                            f"{s.repeat_offender_days} days", check=ep.check)
    index = len(ep.steps)
    step = ladder[min(index, len(ladder) - 1)]
    if step == repairs.WAIT:
        return Decision("hold", f"{ep.check}: nothing on the node to repair; it returns by itself once what it waits "
                        "for answers (see the check's reason)")
    if step == repairs.ESCALATE:
        tried = ", ".join(x["step"] for x in ep.steps) or "none"
        return Decision("escalate", f"no automatic repair left for {ep.check} (tried: {tried})", check=ep.check)
    used = [t for k, t in n.step_times if k == repairs.kind(step) and now - t <= s.budget_hours * 3600]
    if len(used) >= s.budget_per_kind:
        return Decision("escalate", f"{repairs.kind(step)} budget spent: {len(used)} within {s.budget_hours} h",
                        check=ep.check)
    if view.running_jobs and step not in repairs.SAFE_UNDER_JOBS:
        return Decision("hold", f"{step} waits for the node's running jobs to end")
    return Decision("step", f"{ep.check}: step {index + 1} of {len(ladder)}", step=step, check=ep.check)


def _out_of_band(ep: Episode, n: NodeHistory, s: Settings, now: float, bmc: bool) -> Decision:
    """A node that answered neither Slurm nor SSH at its last step: no step on the node can run. Its BMC
    power-cycles it, once an episode and within the power-cycle budget; else a person's turn."""
    why = "answers neither Slurm nor SSH (its power, its network or a hung kernel)"
    if not bmc:
        return Decision("escalate", f"{why}; the inventory names no BMC to power-cycle it (kiln_bmc)", check=ep.check)
    if any(x["step"] == repairs.POWER_CYCLE for x in ep.steps):
        return Decision("escalate", f"{why}, after a power cycle", check=ep.check)
    used = [t for k, t in n.step_times if k == repairs.POWER_CYCLE and now - t <= s.budget_hours * 3600]
    if len(used) >= s.budget_per_kind:
        return Decision("escalate", f"{why}; power-cycle budget spent: {len(used)} within {s.budget_hours} h",
                        check=ep.check)
    return Decision("step", f"{why}: power-cycled through its BMC", step=repairs.POWER_CYCLE, check=ep.check)
