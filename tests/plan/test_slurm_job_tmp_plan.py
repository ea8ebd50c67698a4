"""Each job's private /tmp (``kiln_slurm_job_tmp``, job_container/tmpfs): slurmd loads the plugin and reads
job_container.conf only when it starts, so turning it on or off, changing its base path, or finding the
node's slurm.conf without JobContainerType restarts slurmd on a compute node; a deploy that finds all as set
restarts nothing."""

from __future__ import annotations

import re

import pytest

from kiln.inventory.privacy_schema import JobTmp
from roles import slurm_config
from roles.snapshot import UnitState
from tests.plan.facts import fresh
from tests.plan.harness import converged, plan_host
from tests.plan.test_roles_plan import cluster_for

RESTART = "slurm: restart slurmd (if its files changed)"
ON, OFF, SCRATCH = JobTmp(), None, JobTmp(base_path="/scratch/job-tmp")


def _running_compute(before, monkeypatch, conf: str | None = None):
    """gpu01 after a deploy of ``before``, with ``conf`` (else before's slurm.conf) read for its lines (the
    local one, or on a configless node the copy slurmd fetched)."""
    first, ctx = plan_host(before, "gpu01", "debian12", fresh("debian12"), monkeypatch, with_context=True)
    snap = converged(first, ctx, fresh("debian12"))
    for unit in ("munge.service", "slurmd.service"):
        snap.units[unit] = UnitState("loaded", "active", "enabled")
    conf = slurm_config.slurm_conf(before) if conf is None else conf
    snap.lines = {i for i, (path, regex) in enumerate(ctx.lines)
                  if path in ("/etc/slurm/slurm.conf", "/run/slurm/conf/slurm.conf") and re.search(regex, conf, re.M)}
    return snap


@pytest.mark.parametrize("before,after,restarts", [
    (ON, ON, False), (OFF, OFF, False),
    (OFF, ON, True), (ON, OFF, True),   # the plugin loaded or dropped
    (ON, SCRATCH, True),                # job_container.conf's BasePath
])
def test_turning_private_tmp_on_or_off_or_moving_it_restarts_slurmd(before, after, restarts, monkeypatch):
    snap = _running_compute(cluster_for("debian12", slurm_job_tmp=before), monkeypatch)
    plan = dict(plan_host(cluster_for("debian12", slurm_job_tmp=after), "gpu01", "debian12", snap, monkeypatch))
    assert bool(plan[RESTART]) == restarts, plan[RESTART]
    written = [op for op, commands in plan.items() if "job_container.conf" in op and commands]
    assert bool(written) == (before != after), written


def test_a_slurm_conf_found_without_job_container_type_restarts_slurmd(monkeypatch):
    """A slurmd started from a slurm.conf without the line has no plugin (SLURM_JOB_TMP fails there): the
    deploy that writes the line back restarts it (scontrol reconfigure would not load it)."""
    cluster = cluster_for("debian12", slurm_job_tmp=ON)
    stripped = slurm_config.slurm_conf(cluster).replace("JobContainerType=job_container/tmpfs\n", "")
    plan = dict(plan_host(cluster, "gpu01", "debian12", _running_compute(cluster, monkeypatch, stripped), monkeypatch))
    assert plan[RESTART], plan[RESTART]


@pytest.mark.parametrize("before,after,restarts", [(ON, ON, False), (OFF, ON, True), (ON, OFF, True)])
def test_a_configless_slurmd_is_restarted_when_the_copy_it_fetched_disagrees(before, after, restarts, monkeypatch):
    """A configless compute node holds no job_container.conf or slurm.conf of its own: what its slurmd
    fetched from slurmctld (/run/slurm/conf) says whether it runs with the plugin."""
    snap = _running_compute(cluster_for("debian12", slurm_job_tmp=before, slurm_configless=True), monkeypatch)
    plan = dict(plan_host(cluster_for("debian12", slurm_job_tmp=after, slurm_configless=True), "gpu01", "debian12",
                          snap, monkeypatch))
    assert "slurm: slurmd fetches its files from slurmctld (configless)" in plan
    assert bool(plan[RESTART]) == restarts, plan[RESTART]
    assert not [op for op, commands in plan.items() if "job_container.conf" in op and "no local" not in op and commands]
