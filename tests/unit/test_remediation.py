"""kiln-remediate's decisions as pure functions with an injected clock: the ladder per check, budgets,
repeat offenders, the circuit breaker, who is never touched, crash safety from the journal; the
node-side program's whitelist; the host keys handed to the controller."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import pytest

from checks import node_repair, repairs
from checks.reference import CHECKS
from checks.remediation import Remediator, parse_views, read_journal
from checks.remediation_metrics import metrics
from tests.slurm_framing import SEP, frame
from checks.remediation_policy import NodeHistory, NodeView, Settings, breaker, decide, judge, replay
from kiln.known_hosts import known_hosts_lines

S = Settings(settle_seconds=0)
T0 = 1_800_000_000.0


def _hist(*events) -> NodeHistory:
    return replay([{"node": "n1", **e} for e in events]).node("n1")


def test_every_failing_check_has_a_ladder_that_ends_in_escalation():
    """... or is only waited for: a locked encrypted volume unlocks by itself once tang answers (nothing on the
    node repairs it, and a person is needed only for tang)."""
    waited = {c for c, steps in repairs.LADDERS.items() if steps == (repairs.WAIT,)}
    assert waited == {"STORAGE_LOCKED"}
    for check_id, (_, severity, *_rest) in CHECKS.items():
        if severity != "fail" or check_id in waited:
            continue
        steps = repairs.ladder(check_id.replace("<code>", "79"))
        assert steps[-1] == repairs.ESCALATE, check_id
        assert all(s in (repairs.RESET, repairs.REBOOT, repairs.ESCALATE) or s.startswith("restart:") for s in steps)
    assert repairs.ladder("GPU_XID_48") == (repairs.RESET, repairs.REBOOT, repairs.ESCALATE)  # DBE: reset first
    assert repairs.ladder("GPU_XID_79") == (repairs.REBOOT, repairs.ESCALATE)  # fallen off the bus
    assert repairs.ladder("GPU_XID_64") == (repairs.ESCALATE,)  # remapping failed: service
    assert repairs.ladder("GPU_MODEL") == (repairs.ESCALATE,)  # configuration: a person


def test_whose_drain_it_is_decides_whether_kiln_touches_it():
    person = NodeView("n1", "drained", "RMA ticket 4411 by bob")
    rollout = NodeView("n1", "drained", "kiln: patch batch 2")
    escalated = NodeView("n1", "drained", "kiln: escalated GPU_XID_79: ...")
    assert decide(person, NodeHistory(), S, T0, False).action == "hold"
    assert decide(rollout, NodeHistory(), S, T0, False).why == "in a kiln rollout"
    assert decide(escalated, NodeHistory(), S, T0, False).why.startswith("escalated")
    # a person who takes over a node kiln was repairing: kiln lets go of it
    assert decide(person, _hist({"event": "fault", "check": "GPU_XID_79", "t": T0}), S, T0, False).action == "release"
    assert decide(NodeView("n1", "idle"), NodeHistory(), S, T0, False).action == "none"
    # Slurm refused the node's registration (sinfo: inval): Slurm's own, out of service, its ladder's
    gres = NodeView("n1", "inval", "gres/gpu count reported lower than configured (3 < 4)")
    assert gres.out_of_service and decide(gres, NodeHistory(), S, T0, False).action == "open"
    assert decide(NodeView("n1", "drained", "kiln: GPU_XID_79 GPU 0"), NodeHistory(), S, T0, False) \
        .check == "GPU_XID_79"
    assert decide(NodeView("n1", "down*", "Not responding"), NodeHistory(), S, T0, False).check == "SLURM_NOT_RESPONDING"


def test_the_ladder_is_climbed_one_step_per_look_and_ends_escalated():
    view = NodeView("n1", "drained", "kiln: GPU_ECC_UNCORRECTED GPU 1: 2 uncorrected")
    fault = {"event": "fault", "check": "GPU_ECC_UNCORRECTED", "t": T0}
    d = decide(view, _hist(fault), S, T0, False)
    assert (d.action, d.step) == ("step", repairs.RESET)
    reset = [{"event": "step", "step": "reset", "t": T0 + 1}, {"event": "result", "result": "failed", "t": T0 + 5}]
    d = decide(view, _hist(fault, *reset), S, T0 + 10, False)
    assert (d.action, d.step) == ("step", repairs.REBOOT)
    reboot = [{"event": "step", "step": "reboot", "t": T0 + 10}]
    assert decide(view, _hist(fault, *reset, *reboot), S, T0 + 20, False).why == "reboot in progress"
    back = NodeView("n1", "drained", view.reason, boot_time=T0 + 100)
    assert decide(back, _hist(fault, *reset, *reboot), S, T0 + 120, False).action == "verify"
    failed = reboot + [{"event": "result", "result": "failed", "t": T0 + 130}]
    d = decide(back, _hist(fault, *reset, *failed), S, T0 + 140, False)
    assert d.action == "escalate" and "tried: reset, reboot" in d.why
    # a reboot that never comes back
    late = decide(view, _hist(fault, *reset, *reboot), S, T0 + 10 + S.reboot_timeout_seconds + 1, False)
    assert late.action == "escalate" and "not back" in late.why


def test_running_jobs_hold_a_reset_or_reboot_but_not_a_slurmd_restart():
    fault = {"event": "fault", "check": "GPU_XID_79", "t": T0}
    d = decide(NodeView("n1", "draining", "kiln: GPU_XID_79 GPU 0"), _hist(fault), S, T0, False)
    assert d.action == "hold" and "running jobs" in d.why
    fault = {"event": "fault", "check": "SLURM_SLURMD", "t": T0}
    d = decide(NodeView("n1", "draining", "kiln: SLURM_SLURMD slurmd inactive"), _hist(fault), S, T0, False)
    assert (d.action, d.step) == ("step", "restart:slurmd")


def test_budget_per_kind_and_repeat_offenders_escalate():
    view = NodeView("n1", "drained", "kiln: GPU_XID_79 GPU 0")
    earlier = []
    for i in range(2):  # two earlier faults, each rebooted and back in service
        t = T0 + i * 3600
        earlier += [{"event": "fault", "check": "GPU_XID_79", "t": t}, {"event": "step", "step": "reboot", "t": t + 1},
                    {"event": "result", "result": "ok", "t": t + 60}, {"event": "returned", "t": t + 70}]
    now = T0 + 3 * 3600
    d = decide(view, _hist(*earlier, {"event": "fault", "check": "GPU_XID_79", "t": now}), S, now, False)
    assert d.action == "escalate" and "repeat offender" in d.why
    lenient = Settings(repeat_offender_faults=5, settle_seconds=0)
    d = decide(view, _hist(*earlier, {"event": "fault", "check": "GPU_XID_79", "t": now}), lenient, now, False)
    assert d.action == "escalate" and "reboot budget spent: 2 within 24 h" in d.why
    # a week later both are forgotten
    later = now + 8 * 86400
    d = decide(view, _hist(*earlier, {"event": "fault", "check": "GPU_XID_79", "t": later}), S, later, False)
    assert (d.action, d.step) == ("step", repairs.REBOOT)


def test_the_breaker_opens_when_too_many_nodes_fail_at_once_and_holds_everything():
    views = [NodeView(f"n{i}", "drained", "kiln: STORAGE_RESPONDING /home", drained_at=T0) for i in range(3)]
    views.append(NodeView("n3", "idle"))
    why = breaker(views, replay([]), S, T0 + 30)
    assert "3 of 4 compute nodes failed within 10 min" in why
    assert breaker(views[:2] + [NodeView("n2", "idle"), NodeView("n3", "idle")], replay([]), S, T0 + 30) == ""
    assert breaker(views, replay([]), S, T0 + 3600) == ""  # drained long ago, one by one: no outage
    # people's drains never count
    people = [NodeView(f"n{i}", "drained", "maintenance") for i in range(4)]
    assert breaker(people, replay([]), S, T0) == ""
    h = replay([{"event": "breaker_open", "why": why, "t": T0}, {"node": "n0", "event": "fault", "check": "X", "t": T0}])
    assert h.breaker_open
    d = decide(views[0], h.node("n0"), S, T0 + 60, h.breaker_open)
    assert d.action == "hold" and "circuit breaker" in d.why
    assert not replay([{"event": "breaker_open", "t": T0}, {"event": "breaker_reset", "t": T0 + 1}]).breaker_open


def test_a_step_cut_short_by_a_crash_is_checked_not_repeated():
    fault = {"event": "fault", "check": "SLURM_SLURMD", "t": T0}
    started = {"event": "step", "step": "restart:slurmd", "t": T0 + 1}  # no result: killed mid-step
    d = decide(NodeView("n1", "drained", "kiln: SLURM_SLURMD x"), _hist(fault, started), S, T0 + 30, False)
    assert d.action == "verify" and d.step == "restart:slurmd"


class _FakeCluster:
    """Slurm and the nodes' ssh as a script: what each look sees and what it did."""

    def __init__(self, tmp_path, views: list[tuple[str, str, str]], checks_pass=True):
        self.views, self.calls, self.checks_pass = views, [], checks_pass
        self.config = {"nodes": {n: {"address": f"10.0.0.{i}"} for i, (n, _, _) in enumerate(views)},
                       "key": "/k", "known_hosts": "/kh", "journal": str(tmp_path / "journal.jsonl"), "fast": True,
                       "settings": {"budget_per_kind": 2, "settle_seconds": 0}}

    def remediator(self, clock):
        r = Remediator(self.config, out=lambda *_: None, clock=clock)
        fake = self

        def run(args, timeout=60):
            import subprocess
            fake.calls.append(args)
            if args[0] == "sinfo":
                sep = args[-1][2:args[-1].index("%T")]  # the call's own separator, as sinfo prints it
                out = "".join(sep.join((n, s, "2026-12-02T10:00:00", r, n)) + "\n" for n, s, r in fake.views)
                return subprocess.CompletedProcess(args, 0, out, "")
            if args[0] == "scontrol" and args[1:2] == ["-o"]:
                return subprocess.CompletedProcess(args, 0, "", "")
            if args[0] == "ssh":
                if args[-1] == "check":
                    verdicts = [] if fake.checks_pass else [{"id": "GPU_XID_79", "severity": "fail", "message": "x"}]
                    return subprocess.CompletedProcess(args, 0, json.dumps({"verdicts": verdicts}), "")
                return subprocess.CompletedProcess(args, 0, "ok", "")
            return subprocess.CompletedProcess(args, 0, "", "")
        r._run = run
        return r


def test_a_stopped_slurmd_is_restarted_checked_and_resumed_with_an_audit_line_each(tmp_path):
    fake = _FakeCluster(tmp_path, [("n1", "drained", "kiln: SLURM_SLURMD slurmd is inactive"), ("n2", "idle", "none")])
    fake.checks_pass = False
    r = fake.remediator(lambda: T0)
    fake.checks_pass = True  # restarted: the checks pass

    def check(node):
        return (len([c for c in fake.calls if c[0] == "ssh" and c[-1].startswith("restart")]) > 0, ["SLURM_SLURMD x"])
    r.check = check
    r.look()
    ssh = [c[-1] for c in fake.calls if c[0] == "ssh"]
    assert ssh == ["restart slurmd"]
    assert ["scontrol", "update", "nodename=n1", "state=resume"] in fake.calls
    events = [e["event"] for e in read_journal(fake.config["journal"])]
    assert events == ["fault", "step", "result", "resumed"]
    # killed and started again: the next look repeats nothing; the node back in service closes the episode
    fake.views[0] = ("n1", "idle", "none")
    fake.calls.clear()
    fake.remediator(lambda: T0 + 10).look()
    assert not [c for c in fake.calls if c[0] == "ssh" or c[1:2] in (["update"], ["reboot"])]
    journal = read_journal(fake.config["journal"])
    assert journal[-1]["event"] == "returned"
    text = metrics(journal, T0 + 20)
    assert 'kiln_remediation_repairs_total{kind="restart",result="ok"} 1' in text
    assert "kiln_remediation_returned_seconds_count 1" in text


def test_a_reboot_is_issued_once_even_when_the_service_restarts_mid_reboot(tmp_path):
    fake = _FakeCluster(tmp_path, [("n1", "drained", "kiln: GPU_XID_79 GPU 0 fell off the bus")])
    fake.remediator(lambda: T0).look()
    reboots = [c for c in fake.calls if c[:2] == ["scontrol", "reboot"]]
    assert reboots == [["scontrol", "reboot", "reason=kiln: repair reboot GPU_XID_79", "n1"]]
    # more looks (a restarted service) while the node reboots, in each state sinfo shows then: Slurm 22.05 and
    # later print the reboot before the drain ("reboot" asked, "reboot^" issued, "reboot*" not answering),
    # older releases the drain with a mark; none of them is the node back in service
    for i, state in enumerate(("reboot", "reboot^", "reboot*", "drained@", "drained^"), start=1):
        fake.views[0] = ("n1", state, "kiln: repair reboot GPU_XID_79")
        fake.remediator(lambda t=T0 + 10 * i: t).look()
    assert len([c for c in fake.calls if c[:2] == ["scontrol", "reboot"]]) == 1
    events = read_journal(fake.config["journal"])
    assert not [e for e in events if e["event"] in ("returned", "resumed", "result")], events
    held = [e for e in events if e["event"] == "held"]
    assert len(held) == 1 and held[0]["why"] == "reboot in progress"  # said once, not every look


def test_a_node_a_person_reboots_is_left_to_the_person():
    """A person's ``scontrol reboot`` of an idle node (no drain, no reason): out of service while it
    reboots, and not kiln's to repair or return."""
    d = decide(NodeView("n1", "reboot^"), NodeHistory(), S, T0, False)
    assert (d.action, d.why) == ("hold", "rebooted by a person")
    assert decide(NodeView("n1", "idle"), NodeHistory(), S, T0, False).action == "none"


def test_dry_run_writes_nothing_and_touches_nothing(tmp_path):
    fake = _FakeCluster(tmp_path, [("n1", "drained", "kiln: GPU_XID_79 GPU 0")])
    r = fake.remediator(lambda: T0)
    r.dry_run = True
    decisions = r.look()
    assert decisions[0]["action"] == "open" and not (tmp_path / "journal.jsonl").exists()
    assert not [c for c in fake.calls if c[0] == "ssh" or c[1:2] in (["update"], ["reboot"])]


def test_slurms_view_is_read_field_by_field():
    sinfo = ("n1|drained|2026-12-02T10:00:00|kiln: GPU_XID_79 a|b\nn2|idle|Unknown|none\nn9|idle|Unknown|none\n"
             "n1|drained|2026-12-02T10:00:00|kiln: GPU_XID_79 a|b\n")
    scontrol = "NodeName=n1 Arch=x86_64 CoresPerSocket=1 BootTime=2026-12-02T09:00:00 SlurmdStartTime=x\n"
    views = parse_views(frame(sinfo, 4), scontrol, ["n1", "n2"], SEP)
    assert [v.name for v in views] == ["n1", "n2"]
    assert views[0].reason == "kiln: GPU_XID_79 a|b" and views[0].boot_time is not None and views[1].reason == ""


@pytest.mark.parametrize("command, words", [("restart slurmd", ["restart", "slurmd"]), ("reset", ["reset"]),
                                            ("check", ["check"]), ("restart sshd", None), ("reboot", None),
                                            ("check; rm -rf /", None), ("restart slurmd && id", None), ("", None)])
def test_the_node_program_runs_only_what_it_allows(command, words):
    assert node_repair.parse(command) == words


def test_a_gpu_reset_is_recorded_for_the_xid_check_only_when_it_succeeded(tmp_path, monkeypatch):
    import subprocess
    mark = tmp_path / "lib" / "gpu-reset"
    monkeypatch.setattr(node_repair, "RESET_FILE", str(mark))
    answers = {"--query-compute-apps=pid": "", "-r": ("Unable to reset GPU 00000000:18:00.0", 255)}

    def run(args, timeout=120):
        out = answers.get(args[1], ("", 3)) if args[0] == "nvidia-smi" else ("", 3)
        text, rc = (out, 0) if isinstance(out, str) else out
        return subprocess.CompletedProcess(args, rc, text, "")
    monkeypatch.setattr(node_repair, "_run", run)
    assert node_repair.reset() == 1 and not mark.exists()  # the reset failed: nothing recorded
    answers["-r"] = ("GPU 00000000:18:00.0 was successfully reset.\nAll done.", 0)
    monkeypatch.setattr(node_repair.time, "time", lambda: 1_800_000_123.5)
    assert node_repair.reset() == 0 and mark.read_text() == "1800000123.500\n"
    answers["--query-compute-apps=pid"] = "4242\n"  # a process on a GPU: not reset, the old mark stays
    monkeypatch.setattr(node_repair.time, "time", lambda: 1_800_000_999.0)
    assert node_repair.reset() == 1 and mark.read_text() == "1800000123.500\n"


def test_the_controller_trusts_only_the_compute_nodes_keys_from_the_inventory():
    salt = b"0123456789abcdefghij"
    hashed = "|1|" + base64.b64encode(salt).decode() + "|" + base64.b64encode(
        hmac.new(salt, b"10.0.0.12", hashlib.sha1).digest()).decode()
    text = (f"gpu01,10.0.0.11 ssh-ed25519 AAAAkey1\n{hashed} ssh-ed25519 AAAAkey2\n"
            "@cert-authority *.example ssh-ed25519 AAAAca\n*.cluster ssh-ed25519 AAAAwild\n"
            "[10.0.0.13]:2222 ssh-ed25519 AAAAkey3\nlogin1 ssh-ed25519 AAAAother\n# comment\n")
    aliases = {"gpu01": [("gpu01", 22), ("10.0.0.11", 22)], "gpu02": [("gpu02", 22), ("10.0.0.12", 22)],
               "gpu03": [("gpu03", 2222), ("10.0.0.13", 2222)]}
    reach = {"gpu01": ("10.0.0.11", 22), "gpu02": ("10.0.0.12", 22), "gpu03": ("10.0.0.13", 2222)}
    assert known_hosts_lines(text, aliases, reach) == ("10.0.0.11 ssh-ed25519 AAAAkey1\n10.0.0.12 ssh-ed25519 AAAAkey2\n"
                                                        "[10.0.0.13]:2222 ssh-ed25519 AAAAkey3\n")


def test_a_new_fault_settles_before_its_first_repair():
    fault = {"event": "fault", "check": "GPU_XID_79", "t": T0}
    view = NodeView("n1", "drained", "kiln: GPU_XID_79 GPU 0")
    settle = Settings(settle_seconds=60)
    assert decide(view, _hist(fault), settle, T0 + 30, False).why.startswith("settling")
    assert decide(view, _hist(fault), settle, T0 + 61, False).step == repairs.REBOOT


def test_a_step_is_judged_by_the_check_it_was_for():
    assert judge("GPU_XID_79", True, []) == ("ok", "")
    assert judge("GPU_XID_79", False, ["GPU_XID_79 Xid 79 on GPU 0"]) == ("failed", "")
    # the Xid is gone after the reboot, the node fails something else: a new fault, not the next rung
    assert judge("GPU_XID_79", False, ["GPU_ECC_UNCORRECTED GPU 2: 3 uncorrected"]) == ("ok", "GPU_ECC_UNCORRECTED")
    # checks that could not be read, or Slurm's own reason (no node check names it): not judged cleared
    assert judge("GPU_XID_79", False, ["no check result (rc 255)"]) == ("failed", "")
    assert judge("SLURM_NOT_RESPONDING", False, ["SLURM_SLURMD slurmd is inactive"]) == ("failed", "")


def test_a_node_back_and_failing_anew_before_the_next_look_gets_a_new_episode(tmp_path):
    """Rebooted for Xid 79, resumed by its own checks, and failing uncorrected ECC before kiln-remediate
    looked again: the reboot worked, and the ECC fault climbs its own ladder (a reset), not Xid 79's
    (whose next rung is escalation)."""
    fake = _FakeCluster(tmp_path, [("n1", "drained", "kiln: GPU_XID_79 GPU 0 fell off the bus")])
    fake.remediator(lambda: T0).look()
    assert [c for c in fake.calls if c[:2] == ["scontrol", "reboot"]]
    fake.views[0] = ("n1", "drained", "kiln: GPU_ECC_UNCORRECTED GPU 2")
    r = fake.remediator(lambda: T0 + 200)
    r.views = lambda: [NodeView("n1", "drained", "kiln: GPU_ECC_UNCORRECTED GPU 2", boot_time=T0 + 100)]
    r.check = lambda node: (False, ["GPU_ECC_UNCORRECTED GPU 2: 3 uncorrected"])
    r.look()
    events = [e for e in read_journal(fake.config["journal"]) if e["event"] != "held"]
    assert [e["event"] for e in events] == ["fault", "step", "result", "closed", "fault"], events
    assert events[2]["result"] == "ok" and events[4]["check"] == "GPU_ECC_UNCORRECTED"
    assert ["scontrol", "update", "nodename=n1", "state=resume"] not in fake.calls  # still failing
    r = fake.remediator(lambda: T0 + 210)
    r.views = lambda: [NodeView("n1", "drained", "kiln: GPU_ECC_UNCORRECTED GPU 2", boot_time=T0 + 100)]
    r.check = lambda node: (False, ["GPU_ECC_UNCORRECTED GPU 2: 3 uncorrected"])
    r.look()
    steps = [e["step"] for e in read_journal(fake.config["journal"]) if e["event"] == "step"]
    assert steps == ["reboot", "reset"], steps
    assert "escalated" not in [e["event"] for e in read_journal(fake.config["journal"])]
    text = metrics(read_journal(fake.config["journal"]), T0 + 300)
    assert 'kiln_remediation_repairs_total{kind="reboot",result="ok"} 1' in text


def test_a_node_with_several_faults_climbs_the_ladder_of_its_most_severe(tmp_path):
    """slurmd stopped (Slurm: Not responding) while the kernel log holds an Xid 79: the node is rebooted
    (Xid 79's ladder, which a reboot of slurmd's node cures too), never restarted twice and escalated;
    the journal names both faults."""
    from checks.remediation_policy import most_severe
    assert most_severe(["SLURM_NOT_RESPONDING", "GPU_XID_79"]) == "GPU_XID_79"
    assert most_severe(["SLURM_SLURMD", "GPU_ECC_UNCORRECTED"]) == "GPU_ECC_UNCORRECTED"  # reset over restart
    assert most_severe(["GPU_XID_79", "GPU_REMAP_FAILURE"]) == "GPU_REMAP_FAILURE"  # a person's first
    assert most_severe(["SLURM_SLURMD", "SLURM_MUNGE"]) == "SLURM_SLURMD"  # a tie: the drain's own
    assert most_severe(["UNKNOWN"]) == "UNKNOWN"
    fake = _FakeCluster(tmp_path, [("n1", "down*", "Not responding"), ("n2", "idle", "none")])
    r = fake.remediator(lambda: T0)
    r.check = lambda node: (False, ["SLURM_SLURMD slurmd is inactive", "GPU_XID_79 Xid 79 (GPU has fallen off the bus)"])
    r.look()
    events = read_journal(fake.config["journal"])
    fault = next(e for e in events if e["event"] == "fault")
    assert fault["check"] == "GPU_XID_79" and fault["faults"] == ["SLURM_NOT_RESPONDING", "SLURM_SLURMD", "GPU_XID_79"]
    step = next(e for e in events if e["event"] == "step")
    assert step["step"] == "reboot" and step["check"] == "GPU_XID_79"
    # slurmd restarted only so that Slurm can deliver the reboot (it reboots through slurmd), then the reboot
    assert [c[-1] for c in fake.calls if c[0] == "ssh"] == ["restart slurmd"]
    assert any(c[:2] == ["scontrol", "reboot"] and c[-1] == "n1" for c in fake.calls)


def test_a_gpu_reset_stops_the_gpu_clients_first_and_refuses_while_any_process_holds_a_gpu(tmp_path, monkeypatch):
    """NVIDIA: nvidia-smi -r fails while any process uses a GPU, monitoring ones included. kiln-node-repair
    stops each client that runs (DCGM's exporter and hostengine, persistenced, the fabric manager, and a
    site's own from /etc/kiln/gpu-clients), refuses if something still holds a GPU, resets, and starts
    the clients again in the reverse order whatever happened."""
    import subprocess
    monkeypatch.setattr(node_repair, "RESET_FILE", str(tmp_path / "gpu-reset"))
    extra = tmp_path / "gpu-clients"
    extra.write_text("kiln-sim-dcgm-exporter\nnot a unit; rm -rf /\n")
    monkeypatch.setattr(node_repair, "EXTRA_CLIENTS", str(extra))
    active = {"nvidia-dcgm-exporter", "nvidia-persistenced", "kiln-sim-dcgm-exporter"}
    calls = []

    def run(args, timeout=120):
        calls.append(args)
        if args[:3] == ["systemctl", "is-active", "--quiet"]:
            return subprocess.CompletedProcess(args, 0 if args[3][:-8] in active else 3, "", "")
        return subprocess.CompletedProcess(args, 0, "GPU 00000000:18:00.0 was successfully reset." if args[:2] ==
                                           ["nvidia-smi", "-r"] else "", "")
    monkeypatch.setattr(node_repair, "_run", run)
    holders = [["123 python3"]]
    monkeypatch.setattr(node_repair, "gpu_holders", lambda: holders[0])
    assert node_repair.gpu_clients(str(extra)) == [*node_repair.GPU_CLIENTS, "kiln-sim-dcgm-exporter"]
    assert node_repair.reset() == 1  # something still holds a GPU with the clients stopped: refused
    assert ["nvidia-smi", "-r"] not in calls
    started = [a[2] for a in calls if a[:2] == ["systemctl", "start"]]
    assert started == ["kiln-sim-dcgm-exporter.service", "nvidia-persistenced.service", "nvidia-dcgm-exporter.service"]
    calls.clear()
    holders[0] = []
    assert node_repair.reset() == 0
    order = [a[1:3] if a[0] == "systemctl" else a[:2] for a in calls if a[:2] != ["systemctl", "is-active"]
             and a[:1] != ["nvidia-smi"] or a[:2] == ["nvidia-smi", "-r"]]
    assert order == [["stop", "nvidia-dcgm-exporter.service"], ["stop", "nvidia-persistenced.service"],
                     ["stop", "kiln-sim-dcgm-exporter.service"], ["nvidia-smi", "-r"],
                     ["start", "kiln-sim-dcgm-exporter.service"], ["start", "nvidia-persistenced.service"],
                     ["start", "nvidia-dcgm-exporter.service"]]


def test_the_testbeds_nvidia_smi_refuses_a_reset_while_a_gpu_client_runs(tmp_path):
    """The stand-in refuses as the driver does: a GPU client (known by the name it runs under) is running."""
    import importlib.util
    from tests.conftest import REPO
    spec = importlib.util.spec_from_file_location("simstate", REPO / "kiln" / "testbed" / "simulators" / "simstate.py")
    simstate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(simstate)
    for pid, argv in (("10", b"/usr/bin/python3\0-IS\0/usr/local/bin/dcgm-exporter\0"), ("11", b"nv-fabricmanager\0infinity\0"),
                      ("12", b"/usr/sbin/sshd\0-D\0"), ("13", b"python3\0train.py\0--dcgm-exporter\0")):
        (tmp_path / pid).mkdir()
        (tmp_path / pid / "cmdline").write_bytes(argv)
    assert sorted(simstate.gpu_clients(str(tmp_path))) == ["10 dcgm-exporter", "11 nv-fabricmanager"]


# seen live on the testbed (Slurm 22.05): slurmd registered 3 of the 4 GPUs slurm.conf gives the node
INVALID_REG = ("NodeName=gres02 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 Gres=gpu:h100:4 NodeAddr=gres02 "
               "State=IDLE+DRAIN+INVALID_REG ThreadsPerCore=1 Partitions=batch  BootTime=2026-12-03T15:23:25 "
               "Reason=gres/gpu count reported lower than configured (3 < 4) [slurm@2026-12-03T15:27:37]\n")


@pytest.mark.parametrize("line, refused", [
    (INVALID_REG, ["SLURM_GRES_LOW Slurm refused its registration: gres/gpu count reported lower than configured "
                   "(3 < 4)"]),
    (INVALID_REG.replace("+INVALID_REG", ""), []),  # registered again with every GPU: the reason stays, the flag not
    (INVALID_REG.replace("gres/gpu count reported lower than configured (3 < 4)", "Low RealMemory (reported:900 < "
                         "100.00% of configured:1024)"), ["SLURM_LOW_MEMORY Slurm refused its registration: Low "
                                                         "RealMemory (reported:900 < 100.00% of configured:1024)"]),
])
def test_slurms_refusal_of_a_registration_fails_the_nodes_check_until_it_registers_whole(tmp_path, line, refused):
    """The node's own checks never ask the controller; kiln-remediate does, so a step for Slurm's own
    INVALID_REG drain is judged by whether Slurm still refuses the node."""
    import subprocess
    r = Remediator({"journal": str(tmp_path / "j.jsonl"), "nodes": {"gres02": {"address": "10.0.0.2"}},
                    "key": "/k", "known_hosts": "/kh"},
                   out=lambda *_: None)

    def run(args, timeout=60):
        if args[0] == "ssh":
            return subprocess.CompletedProcess(args, 0, json.dumps({"verdicts": []}), "")
        assert args == ["scontrol", "-o", "show", "node", "gres02"], args
        return subprocess.CompletedProcess(args, 0, line, "")
    r._run = run
    assert r.check("gres02") == (not refused, refused)


@pytest.mark.parametrize("ssh_says,unreachable", [
    ("ssh: connect to host 10.0.0.0 port 22: No route to host", True),
    ("ssh: connect to host 10.0.0.0 port 22: Connection timed out", True),
    ("Command '['ssh', ...]' timed out after 300 seconds", True),
    ("Permission denied (publickey).", False),  # a session refused: a key to mend, not a lost node
    ("Connection closed by 10.0.0.0 port 22", False),  # sshd answered (and dropped it: MaxStartups, say)
])
def test_a_node_that_answers_neither_slurm_nor_ssh_is_escalated_not_restarted_service_by_service(
        tmp_path, ssh_says, unreachable):
    """A powered-off node: Slurm has it down and not responding, and SSH gets no session. kiln-remediate
    records it unreachable at its first step and escalates on the next look (its BMC or a person), instead
    of restarting munge over an SSH that cannot connect; a node with a session whose restart fails climbs
    its ladder as before."""
    import subprocess
    fake = _FakeCluster(tmp_path, [("n1", "down*", "Not responding"), ("n2", "idle", "none")])
    r = fake.remediator(lambda: T0)
    r.check = lambda node: (False, [f"no check result ({ssh_says})"])
    plain = r._run

    def run(args, timeout=60):
        if args[0] == "ssh":
            fake.calls.append(args)
            return subprocess.CompletedProcess(args, 255, "", ssh_says)
        return plain(args, timeout)
    r._run = run
    r.look()
    r2 = fake.remediator(lambda: T0 + 10)
    r2._run, r2.check = run, r.check
    r2.look()
    events = read_journal(fake.config["journal"])
    results = [e["result"] for e in events if e["event"] == "result"]
    escalated = [e for e in events if e["event"] == "escalated"]
    if unreachable:
        assert results == ["unreachable"] and "no answer on SSH" in events[-2]["detail"], events
        assert len(escalated) == 1 and "answers neither Slurm nor SSH" in escalated[0]["reason"], escalated
        assert [c[-1] for c in fake.calls if c[0] == "ssh"] == ["restart slurmd"]  # munge never tried
        assert len(escalated[0]["reason"]) <= 200
    else:
        assert results == ["failed", "failed"] and not escalated
        assert [c[-1] for c in fake.calls if c[0] == "ssh"] == ["restart slurmd", "restart munge"]
