"""``squeue``: the one reader of its output. Pure, standard library only.

Asked with ``-O`` (the only form that prints ``tres-alloc``), each field's suffix a separator made for the
call (checks/parsers/delimited.py), and the job's id first and last: a reason, an account or a node list
never moves a field, and a job name (never asked for) cannot reach the answer at all.

Text, not ``squeue --json``, by choice, as for sinfo (checks/parsers/sinfo.py): 22.05's JSON holds the
fields, but its shape differs on 24.11 and it carries every field of every job on each call (the Slurm
collector asks at every scrape, 30 s by default).
"""

from __future__ import annotations

from checks.parsers.delimited import Records, records

JOB_ID = r"\d{1,12}"  # -O JobID: every job, array task and het component its own number (seen on 22.05)


def jobs_command(sep: str, fields: tuple[str, ...], *filters: str) -> list[str]:
    """``squeue -h`` (all partitions, ``filters`` such as ``-w NODES``, ``-j IDS``, ``-t STATES``) printing
    JobID, ``fields`` (squeue -O names: State, Account, Reason, tres-alloc, NodeList, ...), JobID."""
    spec = ",".join(f"{name}:{sep}" for name in ("JobID", *fields)) + ",JobID:"
    return ["squeue", "-h", "-a", *filters, "-O", spec]


def read_jobs(text: str, sep: str, fields: tuple[str, ...]) -> tuple[list[dict[str, str]], Records]:
    """``jobs_command``'s output: one dict a job (``JobID`` and each of ``fields``, stripped of squeue's
    padding), with the records that did not parse whole."""
    framed = records(text, sep, len(fields) + 2, first=JOB_ID, last=JOB_ID)
    jobs = []
    for row in framed.rows:
        first, last = row[0], row[-1]
        if first != last:
            framed.refuse(sep.join(row))
            continue
        jobs.append({"JobID": first, **{name: value.strip() for name, value in zip(fields, row[1:-1])}})
    return jobs, framed
