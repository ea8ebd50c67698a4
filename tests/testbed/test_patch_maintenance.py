"""Maintenance that long jobs survive, on the shared testbed: `kiln patch --reserve-ahead --notify USR1
--grace --requeue` on one node running three jobs, the rollout killed with SIGKILL during the grace and
continued with --resume.

- kiln's example checkpointing job (docs/examples/checkpointing-job.sh, which asks for the signal with
  ``--comment=kiln:checkpoint``) is signalled, checkpoints to the shared directory, is requeued by kiln
  after the grace, and finishes on another node from its checkpoint while its first node is patched and
  rebooted: sacct has the run REQUEUED, then COMPLETED; its step counter continues.
- a job that traps nothing and did not ask for the signal (submitted --no-requeue) is never signalled (the
  signal would kill it), is waited for and completes;
- a short job is started on the reserved node before the reservation begins and finishes before it,
  while a job too long for the window pends there;
- no job ends FAILED, CANCELLED or NODE_FAIL, and no job is signalled or requeued twice across the
  killed and the resumed rollout.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest

from kiln.hostlist import expand
from kiln.testbed.inventory import TESTBED_VERSIONS
from tests.conftest import REPO
from tests.testbed.slurm_helpers import kiln, ok, on, submit, wait_for
from tests.testbed.test_patch import (boot_times, drained, inventory_with_driver, inventory_with_pins, journal,
                                      journal_so_far, rebooted)

pytestmark = pytest.mark.testbed
LEAD = 70   # the reservation begins this long after it is made: a one-minute job fits before it
GRACE = 10
STEPS = LEAD + GRACE + 25  # seconds of work: the checkpointing job outlives the drain


def _state(tb, job: str) -> str:
    return ok(tb, tb.controller, f"squeue -h -j {job} -o %T").strip()


def _runs(tb, job: str) -> list[str]:
    """Each run of ``job`` in sacct, oldest first: 'STATE node'."""
    out = ok(tb, tb.controller, f"sacct -n -X -P -D -j {job} -o State,NodeList")
    return [line.replace("|", " ") for line in out.splitlines() if line.strip()]


def test_a_checkpointing_job_is_requeued_and_continues_elsewhere_while_its_node_is_patched(slurm, tmp_path):
    tb = slurm
    run_id = uuid.uuid4().hex[:8]
    shared = tb.shared / f"maintenance-{run_id}"
    shared.mkdir()
    shutil.copy(REPO / "docs" / "examples" / "checkpointing-job.sh", shared / "job.sh")
    where = f"/srv/kiln-shared/maintenance-{run_id}"
    env = f"--export=ALL,CHECKPOINT_DIR={where},STEPS={STEPS},STEP_SECONDS=1,REQUEUE_AFTER=600"
    long_job = submit(tb, tb.controller, f"--requeue -o {where}/long-%j.out {env} {where}/job.sh")
    wait_for(lambda: _state(tb, long_job) == "RUNNING", timeout=60, what="the checkpointing job running")
    node = ok(tb, tb.controller, f"squeue -h -j {long_job} -o %N").strip()
    # the non-requeueable job on a second node of the same batch (a testbed node has as many CPUs as this
    # machine, two in CI: each node keeps one free for the short job)
    other = next(n for n in tb.computes if n != node)
    keeps = submit(tb, tb.controller, f"--no-requeue -w {other} -o {where}/keeps-%j.out --wrap "
                   f"\"for i in \\$(seq {LEAD + GRACE + 30}); do sleep 1; done; echo finished\"")
    wait_for(lambda: _state(tb, keeps) == "RUNNING", timeout=60, what="the non-requeueable job running")
    time.sleep(5)  # the checkpointing job has some steps done
    booted = boot_times(tb)
    inventory = inventory_with_driver(tb, tmp_path, TESTBED_VERSIONS["nvidia_driver"])
    rollout = subprocess.Popen([sys.executable, "-m", "kiln", "patch", "-i", str(inventory), "--roles",
                                "nvidia_driver", "--limit", f"{node},{other}", "--max-unavailable", "2",
                                "--canary", "0", "--reboot", "always", "--reserve-ahead", f"{LEAD}s",
                                "--window", "30m", "--notify", "USR1", "--grace", f"{GRACE}s", "--requeue"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: any(r["event"] == "reservation" and r["phase"] == "done" for r in journal_so_far(inventory)),
                 timeout=60, interval=0.5, what="the batch's reservation made")
        shown = ok(tb, tb.controller, "scontrol show reservation -o")
        assert sorted(expand(shown.split("Nodes=")[1].split()[0])) == sorted([node, other]), shown
        assert "MAINT" in shown and "IGNORE_JOBS" in shown, shown
        # a one-minute job still starts on the reserved node (it ends before the window); a longer one pends
        short = submit(tb, tb.controller, f"-w {node} -t 1 -o /dev/null --wrap 'sleep 20'")
        too_long = submit(tb, tb.controller, f"-w {node} -t 30 -o /dev/null --wrap 'sleep 1'")
        wait_for(lambda: _state(tb, short) == "RUNNING", timeout=30, what="the short job started before the window")
        assert _state(tb, too_long) == "PENDING"

        # killed during the grace, after the signals went out
        def signalled() -> bool:
            return any(r["event"] == "job" and r.get("action") == "signal" and r["phase"] == "done"
                       for r in journal_so_far(inventory))
        wait_for(signalled, timeout=LEAD + 60, interval=0.2, what="the checkpointing job signalled")
        rollout.send_signal(signal.SIGKILL)
        rollout.wait()
        assert ok(tb, tb.controller, f"sacct -n -X -P -j {short} -o State").strip() == "COMPLETED"  # before the window
        resumed = kiln("patch", "-i", str(inventory), "--resume", "--json", timeout=900)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        summary = json.loads(resumed.stdout)
        print(resumed.stderr[-3000:])
        assert summary["nodes"][node]["result"] == summary["nodes"][other]["result"] == "patched"
        assert summary["jobs"][long_job]["path"] == ["signalled USR1", "requeued"], summary["jobs"]
        assert summary["jobs"][keeps]["path"] == ["waited for (did not ask to be signalled)"], summary["jobs"]
        after = boot_times(tb)
        assert rebooted(booted, after, node) and rebooted(booted, after, other)  # patched and rebooted
        records = journal(inventory)
        sent = [(r["job"], r["action"]) for r in records if r["event"] == "job" and r["phase"] == "begin"]
        assert sorted(sent) == sorted([(long_job, "signal"), (long_job, "requeue")]), sent  # never the other job

        for job in (long_job, keeps, too_long):
            wait_for(lambda j=job: ok(tb, tb.controller, f"sacct -n -X -P -j {j} -o State").strip() == "COMPLETED",
                     timeout=240, interval=2, what=f"job {job} completed")
        runs = _runs(tb, long_job)
        assert [r.split()[0] for r in runs] == ["REQUEUED", "COMPLETED"], runs
        assert runs[1].split()[1] not in (node, other), runs  # finished on another node while its own was patched
        out = (shared / f"long-{long_job}.out").read_text()
        print(out)
        assert out.count("signal: checkpointed at step") == 1, out  # one signal across both rollouts
        saved = int(out.split("checkpointed at step ")[1].split(";")[0])
        assert saved > 0 and f"continuing from step {saved}" in out and f"done: {STEPS} steps" in out, out
        kept = (shared / f"keeps-{keeps}.out").read_text()
        assert "finished" in kept, kept  # never signalled: USR1 untrapped would have killed it
        # every run of every job (sacct -D: the requeued run too; -X: the job, not its steps, whose batch step
        # Slurm ends as CANCELLED when it requeues the run) ended REQUEUED or COMPLETED
        states = ok(tb, tb.controller, f"sacct -n -X -P -D -j {long_job},{keeps},{short},{too_long} -o JobID,State")
        assert {line.split("|")[1] for line in states.split()} == {"REQUEUED", "COMPLETED"}, states
        assert ok(tb, tb.controller, "scontrol show reservation -o").strip() in ("", "No reservations in the system")
        assert not drained(tb)
        page = (inventory.parent / ".kiln" / "rollouts").glob("*/*.html")
        assert "signalled USR1, then requeued" in next(page).read_text()
    finally:
        if rollout.poll() is None:
            rollout.kill()
        on(tb, tb.controller, f"scancel {long_job} {keeps}")
        for line in on(tb, tb.controller, "scontrol show reservation -o").stdout.splitlines():
            if line.startswith("ReservationName=kiln_patch_"):
                on(tb, tb.controller, f"scontrol delete reservationname={line.split()[0].split('=')[1]}")
        shutil.rmtree(shared, ignore_errors=True)


def test_a_slurm_pin_past_the_window_is_refused_and_one_within_it_planned_in_schedmds_order(slurm, tmp_path):
    """Against the testbed's real Slurm (Debian 12's 22.05): the running versions are read from Slurm
    itself; 24.11 is refused before anything is touched, 23.02 is planned in SchedMD's order. (Debian 12
    carries one Slurm, so the upgrade itself is not run here: see the Slurm upgrade plan tests.)"""
    far = inventory_with_pins(slurm, tmp_path / "far", slurm="24.11.5-1")
    out = kiln("patch", "-i", str(far), "--roles", "slurm", "--dry-run")
    assert out.returncode == 2, out.stdout + out.stderr
    assert ("Slurm 22.05 -> 24.11 skips 3 major release(s): 24.11 upgrades from 23.02, 23.11, 24.05 only; go through "
            "23.11 first (slurmctld runs 22.05.8)") in out.stderr, out.stderr
    near = inventory_with_pins(slurm, tmp_path / "near", slurm="23.02.7-1")
    out = kiln("patch", "-i", str(near), "--roles", "slurm", "--dry-run")
    assert out.returncode == 3, out.stdout + out.stderr
    steps = [line.strip() for line in out.stdout.splitlines() if line.strip()[:2] in {f"{i}." for i in range(1, 10)}]
    assert steps[0].startswith("1. SlurmdTimeout raised to 3600 s") and "back up" in steps[1], out.stdout
    assert steps[2] == f"3. slurmdbd on {slurm.controller} (and slurmctld)", out.stdout
    assert [s.split(": ")[1] for s in steps[3:-1]] == slurm.computes and steps[-1].endswith("restored to 30 s")
    assert not list((tmp_path / ".kiln").glob("rollouts/*/*.jsonl"))
