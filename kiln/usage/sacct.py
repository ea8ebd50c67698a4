"""Slurm's accounting as ``kiln usage`` reads it: one ``sacct`` call for the jobs of a whole window and
one ``sacctmgr`` call for its reservations, parsed here.

Pure: the commands' words and parsers of their output. Job names are set by users and AdminComment by
admins and other tools (pretty-printed JSON among them): either may hold ``|``, a newline, ``\r`` or
U+2028. sacct is asked with a separator made for the one call (``--delimiter``) and with a job id both
first and last in each record, so records are read whole as checks/parsers/delimited.py describes; a
record that does not parse whole is counted and named, never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from checks.parsers import sacctmgr
from checks.parsers.delimited import records
from checks.parsers.slurm_values import TIME, TRES, count, epoch, tres

FIELDS = ("JobIDRaw", "User", "Account", "QOS", "Partition", "State", "Submit", "Eligible", "Start", "End", "ElapsedRaw",
          "AllocTRES", "NodeList", "Reservation", "AdminComment", "Comment", "JobName", "JobIDRaw")
JOB_ID = r"\d{1,12}"  # the first and the last field of every record
ADMIN_PREFIX = "kiln:"  # kiln's AdminComment: kiln:gpu_util=63.5,gpu_mem_util=41.0,gpus=2,seconds=600
# the word a job puts in its own comment when it has saved a checkpoint (docs/examples/checkpointing-job.sh):
# kiln:saved=EPOCH among other words (kiln:checkpoint, the user's own)
SAVED = re.compile(r"kiln:saved=(\d{1,12})")


def command(since: str, until: str, sep: str) -> list[str]:
    """Every run of every job (all users, allocations only; ``-D``: a requeued, preempted or node-failed
    run too, each with its own state and times, under the job's id) that ran or waited in [since,
    until), fields separated by ``sep`` (checks.parsers.delimited.separator(): new for each call)."""
    return ["sacct", "-a", "-X", "-D", "-n", "-P", f"--delimiter={sep}", "--noconvert", "-S", since, "-E", until,
            "-o", ",".join(FIELDS)]


def job_command(job_id: str, sep: str) -> list[str]:
    """Every run of one job (``read`` reads it as ``command``'s): where and when it ran, whenever that was."""
    return ["sacct", "-j", job_id, "-X", "-D", "-n", "-P", f"--delimiter={sep}", "--noconvert", "-o", ",".join(FIELDS)]


@dataclass(frozen=True)
class Job:
    job_id: str
    user: str
    account: str
    qos: str
    partition: str
    state: str
    submit: float | None      # epoch seconds (UTC); None when Slurm has none
    eligible: float | None    # when the job could first start (after a hold, a dependency, --begin)
    start: float | None
    end: float | None
    elapsed: int             # seconds
    gpus: int                # generic gres/gpu of the allocation
    cpus: int
    nodes: str               # Slurm's folded node list
    reservation: str
    gpu_util: float | None   # percent, measured over the job's life; None: not measured
    name: str
    billing: int | None = None  # Slurm's billing TRES of the allocation (kiln/usage/billing.py); None: none
    util_by: str | None = None  # what measured gpu_util: gr_engine_active (DCGM profiling) or gpu_util (NVML)
    saved: float | None = None  # the run's last checkpoint, as the job wrote it in its comment (saved_at)


def saved_at(comment: str) -> float | None:
    """The last ``kiln:saved=EPOCH`` word of a job's comment (the job's own, set by its user: it can only
    speak for the job's own lost work, and report() bounds it by the run's start and end), or None."""
    found = [int(m.group(1)) for w in re.split(r"[\s,;]+", comment) if (m := SAVED.fullmatch(w))]
    return float(found[-1]) if found else None


UTIL_BY = ("gr_engine_active", "gpu_util")  # checks/job_summary.py ACTIVITY: what measured a job's busy share


def admin_util_by(text: str) -> str | None:
    """What measured the utilization kiln recorded (``util_by``; a summary older than the word: GPU_UTIL)."""
    if admin_util(text) is None:
        return None
    fields = dict(part.split("=", 1) for part in text[len(ADMIN_PREFIX):].split(",") if "=" in part)
    by = fields.get("util_by", "gpu_util")
    return by if by in UTIL_BY else None


def admin_util(text: str) -> float | None:
    """The GPU utilization kiln recorded in AdminComment (``kiln:gpu_util=63.5,gpu_mem_util=41.0,...``), or
    None (not kiln's, not measured, malformed)."""
    if not text.startswith(ADMIN_PREFIX):
        return None
    fields = dict(part.split("=", 1) for part in text[len(ADMIN_PREFIX):].split(",") if "=" in part)
    m = re.fullmatch(r"\d{1,3}(?:\.\d{1,3})?", fields.get("gpu_util", ""))
    value = float(m.group(0)) if m else None
    return value if value is not None and value <= 100 else None


def read(text: str, sep: str) -> tuple[list[Job], str]:
    """(the jobs of ``command``'s output, '' or what was left out and why). A record whose first and last
    job ids differ, or whose times, numbers or TRES are not Slurm's, is left out and counted. Times are
    read as UTC: kiln asks sacct with SLURM_ENV (TZ=UTC)."""
    framed = records(text, sep, len(FIELDS), first=JOB_ID, last=JOB_ID)
    jobs = []
    for parts in framed.rows:
        f = dict(zip(FIELDS, parts))
        if parts[0] != parts[-1] or not _slurm_fields(f):
            framed.refuse(sep.join(parts))
            continue
        alloc = tres(f["AllocTRES"])
        jobs.append(Job(f["JobIDRaw"], f["User"], f["Account"], f["QOS"], f["Partition"], f["State"].split(" ")[0],
                        epoch(f["Submit"]), epoch(f["Eligible"]), epoch(f["Start"]), epoch(f["End"]),
                        count(f["ElapsedRaw"]), count(alloc.get("gres/gpu")), count(alloc.get("cpu")), f["NodeList"],
                        f["Reservation"], admin_util(f["AdminComment"]), f["JobName"],
                        count(alloc["billing"]) if "billing" in alloc else None, admin_util_by(f["AdminComment"]),
                        saved_at(f["Comment"])))
    return jobs, framed.problem("sacct")


def _slurm_fields(f: dict[str, str]) -> bool:
    """The fields Slurm fills have Slurm's shapes (a value a user set cannot reach them once framed)."""
    return (all(TIME.fullmatch(f[k]) for k in ("Submit", "Eligible", "Start", "End")) and f["ElapsedRaw"].isdigit()
            and TRES.fullmatch(f["AllocTRES"]) is not None)


RESERVATION_FIELDS = ("Name", "Start", "End", "TRES", "NodeNames", "Flags")


@dataclass(frozen=True)
class Reservation:
    name: str
    start: float
    end: float
    gpus: int | None     # gres/gpu of the reservation's TRES; None when Slurm records none (22.05: cpu only)
    nodes: str           # Slurm's folded node list
    flags: str


def reservations_command(since: str, until: str) -> list[str]:
    """Every reservation of the accounting database that overlaps [since, until): one call."""
    return sacctmgr.show_command("reservation", f"start={since}", f"end={until}", fields=RESERVATION_FIELDS)


def parse_reservations(text: str) -> list[Reservation]:
    """The reservations of ``reservations_command``'s output; a line without a name, a start and an end
    is skipped."""
    out = []
    for row in sacctmgr.read(text, RESERVATION_FIELDS)[0]:
        start_t, end_t = epoch(row["Start"]), epoch(row["End"])
        if not row["Name"] or start_t is None or end_t is None:
            continue
        gpus = tres(row["TRES"]).get("gres/gpu")
        out.append(Reservation(row["Name"], start_t, end_t, count(gpus) if gpus is not None else None,
                               row["NodeNames"], row["Flags"]))
    return out
