"""`kiln patch` on the shared testbed (1 controller + 4 compute): a real driver upgrade from Debian
(535.261.03-1 -> 535.309.01-0+deb12u1 from bookworm-security) rolled out while jobs run, reboots through
Slurm's RebootProgram, a node that fails its post-patch check, a rollout killed with SIGKILL and
resumed, and a node drained by a person. The GPUs are the simulators (they load the installed driver
at boot, as a real node does); jobs, Slurm, packages and reboots are real.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from kiln.testbed.inventory import DRIVER_UPGRADE, TESTBED_VERSIONS
from tests.testbed.slurm_helpers import copy_inventory, kiln, ok, on, submit, wait_for

pytestmark = pytest.mark.testbed
ORIGINAL = TESTBED_VERSIONS["nvidia_driver"]
IN_SERVICE = {"idle", "mix", "alloc", "comp"}


def inventory_with_pins(tb, tmp_path: Path, **pins: str) -> Path:
    """A copy of the testbed inventory with these kiln_versions pins changed."""
    inventory = copy_inventory(tb.inventory, tmp_path / "inventory")
    path = inventory / "group_vars" / "all" / "versions.yml"
    data = yaml.safe_load(path.read_text())
    data["kiln_versions"].update(pins)
    path.write_text(yaml.safe_dump(data))
    return inventory


def inventory_with_driver(tb, tmp_path: Path, pin: str) -> Path:
    return inventory_with_pins(tb, tmp_path, nvidia_driver=pin)


def journal(inventory: Path) -> list[dict]:
    (path,) = sorted((inventory.parent / ".kiln" / "rollouts").glob("*/*.jsonl"))
    return [json.loads(line) for line in path.read_text().splitlines()]


def journal_so_far(inventory: Path) -> list[dict]:
    """The rollout's journal so far ([] before it is written)."""
    return journal(inventory) if list((inventory.parent / ".kiln" / "rollouts").glob("*/*.jsonl")) else []


def assert_no_step_twice(records: list[dict]) -> None:
    steps = Counter((r["node"], r["step"], r["phase"]) for r in records if r["event"] == "step")
    twice = {k: n for k, n in steps.items() if n > 1 and k[2] in ("begin", "done")}
    assert not twice, twice


def versions(tb) -> dict[str, str]:
    return {n: ok(tb, n, "dpkg-query -W -f='${Version}' nvidia-smi") for n in tb.computes}


REBOOTED = 5  # seconds a boot time must move to be a reboot


def boot_times(tb) -> dict[str, float | None]:
    """Each node's boot time in Slurm (epoch seconds; None while it has none: rebooting)."""
    out = ok(tb, tb.controller, "scontrol show node -o")
    times = {line.split()[0].split("=")[1]: next(w for w in line.split() if w.startswith("BootTime="))[9:]
             for line in out.splitlines()}
    return {n: None if t in ("None", "") else datetime.strptime(t, "%Y-%m-%dT%H:%M:%S").timestamp()
            for n, t in times.items()}


def rebooted(before: dict, after: dict, node: str) -> bool:
    """slurmd derives BootTime from the uptime at each registration, so it moves by a second now and then
    without a reboot (a reconfigure makes every slurmd register again): a reboot moves it by more."""
    return after[node] is None or before[node] is None or abs(after[node] - before[node]) > REBOOTED


def drained(tb) -> dict[str, str]:
    out = ok(tb, tb.controller, "sinfo -h -R -N -o '%N|%E'")
    return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)


class Sampler:
    """sinfo every half second while a rollout runs: the fewest compute nodes seen in service."""

    def __init__(self, tb):
        self.tb, self.counts, self.running = tb, [], True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while self.running:
            out = on(self.tb, self.tb.controller, "sinfo -h -N -o '%N %t'")
            states = dict(line.split() for line in out.stdout.splitlines() if len(line.split()) == 2)
            self.counts.append(sum(1 for n in self.tb.computes if states.get(n) in IN_SERVICE))
            time.sleep(0.5)

    def stop(self) -> list[int]:
        self.running = False
        self.thread.join()
        return self.counts


def accounting(tb) -> dict[str, str]:
    out = ok(tb, tb.controller, "sacct -n -X -P -a -S 2020-01-01 -o JobID,State")
    return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)


def test_dry_run_prints_the_batches_and_changes_nothing(slurm, tmp_path):
    inventory = inventory_with_driver(slurm, tmp_path, DRIVER_UPGRADE)
    before = boot_times(slurm)
    out = kiln("patch", "-i", str(inventory), "--roles", "nvidia_driver", "--dry-run")
    assert out.returncode == 3, out.stdout + out.stderr  # nodes would be patched
    c = slurm.computes
    assert f"canary 1: {c[0]}" in out.stdout and f"batch 2: {c[1]}" in out.stdout and f"batch 4: {c[3]}" in out.stdout
    now = boot_times(slurm)
    assert set(versions(slurm).values()) == {ORIGINAL} and not any(rebooted(before, now, n) for n in before)
    assert not drained(slurm)
    assert not list((inventory.parent / ".kiln").glob("rollouts/*/*.jsonl"))
    out = kiln("patch", "-i", str(inventory), "--roles", "nvidia_driver", "--dry-run", "--json")
    assert out.returncode == 3 and json.loads(out.stdout)["compute_batches"][0] == [c[0]], out.stdout  # JSON alone


def rollout_under_jobs(tb, tmp_path: Path, upgrade: str, job_nodes: list[str], seconds: int = 12) -> dict:
    """A rolling driver upgrade to ``upgrade`` while a job runs on each of ``job_nodes``, shown to
    kill none: every compute node patched, never more than one out of service (sampled by this test),
    every job COMPLETED, each node rebooted through Slurm and resumed only after its checks passed, no
    step done twice, the accounting of earlier jobs intact. Returns kiln patch's JSON summary."""
    history = accounting(tb)
    jobs = [submit(tb, tb.controller, f"-w {n} -o /dev/null --wrap 'sleep {seconds}'") for n in job_nodes]
    wait_for(lambda: all(ok(tb, tb.controller, f"squeue -h -j {j} -o %T").strip() == "RUNNING" for j in jobs),
             timeout=60, what="the jobs running")
    booted = boot_times(tb)
    inventory = inventory_with_driver(tb, tmp_path, upgrade)
    sampler = Sampler(tb)
    out = kiln("patch", "-i", str(inventory), "--roles", "nvidia_driver", "--max-unavailable", "1",
               "--reboot", "always", "--json")
    counts = sampler.stop()
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads(out.stdout)
    print(out.stderr)
    assert {n: r["result"] for n, r in summary["nodes"].items()} == {n: "patched" for n in tb.computes}
    assert set(versions(tb).values()) == {upgrade}
    # never fewer than N - 1 compute nodes in service, in samples taken by this test
    assert counts and min(counts) >= len(tb.computes) - 1, counts
    # every job ran to its end: none killed or requeued
    for job in jobs:
        wait_for(lambda: ok(tb, tb.controller, f"sacct -n -X -P -j {job} -o State").strip() not in
                 ("RUNNING", "PENDING", ""), timeout=60, what=f"job {job} finished")
        assert ok(tb, tb.controller, f"sacct -n -P -j {job} -o State,ExitCode").split()[0] == "COMPLETED|0:0"
    # each node rebooted through Slurm, and resumed only after its checks passed
    after = boot_times(tb)
    assert all(rebooted(booted, after, n) for n in tb.computes)
    records = journal(inventory)
    assert_no_step_twice(records)
    for node in tb.computes:
        order = [r["step"] for r in records if r["event"] == "step" and r.get("node") == node and r["phase"] == "done"]
        assert order == ["drain", "jobs_done", "apply", "reboot", "check", "resume"], (node, order)
        check = next(r for r in records if r["event"] == "step" and r.get("node") == node and r["step"] == "check"
                     and r["phase"] == "done")
        assert check["failed"] == []
    assert not drained(tb)
    # the accounting history of jobs before the rollout is intact
    now = accounting(tb)
    assert all(now.get(job) == state for job, state in history.items()), (history, now)
    return summary


@pytest.mark.proves("kiln patch", tier="nspawn")
def test_rollout_upgrades_every_node_while_jobs_run_and_none_is_killed(slurm, tmp_path):
    summary = rollout_under_jobs(slurm, tmp_path, DRIVER_UPGRADE, slurm.computes[:3])
    page = Path(summary["report"]).read_text()
    assert "<svg" in page and "fewest seen" in page


def test_a_node_failing_its_post_patch_check_stays_drained_and_the_rollout_stops(slurm, tmp_path):
    canary = slurm.computes[0]
    ok(slurm, canary, "kiln-sim inject gpu-lost --at-boot")
    others = boot_times(slurm)
    inventory = inventory_with_driver(slurm, tmp_path, DRIVER_UPGRADE)
    try:
        out = kiln("patch", "-i", str(inventory), "--roles", "nvidia_driver", "--reboot", "always",
                   "--failure-budget", "1")
        assert out.returncode == 1, out.stdout + out.stderr
        assert "failure budget spent" in out.stdout and f"{canary}  failed" in out.stdout, out.stdout
        reason = drained(slurm).get(canary, "")
        assert reason.startswith("kiln: GPU_"), reason
        after = boot_times(slurm)
        assert not any(rebooted(others, after, n) for n in slurm.computes[1:])  # the rollout stopped at the canary
        assert list(drained(slurm)) == [canary]
    finally:
        on(slurm, canary, "kiln-sim clear; kiln-node-check >/dev/null")
        wait_for(lambda: canary not in drained(slurm), timeout=60, what=f"{canary} resumed by its health check")


def test_a_killed_rollout_resumes_without_doing_a_step_twice_and_keeps_a_persons_drain(slurm, tmp_path):
    person = slurm.computes[-1]
    ok(slurm, slurm.controller, f"scontrol update nodename={person} state=drain reason='disk replacement'")
    inventory = inventory_with_driver(slurm, tmp_path, ORIGINAL)  # back to the original driver
    rollouts = inventory.parent / ".kiln" / "rollouts"
    try:
        proc = subprocess.Popen([sys.executable, "-m", "kiln", "patch", "-i", str(inventory), "--roles",
                                 "nvidia_driver", "--reboot", "always", "--max-unavailable", "2", "--canary", "1"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        def second_batch_rebooting() -> bool:
            paths = list(rollouts.glob("*/*.jsonl"))
            records = [json.loads(line) for line in paths[0].read_text().splitlines()] if paths else []
            return any(r["event"] == "step" and r["step"] == "reboot" and r["node"] == slurm.computes[1]
                       for r in records)
        wait_for(second_batch_rebooting, timeout=300, interval=0.1, what="the second batch rebooting")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert any(r["event"] == "step" for r in journal(inventory)) and not any(
            r["event"] == "end" for r in journal(inventory))
        resumed = kiln("patch", "-i", str(inventory), "--resume")
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        records = journal(inventory)
        assert_no_step_twice(records)
        assert [r["result"] for r in records if r["event"] == "end"] == ["completed"]
        assert drained(slurm) == {person: "disk replacement"}  # kiln left nothing drained; the person's kept
        assert {n: v for n, v in versions(slurm).items() if n != person} == \
            {n: ORIGINAL for n in slurm.computes if n != person}
        skipped = next(r for r in records if r["event"] == "node" and r["node"] == person)
        assert skipped["result"] == "skipped" and "disk replacement" in skipped["detail"]
    finally:
        # the person's work is done: back into service, and onto the cluster's driver the way an operator
        # would do it (the simulated GPU loads the downgraded driver only at its reboot)
        ok(slurm, slurm.controller, f"scontrol update nodename={person} state=resume")
        again = inventory_with_driver(slurm, tmp_path / "back", ORIGINAL)
        back = kiln("patch", "-i", str(again), "--roles", "nvidia_driver", "--limit", person, "--reboot", "always")
        assert back.returncode == 0, back.stdout + back.stderr
        assert versions(slurm)[person] == ORIGINAL and not drained(slurm), back.stdout


def test_a_node_whose_jobs_outlast_the_drain_timeout_goes_back_into_service_unpatched(slurm, tmp_path):
    node = slurm.computes[0]
    job = submit(slurm, slurm.controller, f"-w {node} -o /dev/null --wrap 'sleep 300'")
    try:
        wait_for(lambda: ok(slurm, slurm.controller, f"squeue -h -j {job} -o %T").strip() == "RUNNING",
                 timeout=60, what="the long job running")
        inventory = inventory_with_driver(slurm, tmp_path, ORIGINAL)
        out = kiln("patch", "-i", str(inventory), "--roles", "nvidia_driver", "--drain-timeout", "3s", "--json")
        assert out.returncode == 1, out.stdout + out.stderr
        nodes = json.loads(out.stdout)["nodes"]
        assert nodes[node]["result"] == "not patched" and f"jobs {job} still running" in nodes[node]["detail"]
        assert all(nodes[n]["result"] == "patched" for n in slurm.computes[1:])
        assert ok(slurm, slurm.controller, f"squeue -h -j {job} -o %T").strip() == "RUNNING"  # never killed
        assert not drained(slurm)
    finally:
        on(slurm, slurm.controller, f"scancel {job}")
