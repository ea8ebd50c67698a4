"""kiln-remediate live on the shared testbed (#32): the service on the controller repairs what the
checks or Slurm took out of service, with measured times, and leaves alone what is not its to touch.

The shared inventory has remediation off (tests/testbed/conftest.py); this module deploys the remediation
role with it on (a look every 5 s) and turns it off again at its end. Faults come from ``kiln testbed
inject``: transient ones are cleared by the repair that clears them on real hardware (a reboot), a
``--persistent`` one survives it.
"""

from __future__ import annotations

import json
import time
from datetime import datetime

import pytest

from kiln.testbed.bmc import USER
from kiln.testbed.ipmi_service import port_of
from tests.testbed.slurm_helpers import alerts_firing, copy_inventory, job_state, kiln, ok, on, submit, wait_for

JOURNAL = "/var/lib/kiln/remediation/journal.jsonl"
SILENCE_EVENTS = ("silenced", "unsilenced", "silence_failed")
REBOOTED = 5  # seconds a boot time must move to be a reboot


def _deploy(inventory) -> None:
    out = kiln("deploy", "-i", str(inventory), "--roles", "remediation")
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.fixture(scope="module")
def fleet(slurm, tmp_path_factory):
    tb = slurm
    on_inventory = copy_inventory(tb.inventory, tmp_path_factory.mktemp("remediation") / "testbed",
                                  # each node is repaired several times in this module: the repeat-offender
                                  # rule (unit-tested) would escalate the later faults of every node
                                  changes={"kiln_remediation": {"enabled": True, "interval_seconds": 5,
                                                                     "settle_seconds": 8,
                                                                     "repeat_offender_faults": 10}},
                                  # the compute nodes' BMCs over IPMI here (the testbed's IPMI endpoint, as
                                  # for a BMC without Redfish); the VM tier powers its VMs on over Redfish
                                  host_changes={n: {"kiln_bmc": _ipmi_bmc(tb, n)} for n in tb.computes})
    _deploy(on_inventory)
    tb.remediation_inventory = on_inventory
    yield tb
    _deploy(tb.inventory)  # off again: the service stopped, the key gone from the compute nodes
    for node in tb.computes:
        on(tb, node, "kiln-sim clear")
        on(tb, tb.controller, f"scontrol update nodename={node} state=resume")
    assert "inactive" in on(tb, tb.controller, "systemctl is-active kiln-remediate").stdout
    assert "kiln-remediation@" not in on(tb, tb.computes[0], "cat /root/.ssh/authorized_keys").stdout


def _ipmi_bmc(tb, node: str) -> dict:
    names = [n.name for n in tb.recorded_nodes()]
    return {"protocol": "ipmi", "host": tb.host_address, "port": port_of(names.index(node) + 1), "user": USER,
            "cipher_suite": 3}  # pyghmi's server offers suite 3 only


def _journal(tb, node: str | None = None, silences: bool = False) -> list[dict]:
    """kiln-remediate's journal (of ``node``); its Alertmanager silences only with ``silences``."""
    events = [json.loads(line) for line in ok(tb, tb.controller, f"cat {JOURNAL} 2>/dev/null || true").splitlines()]
    return [e for e in events if (node is None or e.get("node") == node)
            and (silences or e["event"] not in SILENCE_EVENTS)]


def _returned(tb, node: str) -> list[dict]:
    """The node's journal once kiln-remediate has seen it back in service (its next look)."""
    return wait_for(lambda: (lambda ev: ev if ev and ev[-1]["event"] == "returned" else None)(_journal(tb, node)),
                    timeout=30, interval=1, what=f"kiln-remediate seeing {node} back in service")


def _episode(tb, node: str) -> list[dict]:
    """The node's last fault episode, once kiln-remediate has seen it back in service (holds left out)."""
    events = _returned(tb, node)
    last = max(i for i, e in enumerate(events) if e["event"] == "fault")
    return [e for e in events[last:] if e["event"] != "held"]


def _state(tb, node: str) -> tuple[str, str]:
    out = on(tb, tb.controller, f"sinfo -h -N -n {node} -o '%T|%E'").stdout.strip()
    state, _, reason = out.partition("|")
    return state, reason


def _boot(tb, node: str) -> float | None:
    """The node's boot time in Slurm (epoch seconds); None while Slurm has none (``BootTime=None``: the
    node is rebooting and has not registered again)."""
    out = on(tb, tb.controller, f"scontrol show node {node} | grep -o 'BootTime=[^ ]*'").stdout.strip()
    value = out.split("=", 1)[1] if "=" in out else "None"
    return None if value == "None" else datetime.strptime(value, "%Y-%m-%dT%H:%M:%S").timestamp()


def _rebooted(tb, node: str, before: float | None) -> bool:
    """slurmd derives BootTime from the uptime at each registration: it moves by a second now and then
    without a reboot. A node with no boot time yet has not come back."""
    now = _boot(tb, node)
    return now is not None and before is not None and abs(now - before) > REBOOTED


def _reboots_asked(tb, node: str) -> int:
    out = on(tb, tb.controller, f"grep -c 'reboot request queued for nodes {node}$' /var/log/slurm/slurmctld.log")
    return int(out.stdout.strip() or 0)


def _in_service(tb, node: str) -> bool:
    return _state(tb, node)[0] in ("idle", "mixed", "allocated")


def _settled(tb, node: str) -> bool:
    """In service, and kiln-remediate has closed whatever episode it had open for the node (a test that
    breaks the node before that would have its fault read as the old episode's)."""
    if not _in_service(tb, node):
        return False
    events = [e for e in _journal(tb, node) if e["event"] != "held"]
    return not events or events[-1]["event"] in ("returned", "released")


def _wait_settled(tb, *nodes: str) -> None:
    for n in nodes:
        wait_for(lambda n=n: _settled(tb, n), timeout=120, interval=2, what=f"{n} in service and settled")


def _break(tb, node: str, fault: str, gpu: int = 0, persistent: bool = False) -> None:
    """Inject, then run the node's checks at once (instead of waiting up to 10 s for its HealthCheckProgram)."""
    tb.inject(node, fault, gpu, persistent=persistent)
    on(tb, node, "kiln-node-check >/dev/null")


def test_at_once_a_stopped_slurmd_is_restarted_a_persistent_fault_escalated_and_a_persons_node_untouched(fleet):
    """Three nodes at once (two failing of four: under the breaker's share): each gets its own treatment."""
    tb, node, stuck, theirs = fleet, fleet.computes[0], fleet.computes[2], fleet.computes[3]
    _wait_settled(tb, node, stuck, theirs)
    boot = _boot(tb, theirs)
    ok(tb, tb.controller, f"scontrol update nodename={theirs} state=drain reason='RMA ticket 4411 by ops'")
    _break(tb, theirs, "xid-79")
    t0 = time.monotonic()
    ok(tb, node, "kiln-sim inject slurmd-stopped")
    _break(tb, stuck, "xid-79", 1, persistent=True)
    try:
        wait_for(lambda: _state(tb, node)[1] == "Not responding", timeout=120, interval=2,
                 what=f"{node} not responding")
        down = time.monotonic() - t0
        wait_for(lambda: _in_service(tb, node), timeout=120, interval=2, what=f"{node} back in service")
        back = time.monotonic() - t0
        events = _returned(tb, node)
        assert [e["step"] for e in events if e["event"] == "step"] == ["restart:slurmd"], events
        assert [e["result"] for e in events if e["event"] == "result"] == ["ok"], events
        print(f"slurmd stopped: Slurm had {node} down after {down:.0f} s, kiln-remediate had it back "
              f"{back - down:.0f} s later (restart:slurmd, checks passed; {back:.0f} s in all)")
        # the persistent fault: one reboot, still failing after it, escalated, never back in service meanwhile
        reason = wait_for(lambda: (lambda r: r if r.startswith("kiln: escalated") else None)(_state(tb, stuck)[1]),
                          timeout=300, interval=2, what=f"{stuck} escalated")
        seconds = time.monotonic() - t0
        assert "GPU_XID_79" in reason and "needs a person" in reason, reason
        events = _journal(tb, stuck)
        assert [e["step"] for e in events if e["event"] == "step"] == ["reboot"], events
        assert [e["result"] for e in events if e["event"] == "result"] == ["failed"], events
        assert [e for e in events if e["event"] == "escalated"][0]["why"].endswith("(tried: reboot)"), events
        assert not [e for e in events if e["event"] == "returned"], events
        time.sleep(10)  # the node's own checks and kiln-remediate leave it as it is: a person's now
        assert _state(tb, stuck)[1] == reason
        print(f"persistent Xid 79: rebooted once, still failing, escalated {seconds:.0f} s after the fault: {reason}")
        # and all along the node a person drained kept its reason, its boot and its fault
        assert _state(tb, theirs)[1] == "RMA ticket 4411 by ops" and not _rebooted(tb, theirs, boot)
        events = _journal(tb, theirs)
        assert not [e for e in events if e["event"] in ("step", "escalated")], events
        assert [e["why"] for e in events if e["event"] == "held"] == ["drained by a person"], events
    finally:
        for n in (stuck, theirs):  # the person's part
            on(tb, n, "kiln-sim clear")
            on(tb, tb.controller, f"scontrol update nodename={n} state=resume")
    for n in (stuck, theirs):
        wait_for(lambda n=n: _in_service(tb, n), timeout=60, what=f"{n} back")


def test_a_stopped_slurmd_beside_an_xid_79_is_rebooted_for_the_xid_and_returned_not_escalated(fleet):
    """Two faults at once: slurmd stops, then the kernel logs an Xid 79 (transient). Slurm sees only "Not
    responding"; kiln-remediate reads the node's checks too, takes the most severe fault's ladder (Xid 79:
    a reboot, slurmd restarted first so Slurm can reboot the node), journals both faults, and the node
    comes back: no restart loop on slurmd, no escalation."""
    tb, node = fleet, fleet.computes[2]
    _wait_settled(tb, node)
    boot = _boot(tb, node)
    t0 = time.monotonic()
    ok(tb, node, "kiln-sim inject slurmd-stopped")
    tb.inject(node, "xid-79", 0)
    wait_for(lambda: _rebooted(tb, node, boot) and _in_service(tb, node), timeout=300, interval=2,
             what=f"{node} rebooted and back in service")
    back = time.monotonic() - t0
    episode = _episode(tb, node)
    fault = episode[0]
    assert fault["check"] == "GPU_XID_79" and set(fault["faults"]) >= {"SLURM_NOT_RESPONDING", "GPU_XID_79"}, fault
    assert [e["step"] for e in episode if e["event"] == "step"] == ["reboot"], episode
    assert [e["result"] for e in episode if e["event"] == "result"] == ["ok"], episode
    assert not [e for e in episode if e["event"] == "escalated"], episode
    print(f"slurmd stopped and Xid 79 at once: faults {fault['faults']}, rebooted for GPU_XID_79 and back in "
          f"service {back:.0f} s after the faults")


@pytest.mark.proves("remediation", tier="nspawn")
def test_a_transient_gpu_fault_is_drained_rebooted_and_resumed(fleet):
    tb, node = fleet, fleet.computes[1]
    _wait_settled(tb, node)
    boot = _boot(tb, node)
    t0 = time.monotonic()
    tb.inject(node, "xid-79", 0)  # found by the node's own HealthCheckProgram (every 10 s here)
    wait_for(lambda: _state(tb, node)[1].startswith("kiln:"), timeout=60, interval=1, what=f"{node} drained")
    drained = time.monotonic() - t0
    # the reboot is planned work: from kiln-remediate's silence until the node returns, nothing of it pages
    samples = []

    def back_in_service() -> bool:
        silenced_now = any(e["event"] == "silenced" for e in _journal(tb, node, silences=True))
        if silenced_now:
            samples.append(({a for a in alerts_firing(tb) if a[1] == node},
                            json.loads(kiln("alerts", "-i", str(tb.inventory), "--json").stdout)["silenced"]))
        return _rebooted(tb, node, boot) and _in_service(tb, node)
    wait_for(back_in_service, timeout=240, interval=2, what=f"{node} rebooted and back in service")
    back = time.monotonic() - t0
    events = [e for e in _returned(tb, node) if e["event"] != "held"]  # held: settling
    assert [e["event"] for e in events] == ["fault", "step", "result", "returned"], events
    assert events[0]["check"] == "GPU_XID_79" and events[1]["step"] == "reboot" and events[2]["result"] == "ok"
    print(f"transient Xid 79: drained after {drained:.0f} s, rebooted and back in service {back - drained:.0f} s "
          f"later ({back:.0f} s from the fault)")
    made = [e for e in _journal(tb, node, silences=True) if e["event"] in SILENCE_EVENTS]
    assert [e["event"] for e in made][-2:] == ["silenced", "unsilenced"] and made[-1]["ids"] == made[-2]["ids"], made
    assert samples and not set().union(*(f for f, _ in samples)), f"alerts fired during the repair: {samples}"
    held = [h for _, folded in samples for h in folded if node in h["hosts"]]
    assert held and all(s.startswith(f"kiln-remediate: kiln-remediate {node}: reboot for GPU_XID_79")
                        for h in held for s in h["silences"]), held
    print("held back during the repair: " + ", ".join(sorted({h["alert"] for h in held})))


def test_uncorrected_ecc_errors_are_cleared_by_a_gpu_reset_without_a_reboot(fleet):
    """The reset as NVIDIA documents it. What kiln-node-repair ran before (``nvidia-smi -r`` with the GPU
    clients running: DCGM's hostengine, dcgm-exporter, the fabric manager) is refused on the node, as the
    driver refuses it; kiln-node-repair now stops them, resets and starts them again."""
    tb, node = fleet, fleet.computes[1]
    _wait_settled(tb, node)
    plain = on(tb, node, "nvidia-smi -r")  # the old reset, by hand
    assert plain.returncode != 0 and "because it's being used by some other process" in plain.stdout, plain
    boot = _boot(tb, node)
    t0 = time.monotonic()
    _break(tb, node, "ecc-uncorrected", 2)
    wait_for(lambda: _in_service(tb, node) and [e for e in _journal(tb, node) if e["event"] == "step"
                                                 and e["step"] == "reset"],
             timeout=90, interval=1, what=f"{node} reset and back in service")
    seconds = time.monotonic() - t0
    episode = _episode(tb, node)
    assert [e["event"] for e in episode] == ["fault", "step", "result", "resumed", "returned"], episode
    assert episode[1]["step"] == "reset" and episode[2]["result"] == "ok" and episode[2]["after"] == []
    assert any("GPU_ECC_UNCORRECTED" in b for b in episode[2]["before"]), episode[2]
    assert not _rebooted(tb, node, boot)  # no reboot
    print(f"uncorrected ECC: GPUs reset and the node back in service {seconds:.0f} s after the fault, no reboot")


def test_a_double_bit_ecc_xid_is_repaired_by_a_gpu_reset_without_a_reboot(fleet):
    """Xid 48 asks for a GPU reset: kiln-node-repair resets the GPUs and records when, and the Xid check
    leaves out the driver's lines from before it, so the node is back in seconds instead of failing the
    Xid check for its 2 h window and climbing to a reboot. On the node a person had drained in the first
    test."""
    tb, node = fleet, fleet.computes[3]
    _wait_settled(tb, node)
    boot = _boot(tb, node)
    t0 = time.monotonic()
    _break(tb, node, "xid-48", 1)

    def episode():
        events = _journal(tb, node)
        last = max((i for i, e in enumerate(events) if e["event"] == "fault"), default=None)
        if last is None or events[last]["check"] != "GPU_XID_48":
            return None
        ep = [e for e in events[last:] if e["event"] != "held"]
        return ep if ep[-1]["event"] == "returned" else None
    try:
        ep = wait_for(episode, timeout=90, interval=1, what=f"{node} reset for Xid 48 and back in service")
    except AssertionError as e:
        raise AssertionError(f"{e}\nSlurm: {_state(tb, node)}\njournal: {_journal(tb, node)[-8:]}\nchecks now: "
                             f"{on(tb, node, 'kiln-node-check --mode prolog --no-drain --json').stdout[-3000:]}") from e
    seconds = time.monotonic() - t0
    assert [e["event"] for e in ep] == ["fault", "step", "result", "resumed", "returned"], ep
    assert ep[1]["step"] == "reset" and ep[2]["result"] == "ok" and ep[2]["after"] == [], ep
    assert any(b.startswith("GPU_XID_48") for b in ep[2]["before"]), ep[2]
    assert not _rebooted(tb, node, boot)
    report = json.loads(ok(tb, node, "kiln-node-check --mode prolog --no-drain --json"))
    (xid,) = [v for v in report["verdicts"] if v["id"] == "GPU_XID"]
    assert xid["severity"] == "ok" and "from before the last GPU reset not counted" in xid["message"], xid
    print(f"Xid 48: GPUs reset and the node back in service {seconds:.0f} s after the fault, no reboot "
          f"({xid['message']})")


def test_a_node_slurm_drains_for_fewer_gpus_than_configured_climbs_its_ladder_and_returns(fleet):
    """slurmd registers one GPU fewer than slurm.conf gives the node (the testbed's stand-in for a GPU
    AutoDetect no longer finds): Slurm drains it itself ("gres/gpu count reported lower than configured").
    That is Slurm's own reason, not a person's: kiln-remediate climbs SLURM_GRES_LOW's ladder (slurmd
    restarted, which registers the same count again: Slurm still refuses it; then a reboot, which brings
    the GPU back) and returns the node."""
    tb, node = fleet, fleet.computes[3]
    _wait_settled(tb, node)
    boot = _boot(tb, node)
    t0 = time.monotonic()
    tb.inject(node, "gres-low", 0)
    reason = wait_for(lambda: (lambda r: r if r.startswith("gres/gpu count reported lower") else None)(_state(tb, node)[1]),
                      timeout=60, interval=1, what=f"Slurm draining {node} for its GPU count")
    wait_for(lambda: _rebooted(tb, node, boot) and _in_service(tb, node), timeout=300, interval=2,
             what=f"{node} repaired and back in service")
    back = time.monotonic() - t0
    episode = _episode(tb, node)
    assert episode[0]["check"] == "SLURM_GRES_LOW", episode
    assert [e["step"] for e in episode if e["event"] == "step"] == ["restart:slurmd", "reboot"], episode
    assert [e["result"] for e in episode if e["event"] == "result"] == ["failed", "ok"], episode
    print(f"Slurm drained {node} ({reason}); slurmd restarted, then a reboot; back in service {back:.0f} s after "
          "the fault")


def test_a_node_under_a_running_job_is_not_rebooted_and_a_restart_repeats_nothing(fleet):
    """The reboot waits for the job; the service killed right after it issued the reboot comes back and
    issues no second one."""
    tb, node = fleet, fleet.computes[0]
    _wait_settled(tb, node)
    boot = _boot(tb, node)
    before = _reboots_asked(tb, node)
    job = submit(tb, tb.controller, f"-w {node} -o /dev/null --wrap 'sleep 25'")
    wait_for(lambda: job_state(tb, tb.controller, job) == "RUNNING", timeout=60, what="the job running")
    _break(tb, node, "xid-79")
    wait_for(lambda: [e for e in _journal(tb, node) if e["event"] == "held" and "running jobs" in e["why"]],
             timeout=60, interval=2, what="kiln-remediate holding the reboot for the job")
    assert not _rebooted(tb, node, boot) and job_state(tb, tb.controller, job) == "RUNNING"
    wait_for(lambda: [e for e in _journal(tb, node) if e["event"] == "step" and e["step"] == "reboot"],
             timeout=120, interval=1, what="the reboot once the job ended")
    ok(tb, tb.controller, "systemctl kill -s KILL kiln-remediate")  # killed mid-repair; systemd restarts it
    assert job_state(tb, tb.controller, job) == "COMPLETED"
    wait_for(lambda: _rebooted(tb, node, boot) and _in_service(tb, node), timeout=240, interval=2,
             what=f"{node} rebooted and back")
    wait_for(lambda: on(tb, tb.controller, "systemctl is-active kiln-remediate").stdout.strip() == "active",
             timeout=60, what="kiln-remediate started again by systemd")
    time.sleep(12)  # two more looks of the restarted service
    episode = _journal(tb, node)
    last = max(i for i, e in enumerate(episode) if e["event"] == "fault")
    assert [e["step"] for e in episode[last:] if e["event"] == "step"] == ["reboot"], episode[last:]
    assert _reboots_asked(tb, node) == before + 1  # one reboot asked of Slurm, not two
    print(f"running job {job} completed before {node} was rebooted; the service killed after the reboot, one reboot")


def test_a_node_that_loses_power_is_power_cycled_through_its_bmc_and_a_job_needing_every_node_then_runs(fleet):
    """A compute node loses power without warning: Slurm has it down and not responding, kiln-remediate's
    first step (restart slurmd) gets no SSH session, so it drains the node with kiln's reason and power-cycles
    it through its BMC (over IPMI: ipmitool on the controller, the testbed's IPMI endpoint); the node
    boots, its checks pass and kiln-remediate resumes it. A job that needs every compute node, submitted
    after the loss, waits meanwhile and then runs."""
    tb = fleet
    _wait_settled(tb, *tb.computes)
    # the node kiln-remediate has repaired least in this module
    returns = {n: sum(1 for e in _journal(tb, n) if e["event"] == "returned") for n in tb.computes}
    node = min(tb.computes, key=lambda n: (returns[n], tb.computes.index(n)))
    before = len(_journal(tb, node))
    resets = tb.bmc.dir / "bmc.log"
    logged = resets.read_text() if resets.exists() else ""
    lost_at = time.monotonic()
    tb.power_loss(node)
    try:
        _power_cycled(tb, node, before, resets, logged, lost_at)
    finally:  # never leave the node off for the tests after this one
        if not _running(tb, node):
            tb.start(node)


def _running(tb, node: str) -> bool:
    return tb.kind().running(next(n for n in tb.recorded_nodes() if n.name == node))


def _power_cycled(tb, node: str, before: int, resets, logged: str, lost_at: float) -> None:
    wait_for(lambda: _state(tb, node)[0].startswith("down"), timeout=90, interval=1, what=f"{node} down in Slurm")
    down_at = time.monotonic()
    job = submit(tb, tb.controller, f"-N {len(tb.computes)} -t 2 --wrap 'srun hostname'")
    time.sleep(2)
    assert job_state(tb, tb.controller, job) == "PENDING"
    episode = wait_for(lambda: (lambda ev: ev if ev and ev[-1]["event"] in ("returned", "escalated") else None)(
        [e for e in _journal(tb, node)[before:] if e["event"] != "held"]), timeout=420, interval=2,
        what=f"kiln-remediate power-cycling {node} and returning it")
    back_at = time.monotonic()
    for e in episode:
        print(f"  +{e['t'] - episode[0]['t']:5.1f} s  {e['event']:13} {e.get('step', '')} {e.get('result', '')} "
              f"{e.get('reset_type', '')} {str(e.get('detail', e.get('why', '')))[:300]}")
    assert episode[0]["check"] == "SLURM_NOT_RESPONDING", episode
    assert [e["step"] for e in episode if e["event"] == "step"] == ["restart:slurmd", "power_cycle"], episode
    assert [e["result"] for e in episode if e["event"] == "result"] == ["unreachable", "ok"], episode
    # the BMC saw the system off (its power lost): powering it on is the cycle's whole
    assert [e["reset_type"] for e in episode if e["event"] == "power_cycled"] == ["On"], episode
    assert not [e for e in episode if e["event"] == "escalated"], episode
    # the BMC's own record of it: written once the testbed's start returns (its SSH and simulators up),
    # which can be after the node's health check resumed it
    wait_for(lambda: f"{node}: IPMI power on done, power On" in resets.read_text()[len(logged):], timeout=120,
             interval=1,
             what=f"the BMC's record of {node} powered on")
    # in service: idle, or already running (or just ending) the job that waited for it
    assert _state(tb, node)[0] in ("idle", "mixed", "allocated", "completing"), _state(tb, node)
    wait_for(lambda: job_state(tb, tb.controller, job) in ("RUNNING", "COMPLETED"), timeout=120, interval=1,
             what=f"job {job} on every compute node")
    running_at = time.monotonic()
    wait_for(lambda: job_state(tb, tb.controller, job) == "COMPLETED", timeout=120, interval=2,
             what=f"job {job} completed")
    ran_on = on(tb, tb.controller, f"sacct -n -X -P -j {job} -o NodeList").stdout.strip()
    print(f"{node} lost power: down in Slurm after {down_at - lost_at:.0f} s, power-cycled by its BMC and back in "
          f"service after {back_at - lost_at:.0f} s; the job needing all {len(tb.computes)} compute nodes ran "
          f"{running_at - lost_at:.0f} s after the loss, on {ran_on}")


def test_the_circuit_breaker_holds_when_every_compute_node_fails_at_once(fleet):
    tb = fleet
    _wait_settled(tb, *tb.computes)
    boots = {n: _boot(tb, n) for n in tb.computes}
    for n in tb.computes:  # a shared cause: every node at once
        _break(tb, n, "xid-79")
    wait_for(lambda: [e for e in _journal(tb) if e["event"] == "breaker_open"], timeout=90, interval=2,
             what="the circuit breaker open")
    time.sleep(10)  # past the settling time, two more looks
    assert not [n for n in tb.computes if _rebooted(tb, n, boots[n])]  # nothing rebooted
    dry = kiln("remediate", "-i", str(tb.remediation_inventory), "--dry-run", "--json")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    holds = {d["node"]: d["why"] for d in json.loads(dry.stdout)["decisions"] if d["action"] == "hold"}
    assert set(holds) == set(tb.computes) and all("circuit breaker" in w for w in holds.values()), holds
    alert = on(tb, tb.controller, "grep kiln_remediation_breaker_open "
               "/var/lib/prometheus/node-exporter/kiln-remediation.prom").stdout
    assert "kiln_remediation_breaker_open 1" in alert, alert
    for n in tb.computes:  # the outage's cause fixed: the nodes' checks pass and resume them
        on(tb, n, "kiln-sim clear")
    for n in tb.computes:
        wait_for(lambda n=n: _in_service(tb, n), timeout=120, what=f"{n} resumed by its checks")
    out = kiln("remediate", "-i", str(tb.remediation_inventory), "--reset-breaker")
    assert out.returncode == 0 and "circuit breaker closed" in out.stdout, out.stdout + out.stderr
    assert _journal(tb)[-1]["event"] in ("breaker_reset", "returned", "held")
