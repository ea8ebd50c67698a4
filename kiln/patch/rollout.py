"""A rolling patch of a live cluster: batch by batch, drain, wait for jobs, apply, reboot, check, resume.

Every step is journalled (kiln/patch/journal.py) before it takes effect and again when it is done. A
resumed rollout skips steps that are done, and a step that was begun but not done is first checked
against the cluster (is the node drained already? has its BootTime changed since the reboot was
issued?) so nothing is done twice. Jobs are never killed: a node is patched only once Slurm shows no
job on it; after ``drain_timeout`` it is put back in service unpatched and reported.

The health role is always applied with the rollout's roles: the node-local checks (Slurm's
HealthCheckProgram) must expect what the new pins install, or they would drain the patched node.

After each batch and each service node, the isolation suite runs on the login hosts
(kiln/check/isolation_gate.py): a team's probe that gets through stops the rollout there.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

import roles
from checks.verdict import Verdict
from kiln.check.isolation_gate import failures, lines, rollout_stop, run_gate
from kiln.check.remote import RemoteCheck
from kiln.inventory.model import Cluster, Secrets
from kiln.monitoring.silences import Silences
from kiln.patch import plan as planning
from kiln.patch.journal import Journal
from kiln.patch.maintenance import Maintenance
from kiln.patch.service_nodes import ServiceNodes
from kiln.patch.slurmctl import SlurmControl, SlurmError

SUITES = ["gpu", "fabric", "storage", "slurm", "system"]
POLL = 1.0
ROOM_WAIT = 60.0  # seconds a rollout waits for a node to come back into service before it stops
SETTLE_WAIT = 20.0  # seconds a NOT_RESPONDING node gets to answer before the plan calls it down
RESUME_RETRY_S = 5.0  # between tries to resume a node Slurm held out across a controller's power loss


@dataclass(frozen=True)
class Options:
    roles: list[str]
    max_unavailable: str = "1"
    canary: int = 1
    failure_budget: int = 1
    reboot: str = "needed"          # never | needed | always
    drain_timeout: float = 3600.0
    boot_timeout: float = 600.0
    notify: str = ""                # a signal (USR1) sent to the jobs on drained nodes, or none
    grace: float = 0.0              # seconds they get to checkpoint before a requeue
    requeue: bool = False           # requeue the requeueable jobs still running after the grace
    lead: float = 0.0               # the maintenance reservation begins this long before the drain
    window: float = 7200.0          # the reservation's length
    workload_check: bool = False    # the workload suite on each batch too, against the cluster's medians

    def as_dict(self) -> dict:
        return dict(self.__dict__)

    @property
    def apply_roles(self) -> list[str]:
        return self.roles + ([] if "health" in self.roles else ["health"])


@dataclass
class Outcome:
    results: dict[str, dict] = field(default_factory=dict)   # node -> {"result": ..., "detail": ...}
    stopped: str | None = None
    batches: list[dict] = field(default_factory=list)
    paused: bool = False  # stopped by a lost controller: the journal is left unfinished for --resume

    @property
    def failed(self) -> list[str]:
        return [n for n, r in self.results.items() if r["result"] == "failed"]


def deploy_roles(cluster: Cluster, secrets: Secrets, names: list[str], role_names: list[str], forks: int = 0) -> list:
    """Apply ``role_names`` on ``names`` with kiln deploy, ``forks`` at once (0: all); one result per
    host (status, changed, failed_op, error, reboot_required)."""
    from kiln.deploy.runner import Deploy
    return Deploy(cluster, secrets, names, role_names, forks=forks).run().hosts


def configure_roles(cluster: Cluster, secrets: Secrets, names: list[str], role_names: list[str]) -> list:
    """Only the configure stage of ``role_names`` on ``names`` (files and daemons, no package)."""
    from kiln.deploy.runner import Deploy
    return Deploy(cluster, secrets, names, role_names, stages=("configure",)).run().hosts


def check_nodes(cluster: Cluster, names: list[str], forks: int = 64, workload: bool = False
                ) -> dict[str, list[Verdict]]:
    """Node -> its verdicts, from kiln check's suites over SSH, ``forks`` nodes at once; with ``workload``
    the workload suite too (a batch judged against the medians of the last run over the cluster)."""
    suites = SUITES + (["workload"] if workload else [])
    with RemoteCheck(cluster, [cluster.hosts[n] for n in names], suites, forks=forks) as checker:
        checker.collect()
    return checker.results


class Rollout(ServiceNodes):
    """The rollout loop. Its collaborators are injected (defaults: the real ones): ``slurm`` (what
    SlurmControl offers), ``checker`` (gives a Node for a host, for service-node reboots), ``apply``
    (``deploy_roles``), ``check`` (``check_nodes``) and ``isolation`` (``run_gate``), so resume and the
    failure budget are tested without a cluster."""

    def poll(self) -> float:
        return POLL  # read at each wait: tests shorten it

    def __init__(self, cluster: Cluster, secrets: Secrets, journal: Journal, options: Options,
                 progress: Callable[[str], None] = print, *, slurm=None, checker=None,
                 apply: Callable = deploy_roles, check: Callable = check_nodes, configure: Callable = configure_roles,
                 events=None, silences: Silences | None = None, isolation: Callable = run_gate):
        """``events``: told each node's steps and result as they happen (kiln.cli.progress.Progress,
        which then also stamps ``progress``'s lines with the time)."""
        self.cluster, self.secrets, self.journal, self.options = cluster, secrets, journal, options
        self.progress, self.events = progress, events
        self.checker = checker or RemoteCheck(cluster, list(cluster.hosts.values()), SUITES)
        self.slurm = slurm or SlurmControl(self.checker.node(cluster.controllers[0]))
        self.apply, self.check, self.configure, self.isolation = apply, check, configure, isolation
        if options.workload_check:
            self.check = lambda cluster, names: check(cluster, names, workload=True)
        self.compute = [h.name for h in cluster.compute]
        self.started = time.monotonic()
        self.rollout_id = ""
        self.maintenance = Maintenance(self)
        self.silences = silences or Silences(cluster, secrets.monitoring_password, program="kiln patch")
        self.silence_grace = Silences.grace(cluster) if cluster.monitored else 0
        self._lock = threading.Lock()
        self._sampling = False

    # --- journal helpers ---
    def say(self, message: str) -> None:
        self.progress(message if self.events else f"[{time.monotonic() - self.started:7.1f}s] {message}")

    def record(self, event: str, **fields) -> dict:
        with self._lock:
            return self.journal.write(event, **fields)

    def begin(self, node: str, step: str, **details) -> dict | None:
        """Journal the start of ``step``; returns the earlier ``begin`` when the step was interrupted."""
        earlier = self.journal.begun(node, step)
        self.record("step", node=node, step=step, phase="resume" if earlier else "begin", **details)
        if self.events:
            self.events.step(node, step)
        return earlier

    def done(self, node: str, step: str, **details) -> None:
        self.record("step", node=node, step=step, phase="done", **details)

    def finish(self, node: str, result: str, detail: str, outcome: Outcome) -> None:
        outcome.results[node] = {"result": result, "detail": detail}
        if not self.journal.result(node):
            self.record("node", node=node, result=result, detail=detail)
        if self.events:
            self.events.finish(node, result, detail)
        else:
            self.say(f"{node}: {result}{' - ' + detail if detail else ''}")

    # --- the run ---
    def new_plan(self, hosts: list[str]) -> planning.Plan:
        chosen = {h for h in hosts if self._has_roles(h)}
        compute_set = set(self.compute)
        service = [h for h in hosts if h in chosen and h not in compute_set]
        compute = [h for h in self.compute if h in chosen]
        # A node that just came back (a reboot, a resume) can be NOT_RESPONDING for a few seconds: give it
        # SETTLE_WAIT before it is called down and skipped.
        slurm = self.slurm.nodes()
        deadline = time.monotonic() + SETTLE_WAIT
        while time.monotonic() < deadline and any(
                slurm.get(n) and "NOT_RESPONDING" in slurm[n].flags and "DOWN" not in slurm[n].flags for n in compute):
            time.sleep(POLL)
            slurm = self.slurm.nodes()
        limit = planning.parse_max_unavailable(self.options.max_unavailable, len(self.compute))
        plan = planning.make_plan(service, compute, self.compute, slurm, limit, self.options.canary)
        if "slurm" in self.options.roles:
            self._slurm_upgrade(plan)
        return plan

    def _has_roles(self, name: str) -> bool:
        return bool(roles.for_host(self.cluster.hosts[name].roles, self.options.roles))

    def start(self, hosts: list[str]) -> planning.Plan:
        plan = self.new_plan(hosts)
        self.rollout_id = uuid.uuid4().hex[:8]
        self.record("start", rollout=self.rollout_id, cluster=self.cluster.name, options=self.options.as_dict(),
                    plan=plan.as_dict())
        return plan

    def run(self, plan: planning.Plan) -> Outcome:
        self.rollout_id = self.rollout_id or self.journal.start["rollout"]
        outcome = Outcome()
        for name, why in plan.skipped.items():
            self.finish(name, "skipped", why, outcome)
        for r in self.journal.records:
            if r["event"] == "node":
                outcome.results[r["node"]] = {"result": r["result"], "detail": r["detail"]}
        self._start_sampler()
        try:
            self.maintenance.unsilence()  # a resumed rollout's: the work left is silenced anew
            self._reassert(outcome)
            self._run(plan, outcome)
        except SlurmError as e:
            # The controller is gone (or its Slurm is): nothing more can be drained, checked or resumed.
            # No end record: the journal stays unfinished, so --resume continues from this point.
            outcome.stopped = (f"the controller does not answer ({e}); the rollout stopped where it was and "
                               "its journal keeps the place: once the controller is back, kiln patch --resume")
            outcome.paused = True
            self.say(f"stopped: {outcome.stopped}")
            self.record("paused", why=outcome.stopped)
            return outcome
        finally:
            self._sampling = False
            self.checker.close()
        self.record("end", result="stopped" if outcome.stopped else "completed", why=outcome.stopped,
                    failed=outcome.failed)
        return outcome

    def _reassert(self, outcome: Outcome) -> None:
        """A resumed rollout's finished nodes as the journal has them: a controller that lost power can
        come back with node state saved before it, a node kiln already resumed drained again with this
        rollout's reason (and a reboot still pending). Put back into service; nothing else is redone."""
        for name in self.maintenance.reassert_released():
            self.say(f"{name}: released, but Slurm has it again (its controller lost newer state): deleted")
            self.record("reasserted", reservation=name)
        patched = [n for n, r in outcome.results.items() if r["result"] == "patched"]
        if not patched:
            return
        slurm = self.slurm.nodes()
        reason = f"kiln: patch {self.rollout_id}"
        for n in patched:
            node = slurm.get(n)
            if node is None or not (node.drained_by_kiln and node.reason.startswith(reason)):
                continue
            self.say(f"{n}: patched, but Slurm holds it drained for this rollout (its controller lost newer "
                     "state): back into service")
            if any(f.startswith("REBOOT") for f in node.flags):
                try:
                    self.slurm.cancel_reboot(n)
                except SlurmError as e:  # Slurm 22.05 refuses it once the reboot was issued
                    self.say(f"{n}: {e}; set DOWN first to end the stale reboot")
                    self.slurm.set_down(n, f"{reason}: stale reboot ended")
            self._resume_held(n, reason)
            self.record("reasserted", node=n, state=node.state)

    def _resume_held(self, name: str, reason: str) -> None:
        """Resume ``name``, which Slurm held out with this rollout's ``reason``. Slurm may put it back
        itself meanwhile (cancel_reboot undrains a node drained for its reboot; a node whose reboot is
        done registers and takes its next state): a resume refused then is no error. Bounded retries."""
        for attempt in range(3):
            node = self.slurm.nodes().get(name)
            held = any(f.startswith("DRAIN") or f == "DOWN" for f in node.flags) if node else False
            if not (held and node.reason.startswith(reason)):
                return
            try:
                self.slurm.resume([name])
                return
            except SlurmError as e:
                if attempt == 2:
                    raise
                self.say(f"{name}: {e}; reading its state again")
                time.sleep(RESUME_RETRY_S)

    def _run(self, plan: planning.Plan, outcome: Outcome) -> None:
        if plan.slurm_upgrade and not self._slurmd_timeout(plan.slurm_upgrade["slurmd_timeout"][0], "raised", outcome):
            return
        self._run_nodes(plan, outcome)  # a SlurmError (paused) leaves the raise journalled for --resume
        if plan.slurm_upgrade:
            self._slurmd_timeout(plan.slurm_upgrade["slurmd_timeout"][1], "restored", outcome)

    def _run_nodes(self, plan: planning.Plan, outcome: Outcome) -> None:
        for name in plan.service:
            if name not in outcome.results:
                self._service_node(name, outcome, plan)
                if not self._isolation_holds(name, outcome):
                    return
            if self._budget_spent(outcome):
                return
        self._compute_batches(plan, outcome)
        for name in plan.service_after:  # a Slurm upgrade's client commands, after every slurmd
            if self._budget_spent(outcome) or outcome.stopped:
                return
            if name not in outcome.results:
                self._service_node(name, outcome, plan)
                if not self._isolation_holds(name, outcome):
                    return

    def _compute_batches(self, plan: planning.Plan, outcome: Outcome) -> None:
        queue = [n for batch in plan.compute for n in batch if n not in outcome.results]
        sizes = [len(b) for b in plan.compute]
        # a resumed rollout numbers its batches on from the last one done (the interrupted one keeps
        # its number, and so its reservation)
        index = len({r["index"] for r in self.journal.records if r["event"] == "batch" and r["phase"] == "done"})
        while queue:
            if self._budget_spent(outcome):
                return
            # A node just back in service can be briefly NOT_RESPONDING: wait a little for room.
            self._until(lambda: self._room(plan, queue) > 0, ROOM_WAIT)
            slurm = self.slurm.nodes()
            size = sizes[index] if index < len(sizes) else plan.max_unavailable
            held = {n for n in queue if self.journal.done(n, "drain")}
            batch = planning.next_batch(queue, slurm, self.compute, plan.max_unavailable, size, held)
            if not batch:
                in_service = sum(1 for n in self.compute if n in slurm and slurm[n].in_service)
                outcome.stopped = (f"only {in_service} of {len(self.compute)} compute nodes are in service; "
                                   f"--max-unavailable {plan.max_unavailable} allows no more to leave: "
                                   f"{len(queue)} node(s) not patched ({', '.join(queue)}); out of service: "
                                   + ", ".join(f"{n} {slurm[n].state}" for n in self.compute
                                               if n in slurm and not slurm[n].in_service))
                self.say(f"stopped: {outcome.stopped}")
                return
            self._batch(index, batch, outcome)
            if not self._isolation_holds(f"batch {index + 1}", outcome):
                return
            queue = [n for n in queue if n not in batch]
            index += 1

    def _isolation_holds(self, after: str, outcome: Outcome) -> bool:
        """The isolation suite on every login host, after ``after`` (a batch, a service node); one that
        fails stops the rollout. Journalled; nothing to run (no probe account) passes."""
        t0 = time.monotonic()
        results = self.isolation(self.cluster, [h.name for h in self.cluster.user_logins])
        if not results:
            return True
        self.record("isolation", after=after, failed={h: [v.id for v in vs] for h, vs in failures(results).items()})
        outcome.stopped = rollout_stop(after, results)
        if outcome.stopped:
            self.say(f"stopped: {outcome.stopped}")
            return False
        for line in lines(results):
            self.say(f"after {after}, {line} ({time.monotonic() - t0:.0f} s)")
        return True

    def _room(self, plan: planning.Plan, queue: list[str]) -> int:
        """Room for new nodes, counting nodes this rollout already holds (they need none)."""
        slurm = self.slurm.nodes()
        if any(slurm.get(n) and (slurm[n].drained_by_kiln or not slurm[n].in_service) for n in queue):
            return 1
        return planning.room(slurm, self.compute, plan.max_unavailable)

    def _budget_spent(self, outcome: Outcome) -> bool:
        failed = outcome.failed
        if planning.budget_spent(failed, self.options.failure_budget):
            outcome.stopped = (f"failure budget spent: {len(failed)} node(s) failed ({', '.join(failed)}), "
                               f"budget {self.options.failure_budget}; they stay drained with a kiln: reason")
            self.say(f"stopped: {outcome.stopped}")
            return True
        return False

    # --- one compute batch ---
    def _batch(self, index: int, batch: list[str], outcome: Outcome) -> None:
        t0 = time.monotonic()
        self.record("batch", index=index, phase="begin", nodes=batch)
        self.say(f"batch {index + 1}: {', '.join(batch)}")
        reason = f"kiln: patch {self.rollout_id}"
        todo = [n for n in batch if not self.journal.done(n, "drain")]
        if todo:
            self.maintenance.reserve(index, batch)
        self.maintenance.silence(f"batch {index + 1}", batch)  # from the reservation's start, before the drain
        if todo:
            slurm = self.slurm.nodes()
            for n in todo:
                self.begin(n, "drain", reason=reason)
            need = [n for n in todo if not (slurm[n].drained_by_kiln and slurm[n].reason.startswith(reason))]
            if need:
                self.slurm.drain(need, reason)
            for n in todo:
                self.done(n, "drain")
        t_drain = time.monotonic()
        self.maintenance.notify(index, batch)
        batch = self._wait_for_jobs(batch, outcome)
        drain_s = time.monotonic() - t_drain
        t_patch = time.monotonic()
        batch, reboot = self._apply(batch, outcome)
        patch_s = time.monotonic() - t_patch
        t_reboot = time.monotonic()
        batch = self._reboot(batch, reboot, outcome)
        reboot_s = time.monotonic() - t_reboot
        self._check_and_resume(batch, outcome)
        self.maintenance.release(index)
        seconds = time.monotonic() - t0
        timing = {"seconds": round(seconds, 2), "drain_s": round(drain_s, 2), "patch_s": round(patch_s, 2),
                  "reboot_s": round(reboot_s, 2), "overhead_s": round(seconds - drain_s - patch_s - reboot_s, 2)}
        self.record("batch", index=index, phase="done", nodes=batch, **timing)
        outcome.batches.append({"index": index, "nodes": batch, **timing})
        self.say(f"batch {index + 1} done in {seconds:.1f} s (jobs {drain_s:.1f}, patch {patch_s:.1f}, "
                 f"reboot {reboot_s:.1f}, kiln's own {timing['overhead_s']:.1f})")

    def _wait_for_jobs(self, batch: list[str], outcome: Outcome) -> list[str]:
        waiting = [n for n in batch if not self.journal.done(n, "jobs_done")]
        for n in waiting:
            self.begin(n, "jobs_done")
        deadline = {n: time.monotonic() + self.options.drain_timeout for n in waiting}
        announced: set[str] = set()
        while waiting:
            jobs = self.slurm.jobs(waiting)
            for n in list(waiting):
                if not jobs[n]:
                    self.done(n, "jobs_done")
                    waiting.remove(n)
                elif time.monotonic() > deadline[n]:
                    self.slurm.resume([n])
                    self._until(lambda: self.slurm.nodes()[n].in_service, self.options.boot_timeout)
                    waiting.remove(n)
                    batch = [b for b in batch if b != n]
                    self.finish(n, "not patched", f"jobs {', '.join(jobs[n])} still running after "
                                f"{self.options.drain_timeout:.0f} s; back in service, unpatched", outcome)
                elif n not in announced:
                    announced.add(n)
                    self.say(f"{n}: drained, waiting for job(s) {', '.join(jobs[n])} to finish")
            if waiting:
                time.sleep(POLL)
        return batch

    def _apply(self, batch: list[str], outcome: Outcome) -> tuple[list[str], set[str]]:
        todo = [n for n in batch if not self.journal.done(n, "apply")]
        reboot = {n for n in batch if (self.journal.done(n, "apply") or {}).get("reboot_required")}
        if todo:
            for n in todo:
                self.begin(n, "apply", roles=self.options.roles)
            self.say(f"applying {', '.join(self.options.roles)} on {', '.join(todo)}")
            for h in self.apply(self.cluster, self.secrets, todo, self.options.apply_roles):
                if h.status in ("changed", "no change"):
                    self.done(h.name, "apply", changed=len(h.changed), reboot_required=h.reboot_required)
                    if h.reboot_required:
                        reboot.add(h.name)
                else:
                    last = (h.error or "").strip().splitlines()
                    detail = f"{h.status}" + (f" at {h.failed_op!r}" if h.failed_op else "") + \
                        (f": {last[0] if h.status == 'unreachable' else last[-1]}" if last else "")
                    self._keep_drained(h.name, f"kiln: PATCH_FAILED {h.failed_op or h.status}", detail, outcome)
        batch = [n for n in batch if n not in outcome.results]
        if self.options.reboot == "always":
            reboot = set(batch)
        elif self.options.reboot == "never":
            reboot = set()
        return batch, reboot & set(batch)

    def _reboot(self, batch: list[str], reboot: set[str], outcome: Outcome) -> list[str]:
        todo = [n for n in batch if n in reboot and not self.journal.done(n, "reboot")]
        if not todo:
            return batch
        slurm = self.slurm.nodes()
        issue = []
        for n in todo:
            earlier = self.begin(n, "reboot", boot_time=slurm[n].boot_time)
            before = earlier["boot_time"] if earlier else slurm[n].boot_time
            if earlier and (slurm[n].boot_time != before or "REBOOT" in slurm[n].state):
                continue  # issued before the crash: it has happened or is under way
            issue.append(n)
        if issue:
            self.say(f"rebooting {', '.join(issue)} through Slurm (RebootProgram)")
            self.slurm.reboot(issue, f"kiln: patch {self.rollout_id} reboot")
        before = {n: (self.journal.begun(n, "reboot") or {}).get("boot_time", "") for n in todo}
        deadline = time.monotonic() + self.options.boot_timeout
        waiting = list(todo)
        while waiting:
            slurm = self.slurm.nodes()
            for n in list(waiting):
                s = slurm[n]
                if s.boot_time != before[n] and "REBOOT" not in s.state and not s.down:
                    self.done(n, "reboot", boot_time=s.boot_time)
                    waiting.remove(n)
            if waiting and time.monotonic() > deadline:
                for n in waiting:
                    self._keep_drained(n, "kiln: REBOOT_TIMEOUT node did not come back", f"not back after "
                                       f"{self.options.boot_timeout:.0f} s ({slurm[n].state})", outcome)
                break
            if waiting:
                time.sleep(POLL)
        return [n for n in batch if n not in outcome.results]

    def _check_and_resume(self, batch: list[str], outcome: Outcome) -> None:
        if not batch:
            return
        for n in batch:
            self.begin(n, "check")
        results = self.check(self.cluster, batch)
        passed = []
        for n in batch:
            failed: list[Verdict] = [v for v in results.get(n, []) if v.failed]
            self.done(n, "check", failed=[v.id for v in failed])
            if failed:
                first = failed[0]
                self._keep_drained(n, f"kiln: {first.id} {first.message}", f"{first.id}: {first.message}", outcome)
                continue
            passed.append(n)
            self.begin(n, "resume")
        if not passed:
            return
        slurm = self.slurm.nodes()
        drained = [n for n in passed if slurm[n].drained_by_kiln]
        if drained:
            self.slurm.resume(drained)  # the batch in one call
        self._until(lambda: all(s.in_service for n, s in self.slurm.nodes().items() if n in passed),
                    self.options.boot_timeout)
        for n in passed:
            self.done(n, "resume")
            self.finish(n, "patched", "", outcome)

    @staticmethod
    def _until(condition, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                return False
            time.sleep(POLL / 4)
        return True

    def _keep_drained(self, node: str, reason: str, detail: str, outcome: Outcome) -> None:
        try:
            self.slurm.set_reason(node, reason)
        except SlurmError as e:
            detail += f" (could not set the drain reason: {e})"
        self.finish(node, "failed", detail + "; it stays drained: fix it, then scontrol update "
                    f"nodename={node} state=resume (or let kiln's health check resume it)", outcome)

    # --- nodes in service over time, for the report ---
    def _start_sampler(self) -> None:
        self._sampling = True

        def sample():
            while self._sampling:
                try:
                    slurm = self.slurm.nodes()
                    self.record("sample", in_service=sum(1 for n in self.compute if n in slurm and slurm[n].in_service),
                                total=len(self.compute))
                except SlurmError:
                    pass
                time.sleep(2)
        threading.Thread(target=sample, daemon=True).start()
