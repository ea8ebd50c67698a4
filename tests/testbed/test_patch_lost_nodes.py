"""`kiln patch` when a node dies under it (#21): a compute node that loses power in its batch is a
failure against the budget, the others finish, the rollout does not hang and no job elsewhere dies.
A controller lost mid-rollout pauses it; `--resume` once it is back finishes it, and a job running
on a later batch's node through all of it completes. Runs after test_patch.py
(pytest_collection_modifyitems) and leaves every node on the original driver."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from kiln.testbed.inventory import DRIVER_UPGRADE, TESTBED_VERSIONS
from tests.testbed.conftest import NODES
from tests.testbed.slurm_helpers import kiln, on, submit, wait_for
from tests.testbed.test_patch import accounting, inventory_with_driver, journal, journal_so_far, versions

ORIGINAL = TESTBED_VERSIONS["nvidia_driver"]


def _step(inventory, node: str, step: str) -> bool:
    return any(r["event"] == "step" and r["node"] == node and r["step"] == step for r in journal_so_far(inventory))


def _in_service(tb, node: str) -> bool:
    return on(tb, tb.controller, f"sinfo -h -n {node} -o %T").stdout.strip() in ("idle", "mixed", "allocated")


def _restore(tb, tmp_path) -> None:
    """Every compute node on the original driver and in service, as the other tests expect (the
    simulated GPUs load an installed driver at boot: every rollout here reboots)."""
    tb.up(NODES, inventory_dir=tb.inventory)
    for n in tb.computes:
        on(tb, tb.controller, f"scontrol update nodename={n} state=resume")
    back = inventory_with_driver(tb, tmp_path / "restore", ORIGINAL)
    out = kiln("patch", "-i", str(back), "--roles", "nvidia_driver", "--failure-budget", "4",
               "--reboot", "always")
    assert set(versions(tb).values()) == {ORIGINAL}, out.stdout + out.stderr
    wait_for(lambda: all(_in_service(tb, n) for n in tb.computes), timeout=180, interval=2,
             what="every compute node back in service")


def test_a_compute_node_lost_in_its_batch_fails_against_the_budget_and_the_rest_finish(slurm, tmp_path):
    tb, lost, busy = slurm, slurm.computes[1], slurm.computes[3]
    job = submit(tb, tb.controller, f"-w {busy} -o /dev/null --wrap 'sleep 25'")
    inventory = inventory_with_driver(tb, tmp_path, DRIVER_UPGRADE)
    try:
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "kiln", "patch", "-i", str(inventory), "--roles", "nvidia_driver",
                                 "--failure-budget", "2", "--reboot", "always", "--max-unavailable", "2", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        wait_for(lambda: _step(inventory, lost, "apply") or proc.poll() is not None, timeout=400, interval=0.2,
                 what=f"the rollout applying on {lost}")
        tb.power_loss(lost)
        out, err = proc.communicate(timeout=900)
        seconds = time.monotonic() - started
        print(f"rollout with {lost} lost mid-apply: ended in {seconds:.0f} s, exit {proc.returncode}")
        assert proc.returncode == 1, out + err
        nodes = json.loads(out)["nodes"]
        assert nodes[lost]["result"] == "failed" and "unreachable" in nodes[lost]["detail"], nodes[lost]
        assert all(nodes[n]["result"] == "patched" for n in tb.computes if n != lost), nodes
        assert seconds < 900
        assert accounting(tb)[job] == "COMPLETED"               # the job on another node was not killed
        # back from the power loss: a new rollout patches it
        tb.up(NODES, inventory_dir=tb.inventory)
        again = kiln("patch", "-i", str(inventory), "--roles", "nvidia_driver", "--limit", lost,
                     "--reboot", "always")
        assert again.returncode == 0, again.stdout + again.stderr
        assert versions(tb)[lost] == DRIVER_UPGRADE
    finally:
        _restore(tb, tmp_path)


def test_a_controller_lost_mid_rollout_pauses_it_and_resume_finishes_once_it_is_back(slurm, tmp_path):
    tb, busy = slurm, slurm.computes[-1]  # the last batch: still running its job when the controller goes
    inventory = inventory_with_driver(tb, tmp_path, DRIVER_UPGRADE)
    # long enough to end after slurmctld is back: a batch job that ends while slurmctld is down is Slurm's own
    # case (seen once: the job pending again after the outage), not the rollout's
    job = submit(tb, tb.controller, f"-w {busy} -o /dev/null --wrap 'sleep 120'")
    wait_for(lambda: on(tb, tb.controller, f"squeue -h -j {job} -o %T").stdout.strip() == "RUNNING", timeout=60,
             what=f"job {job} running on {busy}")
    try:
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "kiln", "patch", "-i", str(inventory), "--roles", "nvidia_driver",
                                 "--reboot", "always"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        wait_for(lambda: _step(inventory, tb.computes[1], "drain") or proc.poll() is not None, timeout=400,
                 interval=0.2, what="the rollout at its second batch")
        tb.power_loss(tb.controller)
        out, _ = proc.communicate(timeout=600)
        seconds = time.monotonic() - started
        print(f"rollout with the controller lost: ended in {seconds:.0f} s, exit {proc.returncode}")
        assert proc.returncode == 1 and "controller does not answer" in out and "--resume" in out, out
        records = journal(inventory)
        assert records[-1]["event"] == "paused" and not any(r["event"] == "end" for r in records)
        tb.up(NODES, inventory_dir=tb.inventory)
        wait_for(lambda: on(tb, tb.controller, "scontrol ping").stdout.count("UP") >= 1, timeout=120, interval=2,
                 what="slurmctld back")
        resumed = kiln("patch", "-i", str(inventory), "--resume")
        print(resumed.stdout[-1500:])
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert [r["result"] for r in journal(inventory) if r["event"] == "end"] == ["completed"]
        assert set(versions(tb).values()) == {DRIVER_UPGRADE}
        # ran on through the controller's power loss, once, not killed or requeued
        runs = wait_for(lambda: (r := on(tb, tb.controller, f"sacct -n -X -P -D -j {job} -o State").stdout.split())
                        != ["RUNNING"] and r, timeout=60, interval=2, what=f"job {job}'s end in accounting")
        assert runs == ["COMPLETED"], runs
    finally:
        _restore(tb, tmp_path)
