"""The metrics contract (kiln/monitoring/metrics_contract.py): every series a rule reads is listed with who
serves it; KilnMetricMissing fires, per rule group, where a node serves its group's metrics but not a
series a rule reads (promtool); and the monitoring suite's MONITORING_SERIES, against a real Prometheus
scraping a stand-in dcgm-exporter that serves only the stock default counters, names each series kiln's
rules miss. Prometheus and promtool are Debian's (.ci/run installs them); without them these skip."""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from checks import monitoring
from checks.node import local_node
from kiln.inventory.monitoring_schema import AlertThresholds
from kiln.monitoring import alert_rules
from kiln.monitoring.alert_rules import ALERTS, Alert
from kiln.monitoring.metrics_contract import (BY_NAME, CONTRACT, DCGM_STOCK_DEFAULT, absent_rules, rules_reading,
                                              series_in, uncontracted)
from tests.conftest import REPO
from tests.ports import free_port

PROMTOOL, PROMETHEUS = shutil.which("promtool"), shutil.which("prometheus")
KILN_COUNTERS = REPO / "templates" / "monitoring" / "dcgm-counters.csv"


@pytest.mark.parametrize("expr, expected", [
    ('up{job="node",node!=""} == 0', {"up"}),
    ("kiln_node_gpus_expected > on(node) count by (node) (DCGM_FI_DEV_GPU_TEMP)",
     {"kiln_node_gpus_expected", "DCGM_FI_DEV_GPU_TEMP"}),
    ("sum by (node, gpu) (increase(A_TOTAL[10m]) + increase(B_TOTAL[10m])) > 0", {"A_TOTAL", "B_TOTAL"}),
    ('floor({__name__=~"OLD|NEW"} / 8) % 2 == 1', {"OLD", "NEW"}),
    ("time() - x_timestamp_seconds > 300", {"x_timestamp_seconds"}),
    ('a and on (node, device) b == 1 or a unless on (node) b', {"a", "b"}),
    ('node_filesystem_avail_bytes{fstype!~"tmpfs|nfs"} * 100 / node_filesystem_size_bytes < 10',
     {"node_filesystem_avail_bytes", "node_filesystem_size_bytes"}),
])
def test_the_series_of_an_expression_are_read_as_promql_has_them(expr, expected):
    assert series_in(expr) == expected


def test_every_series_a_rule_reads_is_in_the_contract():
    assert uncontracted(ALERTS) == {}
    assert set(rules_reading(ALERTS)) <= set(BY_NAME)


def test_a_rule_reading_a_series_absent_from_the_contract_is_caught():
    made_up = Alert("KilnMadeUp", "kiln_made_up_series > 0 and on (node) DCGM_FI_DEV_GPU_TEMP", "0s", "warning", "",
                    "x", "y")
    assert uncontracted((*ALERTS, made_up)) == {"kiln_made_up_series": ["KilnMadeUp"]}


def test_kiln_counters_serve_every_gpu_series_a_rule_reads_and_the_stock_file_does_not():
    kiln_fields = {line.split(",")[0].strip() for line in KILN_COUNTERS.read_text().splitlines()
                   if line.strip() and not line.startswith("#")}
    read = [BY_NAME[n] for n in rules_reading(ALERTS)]
    gpu = [s for s in read if s.scope == "gpu"]
    assert gpu and all(set(s.names) & kiln_fields for s in gpu), [s.name for s in gpu if not set(s.names) & kiln_fields]
    beyond_stock = sorted(s.name for s in gpu if not set(s.names) & set(DCGM_STOCK_DEFAULT))
    assert beyond_stock == STOCK_MISSES
    for s in CONTRACT:
        if s.scope == "gpu":
            assert ("only with kiln's counters file" in s.served_by) == (s.name in beyond_stock), s


# (DCGM_EXP_XID_ERRORS_COUNT is beyond stock too, but has a series only once an Xid happened: not asked for)
STOCK_MISSES = sorted(["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
                       "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
                       "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"])


# --- KilnMetricMissing, evaluated by promtool ------------------------------------------------------

def _scope_series(node: str) -> list[dict]:
    """What makes ``node`` part of every rule group's scope."""
    return [{"series": f'up{{job="node",node="{node}",instance="{node}:9100"}}', "values": "1x20"},
            {"series": f'kiln_node_health_check_expected{{node="{node}"}}', "values": "1x20"},
            {"series": f'DCGM_FI_DEV_GPU_TEMP{{node="{node}",gpu="0"}}', "values": "40x20"},
            {"series": f'node_infiniband_info{{node="{node}",device="mlx5_0"}}', "values": "1x20"}]


@pytest.mark.skipif(PROMTOOL is None, reason="needs promtool (Debian's prometheus package; .ci/run installs it)")
def test_each_absent_series_alert_fires_where_its_series_is_missing_and_stays_quiet_where_served(tmp_path):
    missing_rules = absent_rules(ALERTS, "5m")
    assert {r["labels"]["rule_group"] for r in missing_rules} == {"node", "checked", "gpu", "fabric", "cluster"}
    bare = [{k: v for k, v in r.items() if k != "annotations"} for r in missing_rules]  # the cases check labels
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "kiln", "rules": bare}]}))
    served = []
    for r in missing_rules:  # n2 serves every series (one of its names), with the labels its rules need
        name = BY_NAME[r["labels"]["series"]].name
        served.append({"series": f'{name}{{node="n2",gpu="0",device="mlx5_0",daemon="slurmctld"}}', "values": "0x20"})
    expected = []
    for r in missing_rules:
        labels = {k: v for k, v in r["labels"].items()}
        if r["labels"]["rule_group"] != "cluster":
            labels["node"] = "n1"
        expected.append({"exp_labels": labels})
    test = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [
        {"interval": "1m", "input_series": _scope_series("n1") + _scope_series("n2") + served,
         "alert_rule_test": [{"eval_time": "10m", "alertname": "KilnMetricMissing", "exp_alerts": [
             e for e in expected if e["exp_labels"]["rule_group"] != "cluster"]}]},
        {"interval": "1m", "input_series": _scope_series("n1"),
         "alert_rule_test": [{"eval_time": "10m", "alertname": "KilnMetricMissing", "exp_alerts": expected}]},
        {"interval": "1m", "input_series": _scope_series("n2") + served,  # everything served: quiet
         "alert_rule_test": [{"eval_time": "10m", "alertname": "KilnMetricMissing", "exp_alerts": []}]},
        {"interval": "1m", "input_series": _scope_series("n1"),  # missing, but not for as long as its for:
         "alert_rule_test": [{"eval_time": "3m", "alertname": "KilnMetricMissing", "exp_alerts": []}]},
    ]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test, sort_keys=False))
    out = subprocess.run([PROMTOOL, "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_rendered_rules_carry_one_absent_series_alert_per_contract_series():
    rendered = alert_rules.rules(AlertThresholds(), 30)["groups"][0]["rules"]
    missing = {r["labels"]["series"] for r in rendered if r["alert"] == "KilnMetricMissing"}
    read = {BY_NAME[n].name for n in rules_reading(ALERTS)}
    assert missing == {n for n in read if BY_NAME[n].scope != "optional"} - {"up", "DCGM_FI_DEV_GPU_TEMP"}


# --- MONITORING_SERIES against a real Prometheus and a stand-in dcgm-exporter ----------------------


def _exporter(fields: list[str]):
    """A dcgm-exporter stand-in serving ``fields`` for one GPU, in dcgm-exporter's exposition."""
    body = "".join(f"# HELP {f} x\n# TYPE {f} gauge\n{f}{{gpu=\"0\",UUID=\"GPU-1\",Hostname=\"n1\"}} 0\n"
                   for f in fields).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def prometheus(tmp_path):
    """A real Prometheus scraping whatever exporter the test starts (``start(port)``) every second."""
    if PROMETHEUS is None:
        pytest.skip("needs prometheus (Debian's prometheus package; .ci/run installs it)")
    procs = []

    def start(exporter_port: int) -> str:
        port = free_port()
        config = {"global": {"scrape_interval": "1s"}, "scrape_configs": [
            {"job_name": "dcgm", "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"],
                                                      "labels": {"node": "n1"}}]}]}
        d = tmp_path / f"prom{port}"
        d.mkdir()
        (d / "prometheus.yml").write_text(yaml.safe_dump(config))
        procs.append(subprocess.Popen([PROMETHEUS, f"--config.file={d / 'prometheus.yml'}", f"--storage.tsdb.path={d}",
                                       f"--web.listen-address=127.0.0.1:{port}"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                url = f"http://127.0.0.1:{port}/api/v1/query?query=up"
                if json.loads(urllib.request.urlopen(url, timeout=1).read())["data"]["result"]:
                    return f"127.0.0.1:{port}"
            except OSError:
                pass
            time.sleep(0.3)
        pytest.fail("Prometheus did not scrape its target")
    yield start
    for p in procs:
        p.terminate()
        p.wait(timeout=10)


def _gpu_series() -> list[dict]:
    """The monitoring suite's expectation for the GPU series of a cluster with GPU nodes."""
    return [{"name": s.name, "also": list(s.also), "rules": readers, "served_by": s.served_by, "when": ""}
            for s, readers in ((BY_NAME[n], r) for n, r in sorted(rules_reading(ALERTS).items()))
            if s.scope == "gpu"]


def _series_verdict(address: str, tmp_path: Path, monkeypatch):
    (tmp_path / "pw").write_text("unused\n")
    monkeypatch.setattr(monitoring, "PASSWORD", str(tmp_path / "pw"))
    expect = {"monitoring": {"prometheus": address, "rules": 0, "scrape_seconds": 1, "series": _gpu_series()}}
    [verdict] = [v for v in monitoring.run(local_node("mon1"), expect) if v.id == "MONITORING_SERIES"]
    return verdict


def test_the_monitoring_suite_names_each_series_a_stock_dcgm_exporter_does_not_serve(prometheus, tmp_path, monkeypatch):
    stock = _exporter(list(DCGM_STOCK_DEFAULT))
    try:
        verdict = _series_verdict(prometheus(stock.server_address[1]), tmp_path, monkeypatch)
    finally:
        stock.shutdown()
    assert verdict.severity == "fail", verdict
    named = sorted(part.split(" (read by")[0] for part in verdict.message.split(": ", 1)[1].split("; D"))
    named = sorted(n if n.startswith("DCGM") else "D" + n for n in named)
    assert named == STOCK_MISSES, verdict.message
    assert "read by KilnGPUECCUncorrected; dcgm-exporter, only with kiln's counters file" in verdict.message
    print(verdict.message)


def test_the_monitoring_suite_passes_when_kiln_counters_are_served(prometheus, tmp_path, monkeypatch):
    fields = [line.split(",")[0].strip() for line in KILN_COUNTERS.read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    full = _exporter(fields)
    try:
        verdict = _series_verdict(prometheus(full.server_address[1]), tmp_path, monkeypatch)
    finally:
        full.shutdown()
    assert verdict.severity == "ok", verdict
