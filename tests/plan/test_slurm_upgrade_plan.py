"""A Slurm upgrade's plan for every supported OS, reviewed like the roles' op lists (KILN_UPDATE_PLANS=1
regenerates tests/plan/expected/slurm-upgrade-<os>.json): the order kiln patch takes (backup, slurmdbd,
slurmctld, slurmd batches, client commands), the backup each service host runs first, and the package
operations the slurm role then runs on each kind of host at the new pin (from recorded facts, no
connection). The controller answers ``scontrol version`` with the OS's own Slurm; the pin is the next
release within SchedMD's window as that OS's package source would spell it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from checks.node import Result
from kiln.inventory.model import Secrets
from kiln.patch import journal as journals
from kiln.patch.plan import SlurmNode
from kiln.patch.rollout import Options, Rollout
from kiln.patch.slurm_upgrade import backup_commands
from roles.platform import PLATFORMS
from tests.plan.facts import fresh
from tests.plan.harness import assert_reviewed, plan_host
from tests.plan.test_roles_plan import SLURM, cluster_for

TARGET = {"debian12": "23.11.10-1~bpo12+1", "debian13": "25.05.3-1~bpo13+1", "ubuntu2204": "22.05.11-1ubuntu0.1", "ubuntu2404": "24.05.5-1ubuntu1",
          "rocky9": "24.11.5-330.ohpc.3.3"}


class Controller:
    """What the plan's controller answers: its Slurm (the OS's own) and every node registered with it."""

    def __init__(self, running: str, nodes: list[str]):
        self.name, self.running, self.nodes = "ctl1", running, nodes

    def run(self, command: str) -> Result:
        if command == "scontrol version":
            return Result(0, f"slurm {self.running}\n")
        assert command == "scontrol -o show node", command
        return Result(0, "".join(f"NodeName={n} Version={self.running} State=IDLE\n" for n in self.nodes))


@pytest.mark.parametrize("os", sorted(PLATFORMS))
@pytest.mark.proves("slurm upgrade", tier="plan")
def test_slurm_upgrade_plan_matches_the_reviewed_one(os, monkeypatch, tmp_path):
    cluster = cluster_for(os, slurm=TARGET[os])
    running = SLURM[os].split("-")[0]
    compute = [h.name for h in cluster.compute]
    controller = Controller(running, compute)
    slurm = SimpleNamespace(nodes=lambda: {n: SlurmNode(n, "IDLE") for n in compute})
    checker = SimpleNamespace(node=lambda host: controller, close=lambda: None)
    rollout = Rollout(cluster, Secrets(b"k" * 32, "p"), journals.Journal(tmp_path / "j.jsonl"),
                      Options(roles=["slurm"]), progress=lambda line: None, slurm=slurm, checker=checker)
    plan = rollout.new_plan(list(cluster.hosts))
    upgrade = plan.slurm_upgrade
    assert upgrade["from"] == running and upgrade["to"] == TARGET[os]
    packages = {}
    for name in [*plan.service, compute[0], *plan.service_after]:
        ops = plan_host(cluster, name, os, fresh(os), monkeypatch)
        packages[name] = [[op, cmds] for op, cmds in ops if op.startswith("slurm: packages at")]
        assert packages[name] and TARGET[os] in " ".join(" ".join(c) for _, c in packages[name])
    actual = {"order": upgrade["steps"], "service_first": plan.service, "compute_batches": plan.compute,
              "service_after": plan.service_after,
              "backup": {h: backup_commands("ROLLOUT", h in upgrade["dbd_hosts"], h in upgrade["controllers"])
                         for h in plan.service if h in upgrade["dbd_hosts"] or h in upgrade["controllers"]},
              "packages": packages}
    assert plan.service == ["ctl1"] and plan.service_after == ["login1"]
    assert_reviewed(f"slurm-upgrade-{os}", actual)


# (pin, what the refusal says) per OS: 25.11 is past the window of every OS's own Slurm but Debian 13's
# (24.11, which 25.11 reads); there, going back to 23.11 is refused as a downgrade
OUTSIDE = {os: ("25.11.1-1", r"-> 25.11 skips \d major release\(s\): 25.11 upgrades from 24.05, 24.11, 25.05 only; "
                "go through ") for os in PLATFORMS}
OUTSIDE["debian13"] = ("23.11.10-1~bpo12+1", r"Slurm 24.11 -> 23.11 is a downgrade")


@pytest.mark.parametrize("os", sorted(PLATFORMS))
def test_a_pin_outside_the_window_is_refused_before_anything_is_touched(os, tmp_path):
    from kiln.patch.plan import PlanError
    pin, refusal = OUTSIDE[os]
    cluster = cluster_for(os, slurm=pin)
    compute = [h.name for h in cluster.compute]
    controller = Controller(SLURM[os].split("-")[0], compute)
    touched = []
    slurm = SimpleNamespace(nodes=lambda: {n: SlurmNode(n, "IDLE") for n in compute},
                            drain=lambda *a: touched.append(a))
    checker = SimpleNamespace(node=lambda host: controller, close=lambda: None)
    rollout = Rollout(cluster, Secrets(b"k" * 32, "p"), journals.Journal(tmp_path / "j.jsonl"),
                      Options(roles=["slurm"]), progress=lambda line: None, slurm=slurm, checker=checker)
    with pytest.raises(PlanError, match=refusal):
        rollout.new_plan(list(cluster.hosts))
    assert touched == [] and not (tmp_path / "j.jsonl").read_text()
