"""Monitoring, live on the shared testbed (#30): after kiln deploy Prometheus scrapes every node's
exporters; a fatal Xid, an uncorrected ECC error (the GPU simulators, read by the dcgm-exporter
stand-in), a stopped slurmd and a node's power loss each fire their alert in Alertmanager within a
measured bound, `kiln alerts` folds them, and each resolves once its fault is cleared. The monitoring
check suite fails on a target that is down. A target file kiln wrote is read again without a restart.

Bounds on the testbed (kiln/testbed/inventory.py MONITORING_SETTINGS): scrape and evaluation every
10 s, a rule's `for:` (0 s for GPU errors, 20 s for a node or slurmd down), Alertmanager's group wait
5 s; the node's own exposure comes first (the stand-in serves the simulators' state at each scrape).
"""

from __future__ import annotations

import pytest

import base64
import json
import shutil
import subprocess
import time

from kiln.inventory import load_cluster
from kiln.monitoring.alerts import query
from kiln.secrets import monitoring_password
from tests.testbed.conftest import NODES
from tests.testbed.slurm_helpers import alerts_firing, kiln, ok, on, wait_for

# scrape 10 s + evaluation 10 s + for + group wait 5 s, with the slack a loaded 2-core CI machine needs
FIRE_BOUND = {"KilnGPUFatalXid": 60, "KilnGPUECCUncorrected": 60, "KilnSlurmdDown": 90, "KilnNodeDown": 90}
RESOLVE_BOUND = 90


def _reader(tb):
    cluster = load_cluster(tb.inventory)
    return cluster, monitoring_password(cluster)


def _alerts_on(tb) -> set[tuple[str, str]]:
    return alerts_firing(tb)


def test_prometheus_scrapes_every_node_after_deploy(slurm):
    tb = slurm
    cluster, password = _reader(tb)

    def up():
        return {(r["metric"]["job"], r["metric"].get("node")): r["value"][1] for r in query(cluster, password, "up")}
    nodes = [tb.controller, *tb.computes]
    expected = {("node", n) for n in nodes} | {("dcgm", n) for n in tb.computes} | {
        ("prometheus", tb.controller), ("alertmanager", tb.controller)}
    found = wait_for(lambda: (lambda u: u if expected <= {k for k, v in u.items() if v == "1"} else None)(up()),
                     timeout=90, interval=2, what="every exporter up in Prometheus")
    assert {k for k, v in found.items() if v == "1"} >= expected, found
    # kiln's own series arrive too: the Slurm collector, the node checks' kiln.prom, what each node must have
    assert query(cluster, password, 'kiln_slurm_up{daemon="slurmctld"} == 1')
    series = query(cluster, password, "kiln_node_gpus_expected")
    assert all("node" in r["metric"] for r in series), f"a series without its node label: {series}"
    gpus = {r["metric"]["node"]: r["value"][1] for r in series}
    assert {n: gpus.get(n) for n in tb.computes} == {n: "4" for n in tb.computes}, series
    counts = {r["metric"]["node"]: r["value"][1] for r in query(cluster, password, "count by (node) (DCGM_FI_DEV_GPU_TEMP)")}
    assert counts == {n: "4" for n in tb.computes}, counts
    # every listener on the node's cluster address only, and none answers without the password
    listening = ok(tb, tb.controller, "ss -Hltn | awk '{print $4}'").split()
    for port in ("9090", "9093", "9100"):
        assert [a for a in listening if a.endswith(":" + port)] == [f"{cluster.hosts[tb.controller].address}:{port}"], listening
    assert ok(tb, tb.controller, "python3 -c \"import ssl,urllib.request,sys\ntry:\n urllib.request.urlopen("
              f"'https://{cluster.hosts[tb.controller].address}:9090/api/v1/targets', context=ssl.create_default_context("
              "cafile='/etc/prometheus/kiln-ca.crt'))\nexcept Exception as e: print(e)\"").strip() \
        == "HTTP Error 401: Unauthorized"
    out = kiln("check", "-i", str(tb.inventory), "--suite", "monitoring", "--json", "-")
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.proves("monitoring", tier="nspawn")
def test_each_fault_fires_its_alert_and_resolves_when_cleared(slurm):
    tb = slurm
    xid_node, ecc_node, slurmd_node, power_node = tb.computes[:4]
    wanted = {("KilnGPUFatalXid", xid_node), ("KilnGPUECCUncorrected", ecc_node), ("KilnSlurmdDown", slurmd_node),
              ("KilnNodeDown", power_node)}
    wait_for(lambda: not (_alerts_on(tb) & wanted), timeout=120, interval=2, what="none of these alerts firing before")
    start = time.monotonic()
    tb.inject(xid_node, "xid-79", 2)
    tb.inject(ecc_node, "ecc-uncorrected", 1)
    ok(tb, slurmd_node, "systemctl stop slurmd")
    tb.power_loss(power_node)
    fired: dict[str, float] = {}
    try:
        deadline = start + max(FIRE_BOUND.values())
        while time.monotonic() < deadline and len(fired) < len(wanted):
            now = _alerts_on(tb)
            for name, node in wanted:
                if (name, node) in now and name not in fired:
                    fired[name] = time.monotonic() - start
            time.sleep(1)
        print("time to fire (s): " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(fired.items())))
        assert set(fired) == {n for n, _ in wanted}, f"fired: {fired}; firing now: {_alerts_on(tb)}"
        for name, seconds in fired.items():
            assert seconds <= FIRE_BOUND[name], (name, seconds)
        folded = json.loads(kiln("alerts", "-i", str(tb.inventory), "--json").stdout)["alerts"]
        hosts = {f["alert"]: f["hosts"] for f in folded}
        assert hosts["KilnGPUFatalXid"] == xid_node and hosts["KilnNodeDown"] == power_node, folded
        assert all(f["runbook"] for f in folded)
    finally:
        cleared = time.monotonic()
        tb.clear(xid_node)
        tb.clear(ecc_node)
        on(tb, slurmd_node, "systemctl start slurmd")
        tb.up(NODES, inventory_dir=tb.inventory)
    wait_for(lambda: not (_alerts_on(tb) & wanted), timeout=RESOLVE_BOUND + 60, interval=2,
             what="every alert resolved after its fault was cleared")
    print(f"all resolved {time.monotonic() - cleared:.0f} s after the faults were cleared")
    for node in (xid_node, ecc_node, slurmd_node, power_node):
        wait_for(lambda n=node: on(tb, tb.controller, f"sinfo -h -n {n} -o %T").stdout.strip() in ("idle", "mixed"),
                 timeout=180, interval=2, what=f"{node} back in service")
    wait_for(lambda: not {a for a in _alerts_on(tb) if a[1] in (xid_node, ecc_node, slurmd_node, power_node)
                          and a[0] != "KilnNodeChecksStale"}, timeout=120, interval=2,
             what="no alert left firing on those nodes")


# Metric names every scrape of a compute node carries (node_exporter's, the dcgm-exporter stand-in's, kiln's)
METRIC_NAMES = (b"node_cpu_seconds_total", b"node_filesystem_avail_bytes", b"DCGM_FI_DEV_GPU_TEMP", b"kiln_check_ok",
                b"kiln_node_gpus_expected")


@pytest.mark.skipif(shutil.which("tcpdump") is None, reason="needs tcpdump for the capture on the testbed's bridge "
                    "(apt-get install tcpdump; .ci/run installs it)")
@pytest.mark.proves("monitoring", "kiln check", tier="nspawn")
def test_every_listener_serves_only_tls_of_the_cluster_ca_and_a_capture_of_the_scrapes_holds_no_metric_or_password(
        slurm, tmp_path):
    tb = slurm
    cluster, password = _reader(tb)
    # every host's listeners: plain HTTP refused, TLS with a certificate the cluster CA signed for its address
    out = kiln("check", "-i", str(tb.inventory), "--suite", "monitoring", "--json", "-")
    nodes = json.loads(out.stdout)["nodes"]
    tls = {n: [c for c in v["checks"] if c["id"] == "MONITORING_TLS"] for n, v in nodes.items()}
    assert set(tls) == {tb.controller, *tb.computes} and all(len(v) == 1 and v[0]["severity"] == "ok" for v in tls.values()), tls
    print("MONITORING_TLS: " + "; ".join(f"{n}: {v[0]['message']}" for n, v in sorted(tls.items())))
    ctl_address = cluster.hosts[tb.controller].address
    node = tb.computes[0]
    address = cluster.hosts[node].address
    # what a plain client gets from a compute node's node_exporter, asked across the bridge
    plain = ok(tb, tb.controller, f"python3 -c \"import socket; s=socket.create_connection(('{address}', 9100), 5); "
               "s.sendall(b'GET /metrics?kiln-plain-marker HTTP/1.0\\r\\n\\r\\n'); print(s.recv(200).decode())\"")
    assert plain.startswith("HTTP/1.0 400 Bad Request") and "HTTPS server" in plain, plain
    capture = tmp_path / "scrapes.pcap"
    dump = subprocess.Popen(["tcpdump", "-i", tb.bridge, "-U", "-s", "0", "-w", str(capture),
                             f"tcp and host {ctl_address} and (port 9100 or port 9400)"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2)  # tcpdump listening
        # the control: a plain request across the bridge is in the capture, as any clear text would be
        on(tb, tb.controller, f"python3 -c \"import socket; s=socket.create_connection(('{address}', 9100), 5); "
           "s.sendall(b'GET /metrics?kiln-plain-marker HTTP/1.0\\r\\n\\r\\n'); s.recv(200)\"")
        time.sleep(3 * int(cluster.setting("monitoring_scrape_seconds")))  # three scrapes of every compute node
    finally:
        dump.terminate()
        dump.wait(timeout=30)
    data = capture.read_bytes()
    scraped = {r["metric"]["node"] for r in query(cluster, password, 'up{job=~"node|dcgm"} == 1')}
    assert set(tb.computes) <= scraped, scraped
    assert b"kiln-plain-marker" in data, "the capture saw no clear text at all: it proves nothing"
    assert len(data) > 20000, f"only {len(data)} bytes captured: the scrapes did not cross the bridge"
    assert data.count(b"\x16\x03\x01") + data.count(b"\x16\x03\x03") > 0, "no TLS handshake in the capture"
    secrets = [password.encode(), base64.b64encode(f"kiln:{password}".encode())]
    found = [name.decode() for name in METRIC_NAMES if name in data] + ["the password" for s in secrets if s in data]
    assert not found, f"the capture of the scrapes holds {found}"
    print(f"capture on {tb.bridge}: {len(data)} bytes over {3 * int(cluster.setting('monitoring_scrape_seconds'))} s, "
          f"{len(tb.computes)} compute nodes scraped; no metric name, no password; the plain control request seen")


def test_the_monitoring_suite_fails_on_a_target_down(slurm):
    tb, node = slurm, slurm.computes[0]
    ok(tb, node, "systemctl stop prometheus-node-exporter")
    try:
        def failing():
            out = kiln("check", "-i", str(tb.inventory), "--suite", "monitoring", "--json", "-")
            verdicts = {(n, c["id"]): c for n, v in json.loads(out.stdout)["nodes"].items() for c in v["checks"]}
            targets = verdicts.get((tb.controller, "MONITORING_TARGETS"), {})
            return verdicts if out.returncode != 0 and targets.get("severity") == "fail" and node in targets["message"] \
                else None
        verdicts = wait_for(failing, timeout=60, interval=3, what="MONITORING_TARGETS to fail")
        assert "connection refused" in verdicts[(tb.controller, "MONITORING_TARGETS")]["message"]
        # the node's own listener check says the same of it, and of no other node
        failed = {n for (n, check), v in verdicts.items() if check == "MONITORING_TLS" and v["severity"] == "fail"}
        assert failed == {node} and "does not answer" in verdicts[(node, "MONITORING_TLS")]["message"], verdicts
    finally:
        ok(tb, node, "systemctl start prometheus-node-exporter")


def test_a_target_file_deploy_writes_is_scraped_without_a_restart(slurm):
    """What a node added to the inventory goes through: kiln deploy writes it into the file_sd target
    list, and Prometheus scrapes it without a restart (here the target is taken out by hand first)."""
    tb, node = slurm, slurm.computes[-1]
    cluster, password = _reader(tb)
    started = query(cluster, password, 'process_start_time_seconds{job="prometheus"}')[0]["value"][1]
    targets = "/etc/prometheus/kiln-targets/node.json"
    ok(tb, tb.controller, f"python3 -c \"import json; p='{targets}'; d=json.load(open(p)); "
       f"json.dump([e for e in d if e['labels']['node'] != '{node}'], open(p, 'w'))\"")
    wait_for(lambda: not query(cluster, password, f'up{{job="node",node="{node}"}}'), timeout=60, interval=2,
             what=f"{node} out of Prometheus' targets")
    out = kiln("deploy", "-i", str(tb.inventory), "--limit", tb.controller)
    assert out.returncode == 0 and "changed" in out.stdout, out.stdout + out.stderr
    wait_for(lambda: query(cluster, password, f'up{{job="node",node="{node}"}} == 1'), timeout=60, interval=2,
             what=f"{node} scraped again after the deploy")
    assert query(cluster, password, 'process_start_time_seconds{job="prometheus"}')[0]["value"][1] == started
