"""kiln's silences on a real Alertmanager (Debian's prometheus-alertmanager, started here on a free
port): a silence holds back exactly the alerts of its nodes, under either node label, and expiring it
lets them through again. Skips, saying so, where the binary is missing (CI installs it)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from types import SimpleNamespace

import pytest

from kiln.monitoring.alerts import MonitoringError, folded
from checks.alertmanager import matchers
from kiln.monitoring.silences import Silences, silence_list, silenced
from tests.ports import free_port

BINARY = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")



@pytest.fixture(scope="module")
def alertmanager(tmp_path_factory):
    if BINARY is None:
        pytest.skip("prometheus-alertmanager is not installed (apt-get install prometheus-alertmanager)")
    d = tmp_path_factory.mktemp("alertmanager")
    (d / "am.yml").write_text("route:\n  receiver: none\nreceivers:\n  - name: none\n")
    port = free_port()
    proc = subprocess.Popen([BINARY, f"--config.file={d / 'am.yml'}", f"--storage.path={d}",
                             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            urllib.request.urlopen(url + "/-/ready", timeout=1).read()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail("Alertmanager did not start")
            time.sleep(0.2)
    yield SimpleNamespace(url=url, port=port)
    proc.terminate()
    proc.wait(timeout=10)


def _cluster():
    host = SimpleNamespace(address="127.0.0.1", name="mon01")
    return SimpleNamespace(group=lambda name: [host], monitored=True, setting=lambda name: False)  # plain HTTP


def _post_alerts(am, labels: list[dict]) -> None:
    body = json.dumps([{"labels": {"alertname": "KilnNodeDown", **lb}, "endsAt": "2099-01-01T00:00:00Z"}
                       for lb in labels]).encode()
    request = urllib.request.Request(am.url + "/api/v2/alerts", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=5).read()


def _unsilenced(am) -> set[str]:
    data = json.loads(urllib.request.urlopen(am.url + "/api/v2/alerts?active=true&silenced=false&inhibited=false",
                                             timeout=5).read())
    return {a["labels"].get("node") or a["labels"].get("slurm_node") for a in data}


def test_a_silence_holds_back_its_nodes_alerts_under_either_label_and_no_other(alertmanager):
    _post_alerts(alertmanager, [{"node": "gpu01"}, {"node": "gpu02"}, {"slurm_node": "gpu01"},
                                {"node": "gpu1x1"}, {"node": "gpu0"}])
    silences = Silences(_cluster(), "unused", program="kiln patch", port=alertmanager.port)
    assert _unsilenced(alertmanager) == {"gpu01", "gpu02", "gpu1x1", "gpu0"}
    now = time.time()
    ids = silences.make(["gpu01", "gpu1.1"], now - 1, now + 600, "kiln patch r1 batch 1")
    assert len(ids) == 2
    # gpu01 under node and slurm_node is held back; gpu1x1 is not gpu1.1 (the dot is a dot), gpu0 no prefix
    assert _unsilenced(alertmanager) == {"gpu02", "gpu1x1", "gpu0"}
    # what kiln alerts shows: each held-back alert with the silence that holds it
    held = folded(silenced(_cluster(), "unused", port=alertmanager.port))
    assert [(f.alert, f.hosts, f.count, f.silences) for f in held] == \
        [("KilnNodeDown", "gpu01", 2, ("kiln patch: kiln patch r1 batch 1",))]
    mine = [s for s in silences.listed() if s.id in ids]
    assert {s.state for s in mine} == {"active"} and {s.comment for s in mine} == {"kiln patch r1 batch 1"}
    assert silences.expire(ids) == ids
    assert silences.expire(ids) == ids  # expiring again is no error
    assert _unsilenced(alertmanager) == {"gpu01", "gpu02", "gpu1x1", "gpu0"}
    assert {s.state for s in silences.listed() if s.id in ids} == {"expired"}


def test_a_silence_for_no_node_or_a_forged_id_is_refused(alertmanager):
    silences = Silences(_cluster(), "unused", port=alertmanager.port)
    with pytest.raises(ValueError):
        matchers("node", [])
    with pytest.raises(MonitoringError, match="no silence id"):
        silences.expire(["../../api/v2/alerts"])


def test_no_monitoring_group_makes_every_call_a_no_op():
    silences = Silences(SimpleNamespace(group=lambda name: []), "pw")
    assert not silences.enabled
    assert silences.make(["n1"], 0, 1, "x") == [] and silences.expire(["abc"]) == [] and silences.listed() == []


@pytest.mark.parametrize("answer", [{}, [{"id": 1}], [{"id": "a", "comment": "c", "createdBy": "kiln",
                                                        "endsAt": "t", "status": "active", "matchers": []}]])
def test_a_silence_list_of_another_shape_is_a_clear_error(answer):
    with pytest.raises(MonitoringError, match="Alertmanager answered"):
        silence_list(answer)


def test_kiln_remediate_silences_a_node_for_its_reboot_and_ends_it_when_the_node_returns(alertmanager, tmp_path):
    """kiln-remediate on the controller (checks/remediation.py) with the Alertmanager of its settings:
    the node's alerts are held back from the reboot step; once it returns, they page again. The
    silence ids are journalled, so a restarted kiln-remediate ends the silence it made."""
    from checks.remediation import Remediator, read_journal
    from checks.remediation_policy import Decision, NodeView
    _post_alerts(alertmanager, [{"node": "gpu07"}, {"node": "gpu08"}])
    (tmp_path / "pw").write_text("unused\n")
    config = {"alertmanager": {"url": alertmanager.url, "password_file": str(tmp_path / "pw")},
              "journal": str(tmp_path / "journal.jsonl"), "nodes": {"gpu07": {"address": "10.0.0.7"}}}
    r = Remediator(config, out=lambda line: None)
    r.scontrol = lambda *words: subprocess.CompletedProcess(words, 0, "", "")
    r.step(NodeView("gpu07", "drained", "kiln: GPU_XID_79 fell off the bus"),
           Decision("step", "Xid 79", step="reboot", check="GPU_XID_79"))
    assert "gpu07" not in _unsilenced(alertmanager) and "gpu08" in _unsilenced(alertmanager)
    [made] = [e for e in read_journal(config["journal"]) if e["event"] == "silenced"]
    assert made["node"] == "gpu07" and len(made["ids"]) == 2
    again = Remediator(config, out=lambda line: None)  # the service restarted meanwhile
    again.act(NodeView("gpu07", "idle"), Decision("return", "its checks pass"))
    assert "gpu07" in _unsilenced(alertmanager)
    assert [e["ids"] for e in read_journal(config["journal"]) if e["event"] == "unsilenced"] == [made["ids"]]


def test_kiln_remediate_repairs_on_when_alertmanager_does_not_answer(tmp_path):
    from checks.remediation import Remediator, read_journal
    (tmp_path / "pw").write_text("pw\n")
    config = {"alertmanager": {"url": f"http://127.0.0.1:{free_port()}", "password_file": str(tmp_path / "pw")},
              "journal": str(tmp_path / "journal.jsonl"), "nodes": {}}
    r = Remediator(config, out=lambda line: None)
    r.silence("gpu07", "reboot for GPU_XID_79")
    [failed] = read_journal(config["journal"])
    assert failed["event"] == "silence_failed" and "did not answer" in failed["why"]


def test_a_silence_ended_with_a_grace_holds_a_little_longer_then_ends(alertmanager):
    """The work is over, the alerts it caused still resolving: the silence is shortened to the grace, in
    place (its id kept), not dropped at once."""
    _post_alerts(alertmanager, [{"node": "gpu21"}])
    silences = Silences(_cluster(), "unused", port=alertmanager.port)
    now = time.time()
    ids = silences.make(["gpu21"], now - 1, now + 7200, "kiln patch r3 batch 1")
    silences.expire(ids, after=60)
    mine = {s.id: s for s in silences.listed() if s.id in ids or s.comment == "kiln patch r3 batch 1"}
    active = [s for s in mine.values() if s.state == "active"]
    assert {s.id for s in active} == set(ids), mine  # shortened in place
    ends = [time.mktime(time.strptime(s.ends_at[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone for s in active]
    assert all(now + 30 < e < now + 120 for e in ends), [s.ends_at for s in active]
    assert "gpu21" not in _unsilenced(alertmanager)
    silences.expire(ids)
    assert "gpu21" in _unsilenced(alertmanager)
