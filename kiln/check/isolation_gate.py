"""The isolation suite (checks/isolation.py) as a gate after every change kiln makes: ``kiln deploy`` runs it
on the login hosts it deployed, ``kiln patch`` on every login host after each batch and service node. A
probe that gets through fails the deploy (exit 1) and stops the rollout: the change is kept (a deploy is
not undone), and the operator is told what got through and how to look again (``kiln check --suite
isolation``). A protection the inventory itself turns off only warns (the suite's ``allowed``).

Where the inventory has no probe account (no team with a ``probe_uid`` or a ``probe_user``) there is nothing to run: the gate
says so once and passes.
"""

from __future__ import annotations

from checks.verdict import Verdict
from kiln.check.remote import RemoteCheck
from kiln.inventory.model import Cluster, Host

SUITE = "isolation"
UNREACHABLE = "NODE_UNREACHABLE"  # kiln check's verdict for a host SSH did not reach: not probed, no finding


def gate_hosts(cluster: Cluster, names: list[str]) -> list[Host]:
    """The login hosts among ``names`` where the suite has probes to run (none without a probe account)."""
    if not any(t.probe() for t in cluster.teams):
        return []
    wanted = set(names)
    return [h for h in cluster.user_logins if h.name in wanted]


def run_gate(cluster: Cluster, names: list[str], forks: int = 64, log=None) -> dict[str, list[Verdict]]:
    """Host -> the isolation suite's verdicts, on ``gate_hosts(cluster, names)`` over SSH; {} where none.
    ``log``: the run's log (kiln.runlog.RunLog), told each verdict."""
    hosts = gate_hosts(cluster, names)
    if not hosts:
        return {}
    with RemoteCheck(cluster, hosts, [SUITE], forks=forks, log=log) as checker:
        checker.collect()
    return checker.results


def failures(results: dict[str, list[Verdict]]) -> dict[str, list[Verdict]]:
    """Host -> its failed verdicts, for the hosts with any. A host SSH did not reach was not probed: no
    probe got through there (a rollout whose controller is lost pauses on Slurm's silence instead)."""
    return {host: bad for host, verdicts in results.items()
            if (bad := [v for v in verdicts if v.failed and v.id != UNREACHABLE])}


def lines(results: dict[str, list[Verdict]]) -> list[str]:
    """What the gate found, for a person: one line when every probe held; else each failure (and each
    warning) on its own, with what to do."""
    if not results:
        return []
    failed = failures(results)
    said = [(h, v) for h, vs in results.items() for v in vs if v.severity == "warn" or v.id == UNREACHABLE]
    out = [f"isolation: {h} {'not probed' if v.id == UNREACHABLE else v.id}: {v.message}" for h, v in said]
    if not failed:
        probed = {h: vs for h, vs in results.items() if not any(v.id == UNREACHABLE for v in vs)}
        held = sum(len(vs) for vs in probed.values())
        return out + ([f"isolation: {held} probe(s) held on {', '.join(probed)}"] if probed else [])
    for host, bad in failed.items():
        out += [f"isolation: FAILED {host} {v.id}: {v.message}" for v in bad]
    return out + ["isolation: a team's probe got through: fix what each line names, then kiln check --suite "
                  "isolation"]


def rollout_stop(after: str, results: dict[str, list[Verdict]]) -> str | None:
    """Why a rollout stops after ``after`` (a batch, a service node) on the gate's ``results``; None when
    every probe held."""
    failed = failures(results)
    if not failed:
        return None
    found = "; ".join(f"{h} {v.id}: {v.message}" for h, vs in failed.items() for v in vs)
    return (f"the isolation suite failed after {after}: {found}. The nodes done so far stay as they are; fix what it "
            "names (kiln check --suite isolation shows it), then kiln patch again (patched nodes are skipped)")
