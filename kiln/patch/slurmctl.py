"""What a rollout asks of and tells Slurm, run on the controller over SSH (strict host keys).

Only ``scontrol`` and ``squeue``: drain with a ``kiln: patch`` reason, resume, set a failure reason,
reboot through Slurm's RebootProgram, list the jobs on nodes, read node states and boot times.
"""

from __future__ import annotations

from checks.node import Node, Result
from kiln.hostlist import HostListError, expand
from kiln.shell import command
from kiln.patch.plan import SlurmNode, parse_nodes


class SlurmError(RuntimeError):
    pass


class SlurmControl:
    def __init__(self, node: Node):
        self.node = node

    def _ok(self, command: str) -> Result:
        out = self.node.run(command)
        if out.rc != 0:
            raise SlurmError(f"{command!r} on {self.node.name} exited {out.rc}: {(out.stderr or out.stdout).strip()[:300]}")
        return out

    def nodes(self) -> dict[str, SlurmNode]:
        return parse_nodes(self._ok("scontrol show node -o").stdout)

    def drain(self, names: list[str], reason: str) -> None:
        self._ok(command("scontrol", "update", f"nodename={','.join(names)}", "state=drain", f"reason={reason}"))

    def set_reason(self, name: str, reason: str) -> None:
        """Keep ``name`` drained, with ``reason`` (the check that failed)."""
        self._ok(command("scontrol", "update", f"nodename={name}", "state=drain", f"reason={reason[:200]}"))

    def resume(self, names: list[str]) -> None:
        """Back into service, all of ``names`` in one call."""
        self._ok(command("scontrol", "update", f"nodename={','.join(names)}", "state=resume"))

    def cancel_reboot(self, name: str) -> None:
        """Forget a reboot Slurm still holds as pending (a controller that lost its newer state)."""
        self._ok(command("scontrol", "cancel_reboot", name))

    def set_down(self, name: str, reason: str) -> None:
        """DOWN, which ends every pending or issued reboot Slurm holds for it (a ``resume`` follows)."""
        self._ok(command("scontrol", "update", f"nodename={name}", "state=down", f"reason={reason[:200]}"))

    def reboot(self, names: list[str], reason: str) -> None:
        """Through Slurm's RebootProgram; a drained node comes back drained, with the reason kept."""
        self._ok(command("scontrol", "reboot", f"reason={reason}", ",".join(names)))

    def jobs(self, names: list[str]) -> dict[str, list[str]]:
        """Node -> ids of the jobs running (or finishing) on it."""
        out = self._ok(command("squeue", "-h", "-w", ",".join(names), "-t", "RUNNING,COMPLETING,CONFIGURING,SUSPENDED",
                               "-o", "%i %N"))
        found: dict[str, list[str]] = {n: [] for n in names}
        for line in out.stdout.splitlines():
            job, _, nodelist = line.strip().partition(" ")
            try:
                nodes = expand(nodelist)
            except HostListError as e:  # never guess which nodes a job holds: stop as on no answer
                raise SlurmError(f"squeue printed a node list kiln cannot read for job {job}: {e}") from None
            for n in nodes:
                if n in found:
                    found[n].append(job)
        return found
