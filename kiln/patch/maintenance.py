"""What a rollout does for the jobs on a batch's nodes besides waiting for them.

- A maintenance reservation (``Flags=MAINT,IGNORE_JOBS``) on the batch's nodes from ``lead`` seconds
  on, made before the batch is drained: until then Slurm starts a job there only if it ends before the
  reservation (short jobs keep running up to the window); removed once the batch is back.
- Once drained, with ``--notify``: each job on the nodes that asked to be told (its comment holds
  ``kiln:checkpoint``: ``sbatch --comment=kiln:checkpoint``) is sent the signal (its batch shell and every
  step), given ``--grace`` to checkpoint; then, with ``--requeue``, such a job still running there that
  Slurm may requeue (a batch job, ``Requeue=1``) is requeued, and starts again elsewhere from its
  checkpoint. A job that did not ask is never signalled (one that traps nothing would die of it), and it
  and any other job are waited for, never killed.

- Alertmanager silences (kiln/monitoring/silences.py) on the nodes of each batch and each rebooted
  service node, from the batch's reservation start to the end of its window, so planned work pages
  nobody; ended when the batch is back, after a grace for the alerts it caused to resolve (its nodes'
  next health check and four scrapes), or, for a resumed rollout, when it resumes (the interrupted batch
  gets new ones). A node outside the work still alerts. Where Alertmanager does not answer the
  rollout goes on and says so: its alerts will fire.

Every signal and requeue is journalled before it is sent. A resumed rollout never signals a job twice
(a ``begin`` record counts as sent) and requeues a job again only if Slurm's restart count shows the
first requeue never happened.
"""

from __future__ import annotations

import re
import time

from kiln.monitoring.alerts import MonitoringError
from kiln.patch.slurmctl import SlurmError

# the signals a job may be asked to checkpoint on (names without SIG; numbers as Linux has them)
SIGNALS = {"HUP": 1, "INT": 2, "QUIT": 3, "USR1": 10, "USR2": 12, "TERM": 15, "CONT": 18, "URG": 23, "XCPU": 24}
POLL = 1.0  # seconds between looks at the signalled jobs during the grace
REQUEUE_SETTLE = 60.0  # seconds a requeued job gets to reach PENDING (its old run ends first)


def parse_signal(text: str) -> str:
    """``USR1``, ``SIGUSR1``, ``usr1`` or ``10`` -> ``USR1``; anything else is refused (ValueError)."""
    word = str(text).strip().upper()
    word = word[3:] if word.startswith("SIG") else word
    if re.fullmatch(r"[0-9]{1,2}", word):
        word = next((name for name, number in SIGNALS.items() if number == int(word)), word)
    if word not in SIGNALS:
        raise ValueError(f"--notify {text!r}: give a signal jobs checkpoint on: {', '.join(SIGNALS)} (or its number)")
    return word


def reservation_name(rollout_id: str, index: int) -> str:
    return f"kiln_patch_{rollout_id}_{index + 1}"


def job_paths(records: list[dict]) -> dict[str, dict]:
    """Job id -> {"nodes": [...], "path": ["signalled USR1", "requeued", ...]} from a journal's ``job``
    records (phase ``done``, plus ``waited``/``finished`` notes), in the order they happened."""
    jobs: dict[str, dict] = {}
    for r in records:
        if r["event"] != "job" or r.get("phase") not in ("done", "note"):
            continue
        job = jobs.setdefault(r["job"], {"nodes": [], "path": []})
        for n in r.get("nodes", []):
            if n not in job["nodes"]:
                job["nodes"].append(n)
        job["path"].append(r["path"])
    return jobs


class Maintenance:
    """Reservations and checkpoint signals for one rollout (``rollout``: kiln.patch.rollout.Rollout,
    whose journal, Slurm and options it uses)."""

    def __init__(self, rollout):
        self.rollout = rollout

    @property
    def options(self):
        return self.rollout.options

    def _records(self, event: str, **match) -> list[dict]:
        return [r for r in self.rollout.journal.records if r["event"] == event
                and all(r.get(k) == v for k, v in match.items())]

    # --- the reservation ---
    def reserve(self, index: int, batch: list[str]) -> None:
        """Make the batch's reservation (unless the journal says it was made and Slurm still has it),
        then wait until it begins."""
        name = reservation_name(self.rollout.rollout_id, index)
        made = self._records("reservation", name=name, phase="begin")
        lead = int(self.options.lead)
        if made:
            created = made[0]["t"]
        else:
            created = self.rollout.record("reservation", name=name, phase="begin", nodes=batch, lead=lead)["t"]
        if not made or self.rollout.slurm.reservation(name) is None:
            left = max(0, int(created + lead - time.time()))
            self.rollout.slurm.reserve(name, batch, left, max(1, int(self.options.window // 60)))
            self.rollout.record("reservation", name=name, phase="done", nodes=batch)
            if lead:
                self.rollout.say(f"reserved {', '.join(batch)} for maintenance from {left} s on ({name}); "
                                 "jobs that end before then may still start there")
        wait = created + lead - time.time()
        if wait > 0:
            time.sleep(wait)

    def release(self, index: int) -> None:
        self.unsilence(f"batch {index + 1}", self.rollout.silence_grace)
        name = reservation_name(self.rollout.rollout_id, index)
        if self._records("reservation", name=name, phase="released"):
            return
        self.rollout.slurm.delete_reservation(name)
        self.rollout.record("reservation", name=name, phase="released")

    def reassert_released(self) -> list[str]:
        """A resumed rollout's released reservations as the journal has them: a controller that lost
        power comes back with state saved before a release, and its reservation would hold the batch's
        nodes in maintenance for the rest of its window. Deleted again; returns their names."""
        again = []
        for r in self._records("reservation", phase="released"):
            if self.rollout.slurm.reservation(r["name"]) is not None:
                self.rollout.slurm.delete_reservation(r["name"])
                again.append(r["name"])
        return again

    # --- silences ---
    def silence(self, work: str, nodes: list[str]) -> None:
        """Silence every alert of ``nodes`` for ``work`` (``batch 2``, a service node's name) until the end of
        the maintenance window; an earlier silence of the same work (a resumed rollout's) is ended first."""
        silences = self.rollout.silences
        if not silences.enabled:
            return
        self.unsilence(work)
        now = time.time()
        comment = f"kiln patch {self.rollout.rollout_id} {work}: planned maintenance of {', '.join(nodes)}"
        try:
            ids = silences.make(nodes, now, now + self.options.window, comment)
        except MonitoringError as e:
            self.rollout.record("silence", work=work, phase="failed", nodes=nodes, why=str(e))
            self.rollout.say(f"{work}: no silence made ({e}); alerts of {', '.join(nodes)} will fire")
            return
        self.rollout.record("silence", work=work, phase="made", nodes=nodes, ids=ids)

    def unsilence(self, work: str | None = None, after: float = 0) -> None:
        """End the silences made for ``work`` (every work's when None) and not yet ended: now, or ``after``
        seconds from now."""
        ended = {i for r in self._records("silence", phase="expired") for i in r["ids"]}
        for r in self._records("silence", phase="made"):
            if (work is not None and r["work"] != work) or not set(r["ids"]) - ended:
                continue
            try:
                self.rollout.silences.expire([i for i in r["ids"] if i not in ended], after)
            except MonitoringError as e:
                self.rollout.say(f"{r['work']}: its silence was not ended ({e}); it ends with its window")
                continue
            self.rollout.record("silence", work=r["work"], phase="expired", ids=r["ids"])
            ended |= set(r["ids"])

    # --- signal, grace, requeue ---
    def notify(self, index: int, batch: list[str]) -> None:
        """Signal the jobs on ``batch``'s (drained) nodes, give them the grace, requeue those allowed.
        Once per job and batch: a job requeued onto a node of a later batch is a new run there."""
        if not self.options.notify:
            return
        on_nodes = self.rollout.slurm.jobs(batch)
        nodes_of: dict[str, list[str]] = {}
        for node, ids in on_nodes.items():
            for job in ids:
                nodes_of.setdefault(job, []).append(node)
        asked = self.rollout.slurm.opted_in(sorted(nodes_of))
        for job, nodes in nodes_of.items():
            if job not in asked:
                if not self._records("job", job=job, phase="note", batch=index):
                    self.rollout.record("job", job=job, phase="note", nodes=nodes, batch=index,
                                        path="waited for (did not ask to be signalled)")
                    self.rollout.say(f"job {job} on {', '.join(nodes)}: did not ask to be signalled "
                                     "(--comment=kiln:checkpoint); waiting for it to end")
                continue
            if self._records("job", job=job, action="signal", batch=index):
                continue  # sent before a crash (or its begin was written): never twice
            self.rollout.record("job", job=job, action="signal", phase="begin", nodes=nodes, batch=index)
            try:
                self.rollout.slurm.signal(job, self.options.notify)
            except SlurmError as e:  # refused for a job that is ending (COMPLETING) or gone: not an error
                now = self.rollout.slurm.job_details([job]).get(job)
                if now is not None and now.state == "RUNNING":
                    raise
                self.rollout.say(f"job {job} was ending when its signal went out ({e})")
            self.rollout.record("job", job=job, action="signal", phase="done", nodes=nodes, batch=index,
                                path=f"signalled {self.options.notify}")
            self.rollout.say(f"job {job} on {', '.join(nodes)}: sent {self.options.notify}, "
                             f"{self.options.grace:.0f} s to checkpoint")
        signalled = {r["job"]: r for r in self._records("job", action="signal", phase="begin", batch=index)}
        if not signalled:
            return
        deadline = max(r["t"] for r in signalled.values()) + self.options.grace
        while time.time() < deadline and self._still_on(batch, signalled):
            time.sleep(POLL)
        staying = self._still_on(batch, signalled)
        details = self.rollout.slurm.job_details(sorted(staying)) if staying else {}
        for job in signalled:
            mine = {"job": job, "action": "requeue", "batch": index}
            if job not in staying and self._records("job", phase="begin", **mine) \
                    and not self._records("job", phase="done", **mine):  # the requeue took before a crash
                self._eligible_now(job)
                self.rollout.record("job", phase="done", nodes=signalled[job]["nodes"], path="requeued", **mine)
            elif job not in staying and not self._records("job", job=job, phase="note", batch=index) \
                    and not self._records("job", phase="done", **mine):
                self.rollout.record("job", job=job, phase="note", nodes=signalled[job]["nodes"], batch=index,
                                    path="left its node within the grace")
        for job in sorted(staying):
            d = details.get(job)
            if d is None:
                continue  # ended between the two looks
            if self.options.requeue and d.requeueable and d.batch and d.state == "RUNNING":
                self._requeue(index, job, d, signalled[job]["nodes"])
            elif not self._records("job", job=job, phase="note", batch=index):
                why = ("no --requeue" if not self.options.requeue else "ending" if d.state != "RUNNING" else
                       "not requeueable")
                self.rollout.record("job", job=job, phase="note", nodes=signalled[job]["nodes"], batch=index,
                                    path=f"waited for ({why})")
                self.rollout.say(f"job {job}: {why}; waiting for it to end, as for any job")

    def _still_on(self, batch: list[str], jobs) -> set[str]:
        """Which of ``jobs`` still run on ``batch``'s nodes (a requeued job runs again elsewhere only)."""
        return {j for ids in self.rollout.slurm.jobs(batch).values() for j in ids if j in jobs}

    def _requeue(self, index: int, job: str, details, nodes: list[str]) -> None:
        mine = {"job": job, "action": "requeue", "batch": index}
        if self._records("job", phase="done", **mine):
            return
        earlier = self._records("job", phase="begin", **mine)
        if not (earlier and details.restarts > earlier[0]["restarts"]):  # else: taken before a crash
            self.rollout.record("job", phase="begin", nodes=nodes, restarts=details.restarts, **mine)
            try:
                self.rollout.slurm.requeue(job)
            except SlurmError as e:
                now = self.rollout.slurm.job_details([job]).get(job)
                if now is not None and job in self._still_on(nodes, [job]) and now.restarts == details.restarts:
                    raise
                self.rollout.say(f"job {job} left its node before kiln's requeue ({e})")
            self.rollout.say(f"job {job}: requeued (it starts again elsewhere, from its checkpoint)")
            self._eligible_now(job)
        self.rollout.record("job", phase="done", nodes=nodes, path="requeued", **mine)

    def _eligible_now(self, job: str) -> None:
        """Slurm makes a requeued job wait two minutes before it may start again (its old nodes were
        cleaning up); this one's nodes are drained, so it may start at once elsewhere. Once the job
        pends: before that, the requeue itself sets the wait."""
        deadline = time.time() + REQUEUE_SETTLE
        while time.time() < deadline:
            state = self.rollout.slurm.job_details([job]).get(job)
            if state is None or state.state != "COMPLETING" and state.state != "RUNNING":
                break
            time.sleep(POLL)
        if state is not None and state.state == "PENDING":
            try:
                self.rollout.slurm.start_now(job)
            except SlurmError as e:
                self.rollout.say(f"job {job}: left to Slurm's own wait before it starts again ({e})")
