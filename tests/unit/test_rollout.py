"""The rollout loop without a cluster: a fake Slurm, a fake apply and a fake check are injected. Batch
choice (room, nodes already out, a resumed rollout's drained nodes), the failure budget, and resume
after a crash (nothing done twice)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from checks.verdict import Verdict
from kiln.inventory import load_cluster
from kiln.inventory.model import Secrets
from kiln.patch import journal as journals
from kiln.patch import rollout as rollout_module
from kiln.patch.plan import SlurmNode, next_batch
from kiln.patch.rollout import Options, Rollout
from tests.conftest import INVENTORIES

COMPUTE = ["n1", "n2", "n3", "n4"]


def nodes(**states) -> dict[str, SlurmNode]:
    """n1..n4 IDLE unless given, e.g. nodes(n2="DOWN*", n3=("IDLE+DRAIN", "kiln: patch x"))."""
    out = {}
    for n in COMPUTE:
        state = states.get(n, "IDLE")
        state, reason = state if isinstance(state, tuple) else (state, "")
        out[n] = SlurmNode(n, state, reason)
    return out


@pytest.mark.parametrize("slurm, held, size, limit, expected", [
    (nodes(), set(), 1, 1, ["n1"]),                                      # room for one
    (nodes(), set(), 2, 2, ["n1", "n2"]),                                # two may leave
    (nodes(n4="DOWN*"), set(), 1, 1, []),                                # n4 is out already: no room left
    (nodes(n2=("IDLE+DRAIN", "kiln: GPU_XID_FATAL")), set(), 2, 1, ["n2"]),  # out already: takes no room
    (nodes(n1=("IDLE+DRAIN", "kiln: patch r1")), {"n1"}, 1, 1, ["n1"]),  # resumed: its own drained node first
    (nodes(n1=("IDLE+DRAIN", "kiln: patch r1"), n4="DOWN*"), {"n1"}, 2, 1, ["n1"]),  # held needs no room
    (nodes(), set(), 3, 4, ["n1", "n2", "n3"]),                          # never more than the batch size
])
def test_next_batch(slurm, held, size, limit, expected):
    assert next_batch(["n1", "n2", "n3"], slurm, COMPUTE, limit, size, held) == expected


class FakeSlurm:
    def __init__(self, names: list[str]):
        self.state = {n: ["IDLE", ""] for n in names}
        self.calls: list[tuple] = []
        self.reservations: dict[str, list[str]] = {}
        self.running = {}
        self.requeued = {}
        self.on_signal = lambda job: None
        self.not_asking: set[str] = set()  # jobs whose comment does not ask for the signal

    def nodes(self) -> dict[str, SlurmNode]:
        return {n: SlurmNode(n, s, r, "1") for n, (s, r) in self.state.items()}

    def drain(self, names, reason):
        self.calls.append(("drain", tuple(names)))
        for n in names:
            self.state[n] = ["IDLE+DRAIN", reason]

    def set_reason(self, name, reason):
        self.state[name][1] = reason

    def resume(self, names):
        self.calls.append(("resume", tuple(names)))
        for n in names:
            self.state[n] = ["IDLE", ""]

    def reboot(self, names, reason):
        raise AssertionError("no reboot was asked for")

    def jobs(self, names):
        return {n: [j for j, (node, _) in self.running.items() if node == n] for n in names}

    # maintenance reservations and jobs (kiln/patch/maintenance.py)
    running: dict  # job id -> (node, Job)

    def reserve(self, name, nodes, lead_seconds, minutes):
        self.calls.append(("reserve", name, tuple(nodes), lead_seconds))
        self.reservations[name] = list(nodes)

    def reservation(self, name):
        return {"ReservationName": name} if name in self.reservations else None

    def delete_reservation(self, name):
        self.calls.append(("delete_reservation", name))
        self.reservations.pop(name, None)

    def job_details(self, ids):
        from dataclasses import replace
        pending = {j: replace(job, state="PENDING", restarts=job.restarts + 1) for j, job in self.requeued.items()}
        return {j: job for j, job in {**pending, **{j: job for j, (_, job) in self.running.items()}}.items()
                if j in ids}

    def start_now(self, job):
        self.calls.append(("start_now", job))

    def opted_in(self, ids):
        return set(ids) - self.not_asking

    def signal(self, job, signal):
        self.calls.append(("signal", job, signal))
        self.on_signal(job)

    def requeue(self, job):
        self.calls.append(("requeue", job))
        node, details = self.running.pop(job)
        self.requeued[job] = details


class RunningSlurm:
    """The controller as a rollout of the slurm role asks it: the Slurm it runs is the pinned one."""
    name = "ctl"

    @staticmethod
    def run(command):
        from checks.node import Result
        return Result(0, "slurm 22.05.8\n" if command == "scontrol version" else "")


class Recorder:
    def __init__(self, failing: set[str] = frozenset(), crash_after: int | None = None):
        self.applied: list[str] = []
        self.failing, self.crash_after = failing, crash_after

    def apply(self, cluster, secrets, names, role_names):
        if self.crash_after is not None and len(self.applied) >= self.crash_after:
            raise KeyboardInterrupt("the operator's machine died")
        self.applied += names
        return [SimpleNamespace(name=n, status="failed" if n in self.failing else "changed", changed=["x"],
                                failed_op="slurm: packages" if n in self.failing else None, error="E: broken",
                                reboot_required=False) for n in names]

    def check(self, cluster, names):
        return {n: [Verdict("SLURM_NODE", "ok", "in service")] for n in names}


@pytest.fixture
def cluster():
    return load_cluster(INVENTORIES / "small")


def make(cluster, tmp_path, recorder, slurm, records=None, **options):
    journal = journals.Journal(tmp_path / "rollout.jsonl", records)
    opts = Options(roles=["slurm"], reboot="never", **options)
    checker = SimpleNamespace(close=lambda: None, node=lambda host: RunningSlurm())
    return Rollout(cluster, Secrets(b"k" * 32, "p"), journal, opts, progress=lambda line: None, slurm=slurm,
                   checker=checker, apply=recorder.apply, check=recorder.check), journal


@pytest.fixture(autouse=True)
def fast(monkeypatch):
    monkeypatch.setattr(rollout_module, "POLL", 0.01)
    monkeypatch.setattr(rollout_module, "SETTLE_WAIT", 0.0)


def compute_of(cluster) -> list[str]:
    return [h.name for h in cluster.compute]


def test_every_node_is_patched_batch_by_batch_and_resumed(cluster, tmp_path):
    slurm, recorder = FakeSlurm([*compute_of(cluster)]), Recorder()
    rollout, _ = make(cluster, tmp_path, recorder, slurm)
    outcome = rollout.run(rollout.start(compute_of(cluster)))
    assert outcome.stopped is None
    assert {n: r["result"] for n, r in outcome.results.items()} == {n: "patched" for n in compute_of(cluster)}
    assert [c for c in slurm.calls if c[0] == "drain"] == [("drain", (n,)) for n in compute_of(cluster)]
    assert all(s == "IDLE" for s, _ in slurm.state.values())


def test_a_batch_is_drained_and_resumed_with_one_scontrol_call_each(cluster, tmp_path):
    names = compute_of(cluster)
    slurm, recorder = FakeSlurm(names), Recorder()
    rollout, _ = make(cluster, tmp_path, recorder, slurm, max_unavailable="2", canary=0)
    outcome = rollout.run(rollout.start(names))
    assert outcome.stopped is None and len(names) >= 2
    drains = [c[1] for c in slurm.calls if c[0] == "drain"]
    resumes = [c[1] for c in slurm.calls if c[0] == "resume"]
    assert drains == resumes and len(drains[0]) == 2 and sum(map(len, resumes)) == len(names)


def test_the_failure_budget_stops_the_rollout_and_the_failed_node_stays_drained(cluster, tmp_path):
    names = compute_of(cluster)
    slurm, recorder = FakeSlurm(names), Recorder(failing={names[1]})
    rollout, journal = make(cluster, tmp_path, recorder, slurm, failure_budget=1)
    outcome = rollout.run(rollout.start(names))
    assert outcome.failed == [names[1]] and "failure budget spent" in outcome.stopped
    assert slurm.state[names[1]] == ["IDLE+DRAIN", "kiln: PATCH_FAILED slurm: packages"]
    assert recorder.applied == names[:2]  # nothing after the budget was spent
    assert journal.records[-1]["event"] == "end" and journal.records[-1]["result"] == "stopped"


def test_a_resumed_rollout_does_nothing_twice(cluster, tmp_path):
    names = compute_of(cluster)
    slurm, crashing = FakeSlurm(names), Recorder(crash_after=1)
    rollout, journal = make(cluster, tmp_path, crashing, slurm)
    plan = rollout.start(names)
    with pytest.raises(KeyboardInterrupt):
        rollout.run(plan)  # dies while applying the second batch: that node is drained, not patched
    journal.close()
    drained_before = [c for c in slurm.calls if c[0] == "drain"]
    assert drained_before == [("drain", (names[0],)), ("drain", (names[1],))]
    again = Recorder()
    rollout, journal = make(cluster, tmp_path, again, slurm, records=journals.read(tmp_path / "rollout.jsonl"))
    from kiln.patch.plan import Plan
    outcome = rollout.run(Plan.from_dict(journal.start["plan"]))
    assert outcome.stopped is None and set(outcome.results) == set(names)
    assert again.applied == names[1:]  # the first node's apply was done: not again
    assert [c for c in slurm.calls if c[0] == "drain"][2:] == [("drain", (n,)) for n in names[2:]]  # names[1] kept
    assert all(r["result"] == "patched" for r in outcome.results.values())


def test_no_room_stops_the_rollout_with_the_nodes_out_of_service_named(cluster, tmp_path):
    names = compute_of(cluster)
    slurm, recorder = FakeSlurm(names), Recorder()
    rollout, _ = make(cluster, tmp_path, recorder, slurm)
    plan = rollout.start(names[:-1])
    slurm.state[names[-1]] = ["IDLE+DRAIN", "disk replaced by a person"]  # not in the rollout: takes the one slot
    monkey_room = rollout_module.ROOM_WAIT
    rollout_module.ROOM_WAIT = 0.05
    try:
        outcome = rollout.run(plan)
    finally:
        rollout_module.ROOM_WAIT = monkey_room
    assert "allows no more to leave" in outcome.stopped and names[-1] in outcome.stopped
    assert recorder.applied == []


class LostController(FakeSlurm):
    """The controller stops answering after ``after`` calls of ``nodes`` (it lost power)."""

    def __init__(self, names, after: int):
        super().__init__(names)
        self.after, self.asked, self.lost = after, 0, False

    def nodes(self):
        self.asked += 1
        if self.lost or self.asked > self.after:
            self.lost = True
            from kiln.patch.slurmctl import SlurmError
            raise SlurmError("'scontrol show node -o' on ctl exited 255: ssh: connect to host ctl port 22: No route to host")
        return super().nodes()


@pytest.mark.parametrize("cancel_refused, cancel_undrains", [(False, False), (True, False), (False, True)],
                         ids=["cancel_reboot", "cancel_refused_then_down", "cancel_reboot_undrains"])
def test_a_lost_controller_pauses_the_rollout_and_resume_finishes_it_once_back(cluster, tmp_path, cancel_refused,
                                                                             cancel_undrains, monkeypatch):
    from kiln.patch.plan import Plan
    from kiln.patch.slurmctl import SlurmError
    names = compute_of(cluster)
    slurm, recorder = LostController(names, after=12), Recorder()
    rollout, journal = make(cluster, tmp_path, recorder, slurm)
    outcome = rollout.run(rollout.start(names))
    journal.close()
    assert outcome.paused and "controller does not answer" in outcome.stopped and "--resume" in outcome.stopped
    records = journals.read(tmp_path / "rollout.jsonl")
    assert records[-1]["event"] == "paused" and not any(r["event"] == "end" for r in records)
    assert journals.unfinished(tmp_path) == tmp_path / "rollout.jsonl"   # what kiln patch --resume continues
    slurm.lost, slurm.after = False, 10**6                               # the controller is back
    first = next(r["node"] for r in records if r["event"] == "node" and r["result"] == "patched")  # ... with
    # the state saved before kiln resumed it
    slurm.state[first] = ["DOWN+DRAIN+REBOOT_ISSUED", f"kiln: patch {journal.start['rollout']}"]
    def cancel_reboot(name):
        slurm.calls.append(("cancel_reboot", name))
        if cancel_refused:  # what Slurm 22.05 says once the reboot was issued
            raise SlurmError(f"'scontrol cancel_reboot {name}' on ctl exited 1: Invalid node state specified")
        if cancel_undrains:  # Slurm puts it back itself: a resume now would be refused
            slurm.state[name] = ["IDLE", ""]
    slurm.cancel_reboot = cancel_reboot
    resume = slurm.resume
    def strict_resume(names):
        if any("DRAIN" not in slurm.state[n][0] and "DOWN" not in slurm.state[n][0] for n in names):
            raise SlurmError(f"'scontrol update nodename={names} state=resume' exited 1: Invalid node state specified")
        resume(names)
    slurm.resume = strict_resume
    monkeypatch.setattr(rollout_module, "RESUME_RETRY_S", 0)
    slurm.set_down = lambda name, reason: slurm.calls.append(("set_down", name))
    again = Recorder()
    rollout, journal = make(cluster, tmp_path, again, slurm, records=records)
    outcome = rollout.run(Plan.from_dict(journal.start["plan"]))
    assert outcome.stopped is None and all(r["result"] == "patched" for r in outcome.results.values())
    assert not set(recorder.applied) & set(again.applied)                # nothing applied twice
    assert sorted(recorder.applied + again.applied) == sorted(names)
    assert ("cancel_reboot", first) in slurm.calls and slurm.state[first] == ["IDLE", ""]
    assert (("set_down", first) in slurm.calls) == cancel_refused
    if cancel_refused:
        down = slurm.calls.index(("set_down", first))
        assert slurm.calls[down + 1] == ("resume", (first,))


class FakeSilences:
    """Alertmanager's silences as the rollout uses them, writing into the fake Slurm's call log (so the
    order of silence, drain, resume and expiry is one list); ``down`` plays an Alertmanager that does
    not answer."""

    def __init__(self, calls: list, down: bool = False):
        self.calls, self.down, self.enabled, self.made = calls, down, True, 0

    def make(self, nodes, starts, ends, comment):
        from kiln.monitoring.alerts import MonitoringError
        if self.down:
            raise MonitoringError("http://mon01:9093/api/v2/silences did not answer (timed out)")
        self.made += 1
        self.calls.append(("silence", tuple(nodes), comment.split(":")[0], round(ends - starts)))
        return [f"s{self.made}a", f"s{self.made}b"]

    def expire(self, ids, after=0):
        self.calls.append(("expire", tuple(ids)))
        return list(ids)


def make_silenced(cluster, tmp_path, recorder, slurm, silences, records=None, **options):
    rollout, journal = make(cluster, tmp_path, recorder, slurm, records, **options)
    rollout.silences = silences
    return rollout, journal


def test_each_batch_is_silenced_before_its_drain_and_the_silence_ends_when_it_is_back(cluster, tmp_path):
    names = compute_of(cluster)
    slurm, recorder = FakeSlurm(names), Recorder()
    silences = FakeSilences(slurm.calls)
    rollout, journal = make_silenced(cluster, tmp_path, recorder, slurm, silences, window=3600)
    outcome = rollout.run(rollout.start(names))
    assert outcome.stopped is None
    for i, n in enumerate(names):
        at = slurm.calls.index(("silence", (n,), f"kiln patch {rollout.rollout_id} batch {i + 1}", 3600))
        assert slurm.calls[at + 1] == ("drain", (n,))
        assert slurm.calls.index(("resume", (n,))) < slurm.calls.index(("expire", (f"s{i + 1}a", f"s{i + 1}b")))
    made = [r for r in journal.records if r["event"] == "silence" and r["phase"] == "made"]
    assert [r["ids"] for r in made] == [[f"s{i}a", f"s{i}b"] for i in range(1, len(names) + 1)]


def test_a_resumed_rollout_ends_the_silence_it_left_and_silences_the_batch_anew(cluster, tmp_path):
    from kiln.patch.plan import Plan
    names = compute_of(cluster)
    slurm, crashing = FakeSlurm(names), Recorder(crash_after=1)
    rollout, journal = make_silenced(cluster, tmp_path, crashing, slurm, FakeSilences(slurm.calls))
    with pytest.raises(KeyboardInterrupt):
        rollout.run(rollout.start(names))  # dies in the second batch, its silence left
    journal.close()
    assert ("expire", ("s2a", "s2b")) not in slurm.calls
    rollout, journal = make_silenced(cluster, tmp_path, Recorder(), slurm, FakeSilences(slurm.calls),
                                     records=journals.read(tmp_path / "rollout.jsonl"))
    rollout.run(Plan.from_dict(journal.start["plan"]))
    resumed = slurm.calls[slurm.calls.index(("expire", ("s2a", "s2b"))):]
    assert resumed[1][:2] == ("silence", (names[1],))  # the interrupted batch, silenced again
    assert ("expire", ("s1a", "s1b")) in slurm.calls and resumed.count(("expire", ("s2a", "s2b"))) == 1


def test_an_alertmanager_that_does_not_answer_stops_no_rollout(cluster, tmp_path):
    names = compute_of(cluster)
    slurm, recorder = FakeSlurm(names), Recorder()
    said = []
    rollout, journal = make_silenced(cluster, tmp_path, recorder, slurm, FakeSilences(slurm.calls, down=True))
    rollout.progress = said.append
    outcome = rollout.run(rollout.start(names))
    assert outcome.stopped is None and set(outcome.results) == set(names)
    assert any("no silence made" in line and "will fire" in line for line in said)
    assert [r["phase"] for r in journal.records if r["event"] == "silence"] == ["failed"] * len(names)


def test_with_the_workload_check_a_batch_node_slower_than_the_cluster_stays_drained(cluster, tmp_path):
    """kiln patch --workload-check: each batch's checks include the workload suite (judged against the
    cluster's medians); a node that fails it is kept drained with its reason, as for any failed check."""
    names = compute_of(cluster)
    asked = []

    class WorkloadRecorder(Recorder):
        def check(self, cluster, names, workload=False):
            asked.append((tuple(names), workload))
            slow = [Verdict("WORKLOAD_STEP", "fail", "step 95.0 ms, 4.4x the median")]
            return {n: slow if n == names[0] and n == compute_of(cluster)[1] else
                    [Verdict("WORKLOAD_STEP", "ok", "step 21.0 ms")] for n in names}
    slurm, recorder = FakeSlurm(names), WorkloadRecorder()
    rollout, _ = make(cluster, tmp_path, recorder, slurm, workload_check=True, failure_budget=1)
    outcome = rollout.run(rollout.start(names))
    assert asked and all(workload for _, workload in asked)
    assert outcome.failed == [names[1]] and "failure budget spent" in outcome.stopped
    assert slurm.state[names[1]] == ["IDLE+DRAIN", "kiln: WORKLOAD_STEP step 95.0 ms, 4.4x the median"]


def test_a_probe_that_gets_through_after_a_batch_stops_the_rollout_there_and_says_what_got_through(cluster, tmp_path):
    """The isolation suite runs on the login hosts after each batch (kiln/check/isolation_gate.py): held, the
    next batch goes; failed, the rollout stops with the probe's words, journalled, and no further node is
    drained. A cluster without probe accounts runs nothing (the real gate on the small inventory)."""
    names = compute_of(cluster)
    slurm, recorder = FakeSlurm(names), Recorder()
    rollout, journal = make(cluster, tmp_path, recorder, slurm)
    asked = []

    def gate(cluster, hosts):
        asked.append(list(hosts))
        held = len(asked) < 2
        return {"login1": [Verdict("ISOLATION_SECRETS", "ok" if held else "fail",
                                   "kiln-probe-vision reads none of kiln's secrets" if held else
                                   "kiln-probe-vision can read /etc/munge/munge.key", "isolation")]}
    rollout.isolation = gate
    outcome = rollout.run(rollout.start(names))
    assert asked == [[h.name for h in cluster.user_logins]] * 2
    assert "the isolation suite failed after batch 2: login1 ISOLATION_SECRETS: kiln-probe-vision can read " \
           "/etc/munge/munge.key" in outcome.stopped
    assert recorder.applied == names[:2] and [c[1] for c in slurm.calls if c[0] == "drain"] == [(n,) for n in names[:2]]
    gates = [r for r in journal.records if r["event"] == "isolation"]
    assert [(r["after"], r["failed"]) for r in gates] == [("batch 1", {}), ("batch 2", {"login1": ["ISOLATION_SECRETS"]})]
    assert journal.records[-1]["result"] == "stopped"
    from kiln.check.isolation_gate import gate_hosts
    assert gate_hosts(cluster, list(cluster.hosts)) == []  # no probe account in the small inventory: nothing to run
