"""What a rollout asks of and tells Slurm, run on the controller over SSH (strict host keys).

Only ``scontrol``, ``squeue`` and ``scancel --signal``: drain with a ``kiln: patch`` reason, resume, set a
failure reason, reboot through Slurm's RebootProgram, list the jobs on nodes, read node states and boot
times; maintenance reservations; signal a job (never cancel one) and requeue it.
"""

from __future__ import annotations

from dataclasses import dataclass

from checks.node import Node, Result
from checks.parsers.delimited import lines
from checks.slurm import reservation_state
from kiln.hostlist import HostListError, expand
from kiln.shell import command
from kiln.patch.plan import SlurmNode, parse_nodes


class SlurmError(RuntimeError):
    pass


@dataclass(frozen=True)
class Job:
    """One job as squeue has it (the fields a rollout decides on)."""
    id: str
    state: str           # RUNNING, PENDING, COMPLETED, ...
    requeueable: bool    # Requeue=1 (sbatch --requeue, or JobRequeue=1 and no --no-requeue)
    batch: bool          # BatchFlag=1: a batch script, the only kind Slurm requeues
    restarts: int        # how often Slurm started it again (a requeue adds one)


JOB_FIELDS = "JobID:40,State:24,Requeue:4,RestartCnt:8,BatchFlag:4"  # squeue -O: no field a user writes


def parse_jobs(text: str) -> dict[str, Job]:
    """``squeue -h -O`` with JOB_FIELDS -> id -> Job. Only fields Slurm itself fills (never a job's name
    or comment, which its owner chooses), so a line is five tokens; anything else is refused."""
    jobs = {}
    for line in lines(text):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) != 5 or not all(f.isdigit() for f in fields[2:]) or not fields[1].isalpha():
            raise SlurmError(f"squeue printed a job line kiln cannot read: {line[:120]!r}")
        job, state, requeue, restarts, batch = fields
        jobs[job] = Job(job, state, requeue == "1", batch == "1", int(restarts))
    return jobs


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

    def reserve(self, name: str, nodes: list[str], lead_seconds: int, minutes: int) -> None:
        """A maintenance reservation on ``nodes`` from ``lead_seconds`` on (the controller's clock) for
        ``minutes``: Slurm starts a job there only if it ends before then. IGNORE_JOBS: made even where
        jobs run now (kiln waits for them, as for any drained node)."""
        self._ok(command("scontrol", "create", "reservation", f"reservationname={name}", f"nodes={','.join(nodes)}",
                         f"starttime=now+{int(lead_seconds)}", f"duration={int(minutes)}", "flags=MAINT,IGNORE_JOBS",
                         "users=root"))

    def reservation(self, name: str) -> dict[str, str] | None:
        """The reservation's fields (StartTime, Nodes, Flags...), or None when there is none of that name."""
        out = self.node.run(command("scontrol", "show", "reservation", name, "-o"))
        if out.rc != 0 or "ReservationName=" not in out.stdout:
            if "not found" in (out.stdout + out.stderr).lower() or out.rc == 0:
                return None
            raise SlurmError(f"scontrol show reservation {name} exited {out.rc}: {(out.stderr or out.stdout).strip()[:300]}")
        return reservation_state(out.stdout.strip().split("\n")[0])

    def delete_reservation(self, name: str) -> None:
        if self.reservation(name) is not None:
            self._ok(command("scontrol", "delete", f"reservationname={name}"))

    def job_details(self, ids: list[str]) -> dict[str, Job]:
        """Each job of ``ids`` Slurm still knows (a finished job may have left its memory)."""
        if not ids:
            return {}
        out = self.node.run(command("squeue", "-h", "-j", ",".join(ids), "-O", JOB_FIELDS))
        if out.rc != 0:
            if "invalid job id" in (out.stdout + out.stderr).lower():
                return {}  # none of them is known any more
            raise SlurmError(f"squeue -j {','.join(ids)} exited {out.rc}: {(out.stderr or out.stdout).strip()[:300]}")
        return parse_jobs(out.stdout)

    def signal(self, job: str, signal: str) -> None:
        """``signal`` to the job's batch shell and every one of its steps (what sbatch --signal=B: and its
        steps get); never a cancel."""
        self._ok(command("scancel", f"--signal={signal}", "--full", job))

    def requeue(self, job: str) -> None:
        """Back to pending (kept with its id; it starts again elsewhere, from its own checkpoint)."""
        self._ok(command("scontrol", "requeue", job))

    def start_now(self, job: str) -> None:
        """A pending job eligible at once (Slurm holds a requeued job back two minutes by default)."""
        self._ok(command("scontrol", "update", f"jobid={job}", "starttime=now"))

    def jobs(self, names: list[str]) -> dict[str, list[str]]:
        """Node -> ids of the jobs running (or finishing) on it."""
        out = self._ok(command("squeue", "-h", "-w", ",".join(names), "-t", "RUNNING,COMPLETING,CONFIGURING,SUSPENDED",
                               "-o", "%i %N"))
        found: dict[str, list[str]] = {n: [] for n in names}
        for line in lines(out.stdout):
            job, _, nodelist = line.strip().partition(" ")
            try:
                nodes = expand(nodelist)
            except HostListError as e:  # never guess which nodes a job holds: stop as on no answer
                raise SlurmError(f"squeue printed a node list kiln cannot read for job {job}: {e}") from None
            for n in nodes:
                if n in found:
                    found[n].append(job)
        return found
