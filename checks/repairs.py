"""What kiln-remediate tries, in order, for each check that drained a node: the repair ladder, kept
beside the checks' catalog (checks/reference.py; a test keeps every failing id of the catalog in this
table or in its GPU_XID_ rule). Pure data and functions; ships to the controller with the checks.

Steps:
+ ``restart:UNIT``: restart one service on the node (safe under running jobs for slurmd and munge only);
+ ``reset``: reset the node's GPUs (``nvidia-smi -r``), only when the node runs no job: seconds, not a
  reboot's minutes;
+ ``reboot``: ``scontrol reboot`` of the drained node, with kiln's reason, once it runs no job; it comes
  back drained and stays so until kiln's checks pass on it;
+ ``power_cycle``: not a rung of any ladder: a node that answers neither Slurm nor SSH (its power, its
  network or a hung kernel) is drained with kiln's reason and power-cycled through its BMC (Redfish,
  checks/redfish.py) where the inventory names one; it comes back drained, like a reboot;
+ ``wait``: nothing to repair on the node: it comes back by itself once something outside it does (an
  encrypted volume unlocks as soon as a tang server answers, and the node's health check resumes it); held,
  never escalated;
+ ``escalate``: no more automatic repair; the node stays drained with a reason that says a person is
  needed (``kiln: escalated ...``), and an alert fires where monitoring is deployed.

A fault that survives a step goes to the next step on its next look; the last step is always escalate, but
for ``wait``.
"""

from __future__ import annotations

import re

from checks.drain_reasons import CHECK_ID, SLURM_REASONS, classify  # noqa: F401 - CHECK_ID and SLURM_REASONS read here
from checks.parsers.xid_catalog import FATAL, NVLINK, SERVICE, SXID_MIN
from checks.parsers.xid_catalog import REBOOT as XID_REBOOT
from checks.parsers.xid_catalog import RESET as XID_RESET

RESET = "reset"
REBOOT = "reboot"
POWER_CYCLE = "power_cycle"  # out of band, through the node's BMC
ESCALATE = "escalate"
WAIT = "wait"  # held for what the node waits on outside itself; no step, no escalation
SAFE_UNDER_JOBS = {"restart:slurmd", "restart:munge"}  # jobs keep running when these restart

# Slurm's own reasons for a node it took out of service (not a person's)
LADDERS: dict[str, tuple[str, ...]] = {
    # Slurm's own reasons
    "SLURM_NOT_RESPONDING": ("restart:slurmd", "restart:munge", ESCALATE),
    "SLURM_KILL_TASK_FAILED": (REBOOT, ESCALATE),        # processes stuck in the kernel: only a reboot frees them
    "SLURM_BATCH_COMPLETE_FAILURE": (REBOOT, ESCALATE),  # the same, seen from the batch host's job end
    "SLURM_UNEXPECTED_REBOOT": ("restart:slurmd", ESCALATE),
    "SLURM_PROLOG_ERROR": (ESCALATE,),                   # a site script failed: its owner reads why
    "SLURM_EPILOG_ERROR": (ESCALATE,),
    "SLURM_LOW_MEMORY": (REBOOT, ESCALATE),              # DIMMs lost at boot come back, or need a person
    "SLURM_LOW_CPUS": (REBOOT, ESCALATE),                # CPUs offlined (a kernel MCE) come back at boot
    "SLURM_LOW_TMP_DISK": (ESCALATE,),                   # configuration or a full disk: a person's
    # slurmd found fewer GPUs than configured: registering again finds a GPU whose device came up after
    # slurmd (the boot race); a GPU that fell off the bus needs the reboot
    "SLURM_GRES_LOW": ("restart:slurmd", REBOOT, ESCALATE),
    "SLURM_DUPLICATE_JOB": ("restart:slurmd", ESCALATE),
    # kiln's checks
    "SLURM_SLURMD": ("restart:slurmd", REBOOT, ESCALATE),
    "SLURM_MUNGE": ("restart:munge", REBOOT, ESCALATE),
    "SLURM_REGISTERED": ("restart:slurmd", ESCALATE),
    "SLURM_GRES": ("restart:slurmd", REBOOT, ESCALATE),
    "SLURM_JOB_TMP": ("restart:slurmd", ESCALATE),        # slurmd mounts it when it starts; else its files are wrong
    "GPU_NVIDIA_SMI": (REBOOT, ESCALATE),
    "GPU_COUNT": (REBOOT, ESCALATE),
    "GPU_LOST": (RESET, REBOOT, ESCALATE),
    "GPU_PERSISTENCE": ("restart:nvidia-persistenced", REBOOT, ESCALATE),
    "GPU_ECC_UNCORRECTED": (RESET, REBOOT, ESCALATE),
    "GPU_RETIRED_PAGES_PENDING": (RESET, REBOOT, ESCALATE),
    "GPU_REMAP_PENDING": (RESET, REBOOT, ESCALATE),
    "GPU_REMAP_FAILURE": (ESCALATE,),
    "GPU_NVLINK_INACTIVE": ("restart:nvidia-fabricmanager", RESET, REBOOT, ESCALATE),
    "GPU_NVLINK_COUNT": (RESET, REBOOT, ESCALATE),
    "GPU_FABRIC_MANAGER": ("restart:nvidia-fabricmanager", REBOOT, ESCALATE),
    "GPU_FABRIC": ("restart:nvidia-fabricmanager", REBOOT, ESCALATE),  # registration redone by a new FM, or at boot
    "GPU_DRIVER_VERSION": (REBOOT, ESCALATE),
    "SYSTEM_KERNEL": (REBOOT, ESCALATE),
    "SYSTEM_KERNEL_SAME": (REBOOT, ESCALATE),
    "STORAGE_MOUNTED": (REBOOT, ESCALATE),
    "STORAGE_RESPONDING": (REBOOT, ESCALATE),
    "STORAGE_LOCKED": (WAIT,),  # tang is down: no step on the node helps, and it returns by itself
    "FABRIC_PORT_DOWN": (REBOOT, ESCALATE),
}
# anything else (a wrong model, a full filesystem, a slow link: configuration or hardware) goes to a person
DEFAULT = (ESCALATE,)
_XID_STEPS = {XID_RESET: (RESET, REBOOT, ESCALATE), XID_REBOOT: (REBOOT, ESCALATE), SERVICE: (ESCALATE,),
              NVLINK: ("restart:nvidia-fabricmanager", RESET, REBOOT, ESCALATE)}



def check_of(reason: str) -> str | None:
    """The check id behind a drain reason: kiln's (``kiln: GPU_XID_79 ...``) or Slurm's own ("Not
    responding"); None for a person's reason, a rollout's (``kiln: patch ...``), kiln's own repair or
    escalation reasons, or no reason (checks/drain_reasons.py)."""
    return classify(reason).check


def ladder(check: str) -> tuple[str, ...]:
    """The steps for a check id, the last always ``escalate`` (or ``wait``)."""
    if check in LADDERS:
        return LADDERS[check]
    m = re.fullmatch(r"GPU_XID_(\d{1,6})", check)
    if m and int(m.group(1)) == 154:  # the driver asks for a recovery: a reset, else a reboot
        return (RESET, REBOOT, ESCALATE)
    if m and int(m.group(1)) >= SXID_MIN:
        # a fatal NVSwitch SXid: NVIDIA's Fabric Manager guide resets the switches with their GPUs, which a
        # reboot does (a GPU reset alone leaves the SXid lines, which kiln's Xid check keeps, in the log)
        return (REBOOT, ESCALATE)
    if m and int(m.group(1)) in FATAL:
        return _XID_STEPS.get(FATAL[int(m.group(1))][1], (REBOOT, ESCALATE))
    return DEFAULT


def kind(step: str) -> str:
    """What a budget counts: restart, reset or reboot."""
    return step.split(":", 1)[0]
