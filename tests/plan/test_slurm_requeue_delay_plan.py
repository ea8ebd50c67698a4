"""The requeue delay (``kiln_slurm_requeue_delay``, Slurm's ``AuthInfo=cred_expire``): how long a job whose
node was lost waits before it may run again. slurmctld reads it once, when it starts, so a change of it
restarts slurmctld; a deploy that finds it as set restarts nothing. So does a changed node definition
(CPUs, memory, GRES), which scontrol reconfigure would leave slurmctld holding the old one of."""

from __future__ import annotations

import re

import pytest

from roles import slurm_config
from roles.snapshot import UnitState
from tests.plan.facts import fresh
from tests.plan.harness import converged, plan_host
from tests.plan.test_roles_plan import cluster_for

RESTART = "slurm: restart slurmctld (if its files changed)"


def _running_controller(cluster, monkeypatch, conf: str):
    """The controller after a deploy, its slurm.conf being ``conf``: files, packages and units in place."""
    first, ctx = plan_host(cluster, "ctl1", "debian12", fresh("debian12"), monkeypatch, with_context=True)
    snap = converged(first, ctx, fresh("debian12"))
    for unit in ("munge.service", "slurmctld.service", "slurmdbd.service", "mariadb.service"):
        snap.units[unit] = UnitState("loaded", "active", "enabled")
    snap.lines = {i for i, (path, regex) in enumerate(ctx.lines)
                  if path == "/etc/slurm/slurm.conf" and re.search(regex, conf, re.M)}
    return snap


def test_slurm_conf_carries_the_delay_and_its_default_is_a_quarter_of_slurms():
    cluster = cluster_for("debian12")
    assert cluster.setting("slurm_requeue_delay") == 30
    assert "\nAuthInfo=cred_expire=30\n" in slurm_config.slurm_conf(cluster)
    assert "\nAuthInfo=cred_expire=90\n" in slurm_config.slurm_conf(cluster_for("debian12", slurm_requeue_delay=90))


@pytest.mark.parametrize("before,restarts", [(30, False), (120, True)])
def test_a_changed_delay_restarts_slurmctld_and_an_unchanged_one_nothing(before, restarts, monkeypatch):
    cluster = cluster_for("debian12")
    conf = slurm_config.slurm_conf(cluster_for("debian12", slurm_requeue_delay=before))
    plan = dict(plan_host(cluster, "ctl1", "debian12", _running_controller(cluster, monkeypatch, conf), monkeypatch))
    assert bool(plan[RESTART]) == restarts, plan[RESTART]


UNCHANGED = "as deployed"


@pytest.mark.parametrize("change,restarts", [
    (UNCHANGED, False),
    # a partition's limit: scontrol reconfigure applies it
    (lambda conf: conf.replace("MaxTime=INFINITE", "MaxTime=2-00:00:00", 1), False),
    # a node's definition (its CPUs, its GPUs): reconfigure would keep a registered node's old one
    (lambda conf: re.sub(r"(?m)^(NodeName=\S+ CPUs=)(\d+)", lambda m: m.group(1) + str(int(m.group(2)) + 1), conf, 1), True),
    (lambda conf: re.sub(r"(?m)^(NodeName=.*Gres=gpu:\S*:)(\d+)", lambda m: m.group(1) + str(int(m.group(2)) * 2), conf, 1),
     True),
])
def test_a_changed_node_definition_restarts_slurmctld_and_a_partition_change_does_not(change, restarts, monkeypatch):
    """The slurm.conf on the controller before the deploy is the wanted one with ``change`` made to it."""
    cluster = cluster_for("debian12")
    now = slurm_config.slurm_conf(cluster)
    before = now if change == UNCHANGED else change(now)
    assert (before == now) == (change == UNCHANGED)
    plan = dict(plan_host(cluster, "ctl1", "debian12", _running_controller(cluster, monkeypatch, before), monkeypatch))
    assert bool(plan[RESTART]) == restarts, plan[RESTART]
