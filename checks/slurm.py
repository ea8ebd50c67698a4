"""Slurm suite: slurmd active, the node registered and not down, not drained by a person, munge
round-trip, GRES count as the inventory says, and jobs' private /tmp in place.

SLURM_JOB_TMP: where each job is to get a private /tmp and /dev/shm (``kiln_slurm_job_tmp``), the
running slurmd has job_container/tmpfs loaded (its shared object is mapped into slurmd; a slurmd started
before the setting, or from a slurm.conf without it, has not). Without it, jobs of different users on the
node share /tmp and /dev/shm.

Expectations (``expect["slurm"]``): node (Slurm NodeName), gpus (GRES count), compute (bool), job_tmp
(the base path of jobs' private /tmp; "" where jobs share the node's).
"""

from __future__ import annotations

import re
import shlex

from checks.drain_reasons import ESCALATED_PREFIX, KILN_PREFIX, PATCH_PREFIX, REPAIR_PREFIX, classify  # noqa: F401
from checks.drain_reasons import slurm_gres_found
from checks.node import Node
from checks.parsers.scontrol import SlurmRecordError, show_node_command, show_nodes
from checks.verdict import Verdict, fail, ok, warn


def node_state(text: str) -> dict[str, str]:
    """``scontrol -o show node NAME`` (one node): key -> value of its own line, the first (a newline in its
    reason cannot add fields or a node); Reason keeps its spaces, without Slurm's ``[user@time]``.
    A line kiln cannot read whole gives {}."""
    first = text.strip("\n").split("\n", 1)[0]
    try:
        return dict(next(iter(show_nodes(first).values()), {}))
    except SlurmRecordError:
        return {}


SLURMD = "systemctl is-active slurmd"
MUNGE = "munge -n | unmunge >/dev/null"


def show_node(name: str) -> str:
    return shlex.join(show_node_command(name))


# job_container/tmpfs (Slurm 25.05 renames it namespace/tmpfs), mapped into the running slurmd: it loads its
# plugins when it starts, and makes each job's namespace (a bind mount below the base path per job) only
# when a job starts, so nothing else on an idle node shows it
JOB_TMP_PLUGIN = r"grep -c -E '/(job_container|namespace)_tmpfs[.]so' /proc/$(pidof -s slurmd || echo self)/maps"


def commands(expect: dict) -> list[str]:
    """What ``run`` asks the node over SSH (for the remote runner to fetch at once)."""
    slurm = expect.get("slurm") or {}
    if not slurm.get("compute"):
        return []
    return [SLURMD, MUNGE, *([JOB_TMP_PLUGIN] if slurm.get("job_tmp") else []),
            show_node(slurm.get("node") or expect.get("node", ""))]


def job_tmp_verdict(base: str, maps: str) -> Verdict:
    """``JOB_TMP_PLUGIN``'s answer (how many of slurmd's mappings are the plugin's), asked while slurmd is
    active."""
    count = maps.strip()
    if not count.isdigit():
        return fail("SLURM_JOB_TMP", f"could not read slurmd's mappings ({count[:120] or 'no answer'}): "
                    "grep tmpfs /proc/$(pidof slurmd)/maps by hand")
    if count == "0":
        return fail("SLURM_JOB_TMP", "slurmd runs without job_container/tmpfs: jobs of different users here share /tmp "
                    "and /dev/shm. Check JobContainerType=job_container/tmpfs in slurm.conf and job_container.conf "
                    "(kiln deploy writes both), then restart slurmd with the node drained")
    return ok("SLURM_JOB_TMP", f"slurmd gives each job a private /tmp and /dev/shm (kept below {base})")


def run(node: Node, expect: dict) -> list[Verdict]:
    slurm = expect.get("slurm") or {}
    if not slurm.get("compute"):
        return []
    name = slurm.get("node") or node.name
    verdicts = []
    active = node.run(SLURMD).stdout.strip()
    verdicts.append(ok("SLURM_SLURMD", "slurmd active") if active == "active" else
                    fail("SLURM_SLURMD", f"slurmd is {active or 'unknown'}: systemctl restart slurmd; see "
                         "/var/log/slurm/slurmd.log"))
    munge = node.run(MUNGE)
    verdicts.append(ok("SLURM_MUNGE", "munge round-trip works") if munge.rc == 0 else
                    fail("SLURM_MUNGE", f"munge round-trip failed ({munge.stderr.strip()[:120]}): check munged and "
                         "that /etc/munge/munge.key matches the controller's"))
    if slurm.get("job_tmp") and active == "active":  # slurmd sets it up when it starts: SLURM_SLURMD says why not
        verdicts.append(job_tmp_verdict(slurm["job_tmp"], node.run(JOB_TMP_PLUGIN).stdout))
    if node.local:
        return verdicts  # on the node itself (HealthCheckProgram) the controller's view is not checked
    out = node.run(show_node(name))
    if out.rc != 0 or "NodeName=" not in out.stdout:
        verdicts.append(fail("SLURM_REGISTERED", f"the controller does not know {name}: "
                             f"{(out.stderr or out.stdout).strip()[:120]}"))
        return verdicts
    fields = node_state(out.stdout)
    state = fields.get("State", "")
    if not state:
        verdicts.append(fail("SLURM_REGISTERED", f"scontrol's answer about {name} is not one kiln can read whole "
                             f"({out.stdout.strip()[:80]!r}): check scontrol show node {name} -o by hand"))
        return verdicts
    if "DOWN" in state or "NOT_RESPONDING" in state or state.endswith("*"):
        verdicts.append(fail("SLURM_REGISTERED", f"{name} is {state} in Slurm: check slurmd and the network"))
    else:
        verdicts.append(ok("SLURM_REGISTERED", f"{name} is {state}"))
    reason = fields.get("Reason", "")
    if "DRAIN" in state and classify(reason).by in ("person", "tool"):
        who = "a person" if classify(reason).by == "person" else "another health tool"
        verdicts.append(warn("SLURM_DRAINED_BY_PERSON", f"{name} is drained by {who}: {reason!r}; kiln leaves it so"))
    gpus = slurm.get("gpus", 0)
    if gpus:
        gres = fields.get("Gres", "")
        have = sum(int(n) for n in re.findall(r"gpu(?::[\w.-]+)?:(\d+)", gres))
        found = slurm_gres_found(reason)  # Slurm's own reason for a GRES count lower than configured
        if have != gpus:
            verdicts.append(fail("SLURM_GRES", f"Slurm sees {have} GPUs (Gres={gres or 'none'}), the inventory says "
                                 f"{gpus}: check gres.conf and the device files, restart slurmd"))
        elif found is not None or "INVALID_REG" in state:
            # slurm.conf has the count, but slurmd registered fewer (Slurm's reason says how many it found)
            seen = f"{found[0]} of {found[1]}" if found else "not all"
            verdicts.append(fail("SLURM_GRES", f"slurmd found {seen} GPUs at its registration ({state}: {reason!r}): "
                                 "a GPU is lost or its device file missing; nvidia-smi on the node"))
        else:
            verdicts.append(ok("SLURM_GRES", f"Gres={gres}"))
    return verdicts
