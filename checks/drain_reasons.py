"""Who took a node out of service, read from its Slurm reason: the one classifier kiln-remediate, the
node-local checks, the Slurm collector and the repair ladders read drain reasons with. Pure.

Classes (``Drain.by``):
+ ``kiln``: one of kiln's checks failed (``kiln: GPU_XID_79 ...``: ``check`` is its id; a ``kiln:`` reason
  with no check id has none);
+ ``repair``: kiln-remediate rebooted it for a repair (``kiln: repair ...``);
+ ``rollout``: a rolling patch drained it (``kiln: patch ...``);
+ ``escalated``: kiln-remediate gave up and waits for a person (``kiln: escalated ...``);
+ ``slurm``: Slurm's own reason (``Not responding``, ``Kill task failed``, ...: ``check`` is kiln's id for it);
+ ``tool``: another health tool's (``TOOL_PREFIXES``: LBNL NHC writes ``NHC: ...``): never kiln's to touch;
+ ``person``: anything else (a person's words, or a tool's kiln cannot tell from a person's);
+ ``""``: no reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

KILN_PREFIX = "kiln:"
PATCH_PREFIX = "kiln: patch"  # drained by a rollout (kiln patch), which resumes it itself
REPAIR_PREFIX = "kiln: repair"  # rebooted by kiln-remediate for a repair; resumed once its checks pass
ESCALATED_PREFIX = "kiln: escalated"  # kiln-remediate gave up: waits for a person, never resumed by kiln
CHECK_ID = r"[A-Z][A-Z0-9_]{1,63}"  # a check id as kiln's verdicts and drain reasons write it
# The reasons slurmctld itself sets (its source: node_mgr.c, gres.c, job_mgr.c, proc_req.c; the same
# words on 22.05 and later), each the start of the reason, and kiln's check id for it. The numbers in
# some ("Low RealMemory (reported:... < ...)", "gres/gpu count reported lower than configured (3 < 4)")
# follow the words; ``slurm_gres_found`` reads the GPU counts.
SLURM_REASONS = {
    "Not responding": "SLURM_NOT_RESPONDING",
    "Kill task failed": "SLURM_KILL_TASK_FAILED",                 # a step that would not die (UnkillableStep)
    "batch job complete failure": "SLURM_BATCH_COMPLETE_FAILURE",  # the batch host's epilog/teardown failed
    "Node unexpectedly rebooted": "SLURM_UNEXPECTED_REBOOT",
    "Prolog error": "SLURM_PROLOG_ERROR",
    "Epilog error": "SLURM_EPILOG_ERROR",
    "Low RealMemory": "SLURM_LOW_MEMORY",                           # slurmd found less memory than configured
    "Low socket*core*thread count": "SLURM_LOW_CPUS",               # ... fewer CPUs ("..., Low CPUs")
    "Low CPUs": "SLURM_LOW_CPUS",
    "Low TmpDisk": "SLURM_LOW_TMP_DISK",
    "gres/gpu count reported lower than configured": "SLURM_GRES_LOW",  # slurmd found fewer GPUs (INVALID_REG)
    "Duplicate jobid": "SLURM_DUPLICATE_JOB",
}
_GRES_LOW = re.compile(r"gres/gpu count reported lower than configured \((\d{1,6}) < (\d{1,6})\)")
_KILN_REASON = re.compile(rf"^kiln: ({CHECK_ID})\b")
KILNS = ("kiln", "repair", "rollout", "escalated")  # the classes whose reason kiln wrote
# How other node health tools begin the reasons they drain with (Slurm's HealthCheckProgram of another site
# tool): LBNL Node Health Check writes "NHC: <check>: <message>"
TOOL_PREFIXES = ("NHC:",)


@dataclass(frozen=True)
class Drain:
    by: str
    check: str | None = None


def slurm_gres_found(reason: str) -> tuple[int, int] | None:
    """(GPUs slurmd found, GPUs configured) from Slurm's own GRES drain reason, or None."""
    m = _GRES_LOW.match(reason)
    return (int(m.group(1)), int(m.group(2))) if m else None


def classify(reason: str) -> Drain:
    """The class of a drain reason as Slurm prints it (its ``[user@time]`` already taken off)."""
    if not reason:
        return Drain("")
    for prefix, by in ((PATCH_PREFIX, "rollout"), (ESCALATED_PREFIX, "escalated"), (REPAIR_PREFIX, "repair")):
        if reason.startswith(prefix):
            return Drain(by)
    m = _KILN_REASON.match(reason)
    if m:
        return Drain("kiln", m.group(1))
    if reason.startswith(KILN_PREFIX):
        return Drain("kiln")
    for text, check in SLURM_REASONS.items():
        if reason.startswith(text):
            return Drain("slurm", check)
    if reason.startswith(TOOL_PREFIXES):
        return Drain("tool")
    return Drain("person")
