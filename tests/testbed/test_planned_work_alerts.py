"""Planned work pages nobody (#43), live on the shared testbed with kiln's Prometheus and Alertmanager: a
two-batch ``kiln patch --reboot always`` silences each batch's nodes in Alertmanager from its reservation's
start until the batch is back, so nothing fires for them, while a slurmd stopped during the rollout on a
node outside the work fires within the monitoring test's bound. A testbed batch is over in seconds,
before any alert's ``for:``: so the first batch's node runs a job the drain waits for, and logs an Xid
while it waits (cleared by the batch's reboot, as a transient Xid is): its alert is held back by the
batch's silence. What the silences held back is shown with kiln's silence.
"""

from __future__ import annotations

import calendar
import json
import subprocess
import sys
import threading
import time

import pytest

from kiln.inventory import load_cluster
from kiln.monitoring.alerts import MonitoringError, firing
from kiln.monitoring.silences import Silences, silenced
from kiln.secrets import monitoring_password
from tests.testbed.slurm_helpers import alerts_firing, copy_inventory, job_state, ok, on, submit, wait_for
from tests.testbed.test_monitoring import FIRE_BOUND, RESOLVE_BOUND
from tests.testbed.test_patch import journal_so_far

pytestmark = pytest.mark.testbed


class AlertWatch:
    """Alertmanager every two seconds while the rollout runs: the firing alerts and the held-back ones
    (with the silences holding them), each sample stamped with its time."""

    def __init__(self, tb):
        self.cluster = load_cluster(tb.inventory)
        self.password = monitoring_password(self.cluster)
        self.samples: list[tuple[float, set, list]] = []
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while self.running:
            try:
                now = time.monotonic()
                fired = {(a["labels"]["alertname"], a["labels"].get("node") or a["labels"].get("slurm_node", ""))
                         for a in firing(self.cluster, self.password)}
                held = silenced(self.cluster, self.password)
                self.samples.append((now, fired, held))
            except MonitoringError:
                pass  # the monitoring host is the controller: never rebooted here, but a read may time out
            time.sleep(2)

    def stop(self):
        self.running = False
        self.thread.join()
        return self.samples


@pytest.mark.proves("monitoring", "kiln patch", tier="nspawn")
def test_a_two_batch_rollout_pages_nobody_while_a_node_outside_it_still_alerts(slurm, tmp_path):
    tb = slurm
    work, outside = tb.computes[:2], tb.computes[-1]
    watched = set(work) | {outside}
    wait_for(lambda: not {a for a in alerts_firing(tb) if a[1] in watched}, timeout=180, interval=2,
             what="no alert firing on the nodes of this test before it")
    inventory = copy_inventory(tb.inventory, tmp_path / "inventory")  # its own rollout journal
    # the node outside the work is silenced by no earlier test's work (a rollout's grace, or a silence an
    # Alertmanager that lost power brought back): its alert must be able to fire
    cluster = load_cluster(inventory)
    silences = Silences(cluster, monitoring_password(cluster))
    silences.expire([s.id for s in silences.listed() if s.state == "active" and outside in s.nodes.split("|")])
    job = submit(tb, tb.controller, f"-w {work[0]} -o /dev/null --wrap 'sleep 45'")
    wait_for(lambda: job_state(tb, tb.controller, job) == "RUNNING", timeout=60, what="the job running")
    watch = AlertWatch(tb)
    # two batches of one; room for two out of service: the batch's node and the node whose slurmd stops
    # (Slurm has it down), which the rollout counts as out, as it must
    rollout = subprocess.Popen([sys.executable, "-m", "kiln", "patch", "-i", str(inventory), "--roles", "nvidia_driver",
                                "--limit", ",".join(work), "--canary", "1", "--max-unavailable", "2",
                                "--reboot", "always", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stopped_at = None
    try:
        # once the first batch is silenced and drained: its node logs an Xid (its alert fires at once, but
        # for the silence), and slurmd stops on a node the rollout does not touch
        wait_for(lambda: any(r["event"] == "step" and r.get("step") == "drain" for r in journal_so_far(inventory)),
                 timeout=120, interval=1, what="the first batch drained")
        tb.inject(work[0], "xid-79", 0)
        ok(tb, outside, "systemctl stop slurmd")
        stopped_at = time.monotonic()
        out, err = rollout.communicate(timeout=900)
        assert rollout.returncode == 0, out + err
        wait_for(lambda: any(s[0] > stopped_at and ("KilnSlurmdDown", outside) in s[1] for s in watch.samples),
                 timeout=FIRE_BOUND["KilnSlurmdDown"], interval=1, what=f"KilnSlurmdDown firing for {outside}")
    finally:
        samples = watch.stop()
        if rollout.poll() is None:
            rollout.kill()
        on(tb, outside, "systemctl start slurmd")
        on(tb, work[0], "kiln-sim clear")  # (the batch's reboot has cleared it, unless the test stopped first)
    fired = min(s[0] for s in samples if ("KilnSlurmdDown", outside) in s[1]) - stopped_at
    print(f"KilnSlurmdDown for {outside} (outside the work) fired {fired:.0f} s after its slurmd stopped")
    assert fired <= FIRE_BOUND["KilnSlurmdDown"]
    # nothing fired for the nodes under planned work, at any sample of the rollout
    paged = sorted({a for _, f, _ in samples for a in f if a[1] in work})
    assert not paged, f"alerts fired for nodes under planned work: {paged}"
    # what the silences held back is shown with kiln's silence: each batch's node, by its batch's silence
    records = journal_so_far(inventory)
    rollout_id = records[0]["rollout"]
    # (an earlier test's rollout may still hold a node in its grace: an alert can be held by two silences)
    held = {(a["labels"].get("node") or a["labels"].get("slurm_node"), a["labels"]["alertname"], tuple(a["silences"]))
            for _, _, h in samples for a in h}
    assert ("KilnGPUFatalXid" in {name for n, name, _ in held if n == work[0]}), \
        f"the first batch's Xid alert was not held back: {sorted(held)}"
    for i, node in enumerate(work):
        mine = {(name, by) for n, name, by in held if n == node}
        assert all(any(s.startswith(f"kiln patch: kiln patch {rollout_id} batch {i + 1}: ") for s in by)
                   for _, by in mine), mine
    print("held back by kiln's silences: " + "; ".join(sorted({f"{n} {name}" for n, name, _ in held})))
    made = [r for r in records if r["event"] == "silence" and r["phase"] == "made"]
    expired = [r for r in records if r["event"] == "silence" and r["phase"] == "expired"]
    assert [r["work"] for r in made] == [r["work"] for r in expired] == ["batch 1", "batch 2"], made + expired
    # the work is over: its silences end within the grace (for the alerts it caused to resolve)
    grace = Silences.grace(cluster)
    active = [s for s in Silences(cluster, monitoring_password(cluster)).listed()
              if s.state == "active" and rollout_id in s.comment]
    late = [s for s in active if calendar.timegm(time.strptime(s.ends_at[:19], "%Y-%m-%dT%H:%M:%S")) > time.time() + grace]
    assert not late, late
    wait_for(lambda: ("KilnSlurmdDown", outside) not in alerts_firing(tb), timeout=RESOLVE_BOUND + 60, interval=2,
             what=f"KilnSlurmdDown resolved for {outside}")
    wait_for(lambda: on(tb, tb.controller, f"sinfo -h -n {outside} -o %T").stdout.strip() in ("idle", "mixed"),
             timeout=180, interval=2, what=f"{outside} back in service")
    assert json.loads(out)["nodes"][work[0]]["result"] == "patched"
