"""One classifier for drain reasons (checks/drain_reasons.py): each class, and no second reader of them."""

from __future__ import annotations

import re

import pytest

from checks.drain_reasons import classify
from tests.conftest import REPO


@pytest.mark.parametrize("reason, by, check", [
    ("", "", None),
    ("kiln: GPU_XID_79 Xid 79 (GPU has fallen off the bus)", "kiln", "GPU_XID_79"),
    ("kiln: SLURM_SLURMD slurmd is inactive", "kiln", "SLURM_SLURMD"),
    ("kiln: something kiln wrote without a check", "kiln", None),
    ("kiln: patch rollout-20261203 batch 2", "rollout", None),
    ("kiln: repair reboot for GPU_XID_79", "repair", None),
    ("kiln: escalated GPU_XID_79 needs a person", "escalated", None),
    ("Not responding", "slurm", "SLURM_NOT_RESPONDING"),
    ("Kill task failed", "slurm", "SLURM_KILL_TASK_FAILED"),
    ("Node unexpectedly rebooted", "slurm", "SLURM_UNEXPECTED_REBOOT"),
    ("batch job complete failure", "slurm", "SLURM_BATCH_COMPLETE_FAILURE"),
    ("Prolog error", "slurm", "SLURM_PROLOG_ERROR"),
    ("Epilog error", "slurm", "SLURM_EPILOG_ERROR"),
    ("Low RealMemory (reported:257000 < 100.00% of configured:515000)", "slurm", "SLURM_LOW_MEMORY"),
    ("Low socket*core*thread count, Low CPUs", "slurm", "SLURM_LOW_CPUS"),
    ("Low CPUs", "slurm", "SLURM_LOW_CPUS"),
    ("Low TmpDisk", "slurm", "SLURM_LOW_TMP_DISK"),
    ("gres/gpu count reported lower than configured (3 < 4)", "slurm", "SLURM_GRES_LOW"),
    ("Duplicate jobid", "slurm", "SLURM_DUPLICATE_JOB"),
    ("not responding since lunch", "person", None),  # Slurm's words, but not at the start: a person's
    ("NHC: check_fs_mount: /scratch not mounted", "tool", None),  # another health tool's: never touched
    ("nhc said so", "person", None),
    ("disk swap tomorrow", "person", None),
    ("KILN: GPU_XID_79 typed by hand", "person", None),
    (" kiln: GPU_XID_79", "person", None),
])
def test_each_class_of_drain_reason(reason, by, check):
    d = classify(reason)
    assert (d.by, d.check) == (by, check)


def test_no_module_reads_a_drain_reason_but_the_classifier():
    """Who drained a node was decided in four places with different rules; a fifth would drift again."""
    found = []
    for package in ("checks", "kiln", "roles"):
        for path in (REPO / package).rglob("*.py"):
            if path.name == "drain_reasons.py" or path.is_relative_to(REPO / "kiln" / "inventory"):
                continue  # the inventory's KILN_PREFIX is its variables' kiln_
            for number, line in enumerate(path.read_text().split("\n"), 1):
                if re.search(r"startswith\((KILN|PATCH|REPAIR|ESCALATED)_PREFIX|startswith\([\"']kiln:", line):
                    found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not found, "drain reasons read outside checks/drain_reasons.py:\n" + "\n".join(found)


def test_every_slurm_reason_has_a_ladder_and_the_gres_counts_are_read():
    from checks.drain_reasons import SLURM_REASONS, slurm_gres_found
    from checks.repairs import ESCALATE, LADDERS, REBOOT
    for check in set(SLURM_REASONS.values()):
        assert check in LADDERS and LADDERS[check][-1] == ESCALATE, check
    assert LADDERS["SLURM_GRES_LOW"] == ("restart:slurmd", REBOOT, ESCALATE)  # register again, then reboot
    assert slurm_gres_found("gres/gpu count reported lower than configured (3 < 4)") == (3, 4)
    assert slurm_gres_found("gres/gpu count reported lower than configured (x < 4)") is None
    assert slurm_gres_found("Not responding") is None


def test_another_tools_drain_is_left_alone_everywhere():
    """A node another health tool drained (NHC) is held by kiln-remediate as a person's is, never resumed
    by kiln's node check, and reported by the Slurm suite."""
    from checks.node import Node, Result
    from checks.node_local import drain_or_resume
    from checks.remediation_policy import NodeView, owner
    reason = "NHC: check_fs_mount: /scratch not mounted"
    assert owner(NodeView("n1", "drained", reason)) == "person"
    commands = []

    def run(command):
        commands.append(command)
        return Result(0, f"NodeName=n1 State=IDLE+DRAIN Reason={reason} [root@2026-12-03T10:00:00]\n")
    assert drain_or_resume(Node("n1", run, local=True), "n1", []) == "left drained by a person"
    assert not [c for c in commands if "update" in c]
