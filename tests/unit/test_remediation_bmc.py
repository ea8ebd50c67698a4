"""kiln-remediate's out-of-band step: a node that answers neither Slurm nor SSH is drained with kiln's
reason and power-cycled through its BMC (a real Redfish endpoint over TLS, the testbed's, with an
in-memory power stand-in), then checked and resumed when it is back; what the policy decides without a
BMC, after a power cycle that failed, one that did not bring the node back, and over budget."""

from __future__ import annotations

import subprocess

import pytest

from checks import repairs
from checks.remediation import read_journal
from checks.remediation_policy import NodeView, Settings, decide, replay
from kiln.testbed.redfish_service import RedfishService
from tests.unit.test_redfish import Power, certificate, wait_until
from tests.unit.test_remediation import T0, _FakeCluster

S = Settings(settle_seconds=0)
LOST = ("ssh: connect to host 10.0.0.0 port 22: No route to host")


def _history(*events):
    return replay([{"node": "n1", **e} for e in events]).node("n1")


UNREACHABLE = ({"event": "fault", "check": "SLURM_NOT_RESPONDING", "t": T0},
               {"event": "step", "step": "restart:slurmd", "t": T0 + 1},
               {"event": "result", "result": "unreachable", "t": T0 + 2})
DOWN = NodeView("n1", "down*", "Not responding")


def test_an_unreachable_node_is_power_cycled_where_it_has_a_bmc_and_escalated_naming_kiln_bmc_where_not():
    n = _history(*UNREACHABLE)
    d = decide(DOWN, n, S, T0 + 10, False, bmc=True)
    assert (d.action, d.step, d.check) == ("step", repairs.POWER_CYCLE, "SLURM_NOT_RESPONDING")
    d = decide(DOWN, n, S, T0 + 10, False, bmc=False)
    assert d.action == "escalate" and "kiln_bmc" in d.why
    # the breaker holds a power cycle like any repair
    assert decide(DOWN, n, S, T0 + 10, True, bmc=True).action == "hold"


def test_a_power_cycle_is_waited_for_verified_when_back_and_escalated_when_it_failed_or_did_not_help():
    cycled = (*UNREACHABLE, {"event": "step", "step": repairs.POWER_CYCLE, "t": T0 + 20})
    drained = NodeView("n1", "down*", "kiln: repair power_cycle SLURM_NOT_RESPONDING", boot_time=T0 - 1000)
    assert decide(drained, _history(*cycled), S, T0 + 60, False, bmc=True).why == "power cycle in progress"
    back = NodeView("n1", "drained", "kiln: repair power_cycle SLURM_NOT_RESPONDING", boot_time=T0 + 50)
    d = decide(back, _history(*cycled), S, T0 + 70, False, bmc=True)
    assert (d.action, d.step) == ("verify", repairs.POWER_CYCLE) and d.why == "back from its power cycle"
    late = decide(drained, _history(*cycled), S, T0 + 20 + S.reboot_timeout_seconds + 1, False, bmc=True)
    assert late.action == "escalate" and "after its power cycle" in late.why
    failed = _history(*cycled, {"event": "result", "result": "failed", "detail": "BMC 10.9.0.1:443 refused the "
                                "credentials (HTTP 401)", "t": T0 + 21})
    d = decide(drained, failed, S, T0 + 30, False, bmc=True)
    assert d.action == "escalate" and "HTTP 401" in d.why
    # unreachable again after a power cycle: a person's, not a second cycle
    again = _history(*cycled, {"event": "result", "result": "unreachable", "t": T0 + 21})
    d = decide(DOWN, again, S, T0 + 30, False, bmc=True)
    assert d.action == "escalate" and "after a power cycle" in d.why


def test_power_cycles_have_their_own_budget():
    s = Settings(settle_seconds=0, budget_per_kind=1)
    earlier = (*UNREACHABLE, {"event": "step", "step": repairs.POWER_CYCLE, "t": T0 + 20},
               {"event": "result", "result": "ok", "t": T0 + 200}, {"event": "returned", "t": T0 + 201})
    n = _history(*earlier, *({**e, "t": e["t"] + 3600} for e in UNREACHABLE))
    d = decide(DOWN, n, s, T0 + 3700, False, bmc=True)
    assert d.action == "escalate" and "power-cycle budget spent" in d.why


@pytest.fixture
def bmc(tmp_path):
    cert, key, fingerprint = certificate(tmp_path, "bmc")
    power = Power(n1="On")
    service = RedfishService(["n1"], power, "kiln", "s3cret", cert, key).start()
    (tmp_path / "bmc.password").write_text("s3cret\n")
    yield service, power, fingerprint
    service.stop()


def _lost_node(tmp_path, service, fingerprint, password_file=None):
    fake = _FakeCluster(tmp_path, [("n1", "down*", "Not responding"), ("n2", "idle", "none")])
    fake.config["nodes"]["n1"]["bmc"] = {"address": service.address, "user": "kiln", "fingerprint": fingerprint,
                                         "system": "/redfish/v1/Systems/n1"}
    fake.config["bmc_password_file"] = password_file or str(tmp_path / "bmc.password")
    return fake


def _remediator(fake, t, node_up=lambda: False):
    r = fake.remediator(lambda: t)
    plain = r._run

    def run(args, timeout=60):
        if args[0] == "ssh" and not node_up():
            fake.calls.append(args)
            return subprocess.CompletedProcess(args, 255, "", LOST)
        return plain(args, timeout)
    r._run = run
    r.check = lambda node: (node_up(), [] if node_up() else [f"no check result ({LOST})"])
    return r


def test_a_lost_node_is_drained_power_cycled_through_its_bmc_then_checked_and_resumed(tmp_path, bmc):
    service, power, fingerprint = bmc
    fake = _lost_node(tmp_path, service, fingerprint)
    _remediator(fake, T0).look()                     # restart:slurmd gets no session: unreachable
    _remediator(fake, T0 + 10).look()                # the power cycle
    drain = ["scontrol", "update", "nodename=n1", "state=drain", "reason=kiln: repair power_cycle SLURM_NOT_RESPONDING"]
    assert drain in fake.calls
    assert wait_until(lambda: power.log == [("off", "n1"), ("on", "n1")]), power.log
    assert service.resets == [("n1", "PowerCycle")]
    # booting: still not responding, held; back (booted after the cycle, drained by kiln's reason): checked, resumed
    fake.views[0] = ("n1", "down*", "kiln: repair power_cycle SLURM_NOT_RESPONDING")
    _remediator(fake, T0 + 20).look()
    fake.views[0] = ("n1", "drained", "kiln: repair power_cycle SLURM_NOT_RESPONDING")
    r = _remediator(fake, T0 + 90, node_up=lambda: True)
    r.views = lambda: [NodeView("n1", "drained", "kiln: repair power_cycle SLURM_NOT_RESPONDING", boot_time=T0 + 60),
                       NodeView("n2", "idle")]
    r.look()
    assert ["scontrol", "update", "nodename=n1", "state=resume"] in fake.calls
    events = read_journal(fake.config["journal"])
    kinds = [e["event"] for e in events if e["event"] in ("fault", "step", "result", "power_cycled", "resumed")]
    assert kinds == ["fault", "step", "result", "step", "power_cycled", "result", "resumed"], events
    assert [e["step"] for e in events if e["event"] == "step"] == ["restart:slurmd", repairs.POWER_CYCLE]
    assert [e["result"] for e in events if e["event"] == "result"] == ["unreachable", "ok"]
    assert [e["reset_type"] for e in events if e["event"] == "power_cycled"] == ["PowerCycle"]


def test_a_bmc_that_refuses_is_recorded_failed_and_the_node_escalated_with_the_bmcs_words(tmp_path, bmc):
    service, power, fingerprint = bmc
    (tmp_path / "wrong").write_text("not-the-password\n")
    fake = _lost_node(tmp_path, service, fingerprint, password_file=str(tmp_path / "wrong"))
    for t in (T0, T0 + 10, T0 + 20):
        _remediator(fake, t).look()
    assert power.log == [] and service.resets == []
    events = read_journal(fake.config["journal"])
    failed = [e for e in events if e["event"] == "result" and e["result"] == "failed"]
    assert len(failed) == 1 and "refused the credentials (HTTP 401)" in failed[0]["detail"], events
    escalated = [e for e in events if e["event"] == "escalated"]
    assert len(escalated) == 1 and "its BMC did not power-cycle it" in escalated[0]["why"], escalated


def test_a_bmc_whose_certificate_changed_gets_no_credentials(tmp_path, bmc):
    service, power, _ = bmc
    fake = _lost_node(tmp_path, service, ":".join(["00"] * 32))
    for t in (T0, T0 + 10):
        _remediator(fake, t).look()
    assert service.requests == [] and power.log == []  # nothing sent, not even a GET
    failed = [e for e in read_journal(fake.config["journal"]) if e["event"] == "result" and e["result"] == "failed"]
    assert "not the pinned" in failed[0]["detail"]
