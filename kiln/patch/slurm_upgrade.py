"""A Slurm upgrade rolled out in SchedMD's order (kiln/patch/slurm_versions.py has the rules): what
`kiln patch --roles slurm` does when the inventory's ``slurm`` pin names a newer release than the one
the cluster runs.

Before anything is touched: the versions the cluster runs (``scontrol version`` on the controller, each
slurmd's ``Version=`` in ``scontrol show node``) are read and the move to the pin is checked against
the window (no downgrade, no jump past the releases the target reads) and the daemon order; a refusal
names the reason and touches nothing. Then:

0. SlurmdTimeout raised on every Slurm host (``kiln_slurm_upgrade_slurmd_timeout``: the configure
   stage of the slurm role with it, then ``scontrol reconfigure``), so that no slurmd restarting into
   the new release is set DOWN; restored to ``kiln_slurm_slurmd_timeout`` when the rollout ends;
1. the accounting database and slurmctld's state are backed up (``mysqldump`` of ``slurm_acct_db``
   with slurmdbd stopped, a tar of StateSaveLocation and /etc/slurm) on the hosts that hold them;
2. the slurmdbd hosts are patched first (kiln's deploy waits for slurmdbd's first start, which
   converts the database, up to ``kiln_service_start_timeout``), then the controllers;
3. the compute nodes in rolling batches (drained, jobs waited for, as any rollout);
4. the other service nodes (login nodes: the client commands) last.
"""

from __future__ import annotations

from dataclasses import dataclass

from checks.parsers.scontrol import SlurmRecordError, show_nodes

from kiln.patch.slurm_versions import ORDER, order_problem, release_of, upgrade_problem
from kiln.shell import command, quote

BACKUP_DIR = "/var/lib/kiln/backup"
DATABASE = "slurm_acct_db"
STATE_SAVE = "/var/lib/slurm/slurmctld"


@dataclass(frozen=True)
class Running:
    """The Slurm versions a cluster runs now."""
    controller: str            # `scontrol version` on the first controller: "22.05.8"
    slurmd: dict[str, str]     # node -> its slurmd's version (scontrol show node: Version=)


def node_versions(scontrol_show_node: str) -> dict[str, str]:
    """Node -> slurmd version from ``scontrol show node -o`` (a node never registered has none), read by
    kiln's one reader of it (a drain reason cannot add a node or a version)."""
    try:
        nodes = show_nodes(scontrol_show_node)
    except SlurmRecordError as e:
        raise ValueError(f"scontrol show node printed what kiln cannot read whole: {e}") from None
    return {name: f["Version"] for name, f in nodes.items() if f.get("Version") not in (None, "", "(null)", "N/A")}


def dbd_hosts(cluster) -> list[str]:
    """The hosts running slurmdbd (as roles/slurm.py decides: the slurm_dbd group, else the first
    controller)."""
    return list(cluster.groups.get("slurm_dbd") or [h.name for h in cluster.controllers[:1]])


def is_upgrade(running: Running, target: str) -> bool:
    """Whether the pin names another release than the controller runs (a patch release is a plain
    rollout: SchedMD's order matters between majors)."""
    return release_of(target) != release_of(running.controller)


def refusal(running: Running, target: str) -> str | None:
    """Why moving this cluster to ``target`` breaks SchedMD's rules, or None."""
    problem = upgrade_problem(running.controller, target)
    if problem:
        return f"slurm pin {target}: {problem} (slurmctld runs {running.controller})"
    for node, version in sorted(running.slurmd.items()):
        if release_of(version) is None or release_of(version) > release_of(running.controller):
            return f"{node}'s slurmd runs {version}, newer than slurmctld's {running.controller}: " + \
                (order_problem(running.controller, running.controller, version) or "its version cannot be read")
        if upgrade_problem(version, target):
            return f"slurm pin {target}: {node}'s slurmd runs {version}: {upgrade_problem(version, target)}"
    return None


def service_order(service: list[str], dbd_hosts: list[str], controllers: list[str]) -> tuple[list[str], list[str]]:
    """(before the compute nodes, after them): slurmdbd hosts, then controllers first; every other
    service node (login nodes, which hold only the client commands) after the compute nodes."""
    first = [h for h in dbd_hosts if h in service] + [h for h in controllers if h in service and h not in dbd_hosts]
    return first, [h for h in service if h not in first]


def backup_commands(stamp: str, dbd: bool, controller: bool, dump: str = "mysqldump") -> list[str]:
    """What backs a host up before its Slurm is upgraded, into BACKUP_DIR/slurm-<stamp>/ (mode 700):
    the accounting database with slurmdbd stopped (SchedMD: a consistent dump, nothing writing), and
    slurmctld's state and the configuration."""
    where = f"{BACKUP_DIR}/slurm-{stamp}"
    lines = [command("install", "-d", "-m", "700", where)]
    if dbd:
        # slurmdbd is started again whether or not the dump worked; the line fails if the dump did
        lines.append(f"systemctl stop slurmdbd && {{ {dump} --single-transaction --databases {DATABASE} > "
                     f"{quote(where + '/' + DATABASE + '.sql')}; r=$?; systemctl start slurmdbd; [ $r = 0 ]; }}")
    if controller:
        lines.append(command("tar", "-C", "/", "-czf", f"{where}/slurmctld-state.tar.gz",
                             STATE_SAVE.lstrip("/"), "etc/slurm"))
    return lines


def steps(first: list[str], batches: list[list[str]], after: list[str], dbd_hosts: list[str],
          controllers: list[str], timeouts: tuple[int, int]) -> list[str]:
    """The upgrade as one list of steps in the order they run (for the plan and its tests); ``timeouts``:
    (SlurmdTimeout during the upgrade, the cluster's own)."""
    out = [f"SlurmdTimeout raised to {timeouts[0]} s on every Slurm host (slurm.conf, scontrol reconfigure)",
           f"{ORDER[0]}: " + ", ".join(h for h in first if h in dbd_hosts or h in controllers)]
    out += [f"{'slurmdbd' if h in dbd_hosts else 'slurmctld'} on {h}"
            + (" (and slurmctld)" if h in dbd_hosts and h in controllers else "") for h in first]
    out += [f"slurmd batch {i + 1}: {', '.join(b)}" for i, b in enumerate(batches)]
    out += [f"client commands on {h}" for h in after]
    return out + [f"SlurmdTimeout restored to {timeouts[1]} s"]
