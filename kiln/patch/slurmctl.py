"""What a rollout asks of and tells Slurm, run on the controller over SSH (strict host keys).

Only ``scontrol``, ``squeue`` and ``scancel --signal``: drain with a ``kiln: patch`` reason, resume, set a
failure reason, reboot through Slurm's RebootProgram, list the jobs on nodes, read node states and boot
times; maintenance reservations; signal a job (never cancel one) and requeue it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from checks.node import Node, Result
from checks.parsers import squeue
from checks.parsers.delimited import separator
from checks.parsers.scontrol import SlurmRecordError, show_node_command, show_reservation_command, show_reservations
from kiln.hostlist import HostListError, expand
from kiln.shell import command
from kiln.patch.plan import SlurmNode, parse_nodes


# The word a job's comment holds to ask for kiln patch's --notify signal (and its --requeue)
OPT_IN = "kiln:checkpoint"


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


JOB_FIELDS = ("State", "Requeue", "RestartCnt", "BatchFlag")  # squeue -O: no field a user writes


def parse_jobs(text: str, sep: str) -> dict[str, Job]:
    """``squeue.jobs_command(sep, JOB_FIELDS)``'s output -> id -> Job. A record that does not parse whole,
    or whose fields are not Slurm's shapes, is refused: never a guess about a job kiln may signal."""
    rows, framed = squeue.read_jobs(text, sep, JOB_FIELDS)
    if framed.bad:
        raise SlurmError(framed.problem("squeue"))
    jobs = {}
    for f in rows:
        if not f["State"].isalpha() or not all(f[k].isdigit() for k in JOB_FIELDS[1:]):
            raise SlurmError(f"squeue printed a job kiln cannot read: {f}"[:200])
        jobs[f["JobID"]] = Job(f["JobID"], f["State"], f["Requeue"] == "1", f["BatchFlag"] == "1", int(f["RestartCnt"]))
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
        return parse_nodes(self._ok(command(*show_node_command())).stdout)

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
        out = self.node.run(command(*show_reservation_command(name)))
        if out.rc != 0 or "ReservationName=" not in out.stdout:
            if "not found" in (out.stdout + out.stderr).lower() or out.rc == 0:
                return None
            raise SlurmError(f"scontrol show reservation {name} exited {out.rc}: {(out.stderr or out.stdout).strip()[:300]}")
        try:
            return show_reservations(out.stdout).get(name)
        except SlurmRecordError as e:
            raise SlurmError(f"scontrol show reservation {name}: {e}") from None

    def delete_reservation(self, name: str) -> None:
        if self.reservation(name) is not None:
            self._ok(command("scontrol", "delete", f"reservationname={name}"))

    def job_details(self, ids: list[str]) -> dict[str, Job]:
        """Each job of ``ids`` Slurm still knows (a finished job may have left its memory)."""
        if not ids:
            return {}
        sep = separator()
        out = self.node.run(command(*squeue.jobs_command(sep, JOB_FIELDS, "-j", ",".join(ids))))
        if out.rc != 0:
            if "invalid job id" in (out.stdout + out.stderr).lower():
                return {}  # none of them is known any more
            raise SlurmError(f"squeue -j {','.join(ids)} exited {out.rc}: {(out.stderr or out.stdout).strip()[:300]}")
        return parse_jobs(out.stdout, sep)

    def opted_in(self, ids: list[str]) -> set[str]:
        """Which of ``ids`` asked to be told before maintenance: their comment (squeue's Comment, the job's
        own ``--comment``) holds the word ``OPT_IN`` (``sbatch --comment=kiln:checkpoint``)."""
        if not ids:
            return set()
        sep = separator()
        out = self.node.run(command(*squeue.jobs_command(sep, ("Comment",), "-j", ",".join(ids))))
        if out.rc != 0:
            if "invalid job id" in (out.stdout + out.stderr).lower():
                return set()
            raise SlurmError(f"squeue -j {','.join(ids)} exited {out.rc}: {(out.stderr or out.stdout).strip()[:300]}")
        rows, framed = squeue.read_jobs(out.stdout, sep, ("Comment",))
        if framed.bad:  # never signal on a guess
            raise SlurmError(framed.problem("squeue"))
        return {row["JobID"] for row in rows if OPT_IN in re.split(r"[\s,;]+", row["Comment"])}

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
        sep = separator()
        out = self._ok(command(*squeue.jobs_command(sep, ("NodeList",), "-w", ",".join(names),
                                                    "-t", "RUNNING,COMPLETING,CONFIGURING,SUSPENDED")))
        rows, framed = squeue.read_jobs(out.stdout, sep, ("NodeList",))
        if framed.bad:  # never guess which nodes a job holds: stop as on no answer
            raise SlurmError(framed.problem("squeue"))
        found: dict[str, list[str]] = {n: [] for n in names}
        for row in rows:
            job, nodelist = row["JobID"], row["NodeList"]
            try:
                nodes = expand(nodelist)
            except HostListError as e:  # never guess which nodes a job holds: stop as on no answer
                raise SlurmError(f"squeue printed a node list kiln cannot read for job {job}: {e}") from None
            for n in nodes:
                if n in found:
                    found[n].append(job)
        return found
