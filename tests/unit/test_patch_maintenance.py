"""Maintenance in a rollout without a cluster (kiln/patch/maintenance.py): the reservation made before
a batch is drained and removed after it is back; jobs on drained nodes signalled, given their grace,
requeued when Slurm may requeue them and waited for otherwise; a rollout killed mid-signal and resumed
signals and requeues no job twice. Slurm is the fake of tests/unit/test_rollout.py."""

from __future__ import annotations

import threading

import pytest

from kiln.patch import journal as journals
from kiln.patch import maintenance
from kiln.patch.maintenance import job_paths, parse_signal
from kiln.patch.plan import Plan
from kiln.patch.report import html, summary_text
from kiln.patch.slurmctl import Job, SlurmError, parse_jobs
from tests.slurm_framing import SEP, frame
from tests.unit.test_rollout import FakeSlurm, Recorder, cluster, compute_of, make  # noqa: F401 (fixture)


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(maintenance, "POLL", 0.01)


@pytest.mark.parametrize("given, read", [("USR1", "USR1"), ("SIGUSR1", "USR1"), ("usr2", "USR2"), ("10", "USR1"),
                                         ("15", "TERM"), (" term ", "TERM")])
def test_signals_are_read_by_name_or_number(given, read):
    assert parse_signal(given) == read


@pytest.mark.parametrize("given", ["KILL", "9", "SIGSTOP", "USR1;reboot", "USR1 USR2", "", "99", "१०"])
def test_a_signal_that_is_no_checkpoint_request_is_refused(given):
    with pytest.raises(ValueError, match="--notify"):
        parse_signal(given)


def test_squeue_job_records_are_read_and_a_record_of_any_other_shape_refused():
    jobs = parse_jobs(frame("41|RUNNING|1|0|1\n43|RUNNING|0|2|1\n", 5), SEP)  # 43: an array task's own id
    assert jobs == {"41": Job("41", "RUNNING", True, True, 0), "43": Job("43", "RUNNING", False, True, 2)}
    for bad in ("41|RUNNING|1|0\n", "41|RUNNING|yes|0|1\n", "41|RUN$NING|1|0|1\n", "42_3|RUNNING|0|2|1\n"):
        with pytest.raises(SlurmError, match="cannot read"):
            parse_jobs(frame(bad, bad.count("|") + 1), SEP)


def test_each_batch_is_reserved_before_its_drain_and_released_after_its_resume(cluster, tmp_path):
    names = compute_of(cluster)
    slurm = FakeSlurm(names)
    rollout, journal = make(cluster, tmp_path, Recorder(), slurm, lead=0.2)
    outcome = rollout.run(rollout.start(names))
    assert outcome.stopped is None
    for i, n in enumerate(names):
        name = f"kiln_patch_{rollout.rollout_id}_{i + 1}"
        order = [c[0] for c in slurm.calls if (c[0] in ("drain", "resume") and c[1] == (n,)) or name in c]
        assert order == ["reserve", "drain", "resume", "delete_reservation"], (n, order)
        assert ("reserve", name, (n,), 0) in slurm.calls  # the lead was waited out before the drain
    assert slurm.reservations == {}
    made = [r for r in journal.records if r["event"] == "reservation" and r["phase"] == "begin"]
    assert len(made) == len(names) and all(r["lead"] == 0 for r in made)  # int(0.2): lead in whole seconds


def _jobs(slurm, first, second, third):
    """Three jobs on the first node: a checkpointing one that keeps running after its signal (Slurm may
    requeue it), one that may not be requeued (it ends 0.3 s after its signal), one that ends at once."""
    slurm.running = {"101": (first, Job("101", "RUNNING", True, True, 0)),
                     "102": (first, Job("102", "RUNNING", False, True, 0)),
                     "103": (first, Job("103", "RUNNING", True, True, 0))}

    def on_signal(job):
        if job == "102":
            threading.Timer(0.3, lambda: slurm.running.pop("102", None)).start()
        if job == "103":
            slurm.running.pop("103")
    slurm.on_signal = on_signal


def test_jobs_are_signalled_given_their_grace_then_requeued_or_waited_for(cluster, tmp_path):
    names = compute_of(cluster)
    slurm = FakeSlurm(names)
    _jobs(slurm, names[0], None, None)
    rollout, journal = make(cluster, tmp_path, Recorder(), slurm, notify="USR1", grace=0.1, requeue=True)
    outcome = rollout.run(rollout.start(names))
    assert outcome.stopped is None and all(r["result"] == "patched" for r in outcome.results.values())
    assert [c for c in slurm.calls if c[0] in ("signal", "requeue", "start_now")] == [
        ("signal", "101", "USR1"), ("signal", "102", "USR1"), ("signal", "103", "USR1"), ("requeue", "101"),
        ("start_now", "101")]  # eligible at once, not after Slurm's two-minute wait for a requeued job
    paths = job_paths(journal.records)
    assert paths["101"] == {"nodes": [names[0]], "path": ["signalled USR1", "requeued"]}
    assert paths["102"]["path"] == ["signalled USR1", "waited for (not requeueable)"]
    assert paths["103"]["path"] == ["signalled USR1", "left its node within the grace"]
    text = summary_text({"result": "completed", "stopped": None, "nodes": outcome.results, "counts": {},
                         "batches": [], "jobs": paths, "journal": "j", "report": "r"})
    assert f"job 101 ({names[0]}): signalled USR1, then requeued" in text
    page = html(journal.records, "small")
    assert "<td>101</td>" in page and "signalled USR1, then waited for (not requeueable)" in page


def test_a_job_that_did_not_ask_is_never_signalled_nor_requeued_only_waited_for(cluster, tmp_path):
    """--notify tells only the jobs whose comment asks for it (kiln:checkpoint): a job that traps nothing
    would die of the signal."""
    names = compute_of(cluster)
    slurm = FakeSlurm(names)
    slurm.running = {"201": (names[0], Job("201", "RUNNING", True, True, 0)),
                     "202": (names[0], Job("202", "RUNNING", True, True, 0))}
    slurm.not_asking = {"202"}
    threading.Timer(0.5, lambda: slurm.running.pop("202", None)).start()  # it ends on its own
    rollout, journal = make(cluster, tmp_path, Recorder(), slurm, notify="USR1", grace=0.1, requeue=True)
    outcome = rollout.run(rollout.start(names))
    assert outcome.stopped is None
    assert [c for c in slurm.calls if c[0] in ("signal", "requeue")] == [("signal", "201", "USR1"), ("requeue", "201")]
    paths = job_paths(journal.records)
    assert paths["202"]["path"] == ["waited for (did not ask to be signalled)"]
    assert paths["201"]["path"] == ["signalled USR1", "requeued"]


def test_the_opt_in_is_a_word_of_the_jobs_comment():
    from kiln.patch.slurmctl import SlurmControl
    from checks.node import Result
    from tests.slurm_framing import frame

    class Controller:
        name = "ctl1"

        def run(self, command: str) -> Result:
            import re
            sep = re.search(r"JobID:(\|k[0-9a-f]{16}\|)", command).group(1)
            return Result(0, frame("1|kiln:checkpoint\n2|run 7, kiln:checkpoint\n3|not-kiln:checkpointed\n"
                                   "4|\n5|kiln:checkpoint\n6|forged\n", 2, sep), "")
    assert SlurmControl(Controller()).opted_in(["1", "2", "3", "4", "5", "6"]) == {"1", "2", "5"}


def test_without_requeue_a_signalled_job_is_waited_for_and_never_requeued(cluster, tmp_path):
    names = compute_of(cluster)
    slurm = FakeSlurm(names)
    slurm.running = {"7": (names[0], Job("7", "RUNNING", True, True, 0))}
    slurm.on_signal = lambda job: threading.Timer(0.3, lambda: slurm.running.pop(job, None)).start()
    rollout, journal = make(cluster, tmp_path, Recorder(), slurm, notify="TERM", grace=0.05)
    rollout.run(rollout.start(names))
    assert [c[0] for c in slurm.calls if c[0] in ("signal", "requeue")] == ["signal"]
    assert job_paths(journal.records)["7"]["path"] == ["signalled TERM", "waited for (no --requeue)"]


@pytest.mark.parametrize("requeue_happened", [False, True])
def test_a_rollout_killed_mid_signal_and_resumed_signals_and_requeues_no_job_twice(cluster, tmp_path,
                                                                                  requeue_happened):
    """The rollout dies right after journalling the requeue's begin (before or after Slurm took it:
    Slurm's restart count tells which); resumed, it sends no signal again and requeues only if the
    first requeue never reached Slurm."""
    names = compute_of(cluster)
    slurm = FakeSlurm(names)
    slurm.running = {"101": (names[0], Job("101", "RUNNING", True, True, 0))}
    real_requeue = slurm.requeue

    def dies(job):
        if requeue_happened:
            real_requeue(job)
        raise KeyboardInterrupt("the operator's machine died")
    slurm.requeue = dies
    rollout, journal = make(cluster, tmp_path, Recorder(), slurm, notify="USR1", grace=0.05, requeue=True)
    plan = rollout.start(names)
    with pytest.raises(KeyboardInterrupt):
        rollout.run(plan)
    journal.close()
    # requeue_happened: Slurm took it (the job pends, to start again); else it still runs on its node
    slurm.requeue = real_requeue
    rollout, journal = make(cluster, tmp_path, Recorder(), slurm, notify="USR1", grace=0.05, requeue=True,
                            records=journals.read(tmp_path / "rollout.jsonl"))
    outcome = rollout.run(Plan.from_dict(journal.start["plan"]))
    assert outcome.stopped is None
    assert [c for c in slurm.calls if c[0] == "signal"] == [("signal", "101", "USR1")]  # once, across both runs
    assert [c for c in slurm.calls if c[0] == "requeue"] == [("requeue", "101")]  # one reached Slurm, in either run
    assert job_paths(journal.records)["101"]["path"] == ["signalled USR1", "requeued"]
    assert slurm.reservations == {}


def test_the_dry_run_shows_each_batchs_maintenance_window_and_what_happens_to_jobs():
    from kiln.patch.report import plan_text
    from kiln.patch.rollout import Options
    plan = Plan([], [["n1"], ["n2", "n3"]], total_compute=3, max_unavailable=2)
    text = plan_text(plan, Options(roles=["nvidia_driver"], lead=3600, window=7200, notify="USR1", grace=300,
                                   requeue=True))
    lines = text.splitlines()
    assert lines[2].startswith("    maintenance reservation from ") and lines[2].endswith(
        ", for 2h (jobs that end before it may start there)"), text
    assert lines[4] == "    maintenance reservation 1h after batch 1 is back, for 2h (jobs that end before it may start there)"
    assert lines[-1] == "  jobs on drained nodes: SIGUSR1, 5m to checkpoint, then requeued if Slurm may requeue them, " \
                        "else waited for"


def test_a_released_reservation_that_a_controller_brings_back_is_deleted_again_on_resume(cluster, tmp_path):
    """The controller loses power after batch 1's reservation was released and comes back with state saved
    before it: the reservation would hold batch 1's nodes in maintenance for the rest of its window."""
    names = compute_of(cluster)
    slurm = FakeSlurm(names)
    rollout, journal = make(cluster, tmp_path, Recorder(crash_after=1), slurm)
    plan = rollout.start(names)
    with pytest.raises(KeyboardInterrupt):
        rollout.run(plan)
    journal.close()
    first = f"kiln_patch_{rollout.rollout_id}_1"
    assert first not in slurm.reservations
    slurm.reservations[first] = [names[0]]  # back with the controller's older state
    rollout, journal = make(cluster, tmp_path, Recorder(), slurm, records=journals.read(tmp_path / "rollout.jsonl"))
    outcome = rollout.run(Plan.from_dict(journal.start["plan"]))
    assert outcome.stopped is None and slurm.reservations == {}
    assert any(r["event"] == "reasserted" and r.get("reservation") == first for r in journal.records)


def test_a_job_ending_as_its_signal_goes_out_is_no_error(cluster, tmp_path):
    """scancel refuses to signal a job that is completing: the rollout goes on (it waits for the job to
    leave, as for any job) instead of stopping as if the controller were lost."""
    names = compute_of(cluster)
    slurm = FakeSlurm(names)
    slurm.running = {"9": (names[0], Job("9", "COMPLETING", True, True, 0))}

    def refuses(job, signal):
        slurm.calls.append(("signal", job, signal))
        threading.Timer(0.2, lambda: slurm.running.pop(job, None)).start()
        raise SlurmError("scancel: error: Kill job error on job id 9: Job/step already completing or completed")
    slurm.signal = refuses
    rollout, journal = make(cluster, tmp_path, Recorder(), slurm, notify="USR1", grace=0.05, requeue=True)
    outcome = rollout.run(rollout.start(names))
    assert outcome.stopped is None and all(r["result"] == "patched" for r in outcome.results.values())
    assert [c[0] for c in slurm.calls if c[0] in ("signal", "requeue")] == ["signal"]
