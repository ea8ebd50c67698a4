"""Monitoring: kiln's alert rules proven with promtool, the rendered files accepted by promtool and amtool,
the Slurm collector's parsers on recorded outputs, the dcgm-exporter stand-in's exposition, and hostile
monitoring values refused (kiln/monitoring, roles/monitoring*.py, checks/slurm_metrics.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from checks import slurm_metrics
from checks.parsers.scontrol import ping_up
from kiln.inventory import validate
from kiln.inventory.monitoring_schema import AlertThresholds
from kiln.monitoring import alert_rules
from kiln.monitoring.metrics_contract import BY_NAME, series_in
from roles import monitoring_config as conf
from tests.conftest import REPO
from tests.slurm_framing import SEP, frame

HERE = Path(__file__).parent / "monitoring"
SMALL = REPO / "tests" / "inventories" / "small"
PROMTOOL, AMTOOL = shutil.which("promtool"), shutil.which("amtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="needs promtool (Debian's prometheus package; .ci/run "
                                    "installs it) to evaluate the rules as Prometheus does")
needs_amtool = pytest.mark.skipif(AMTOOL is None, reason="needs amtool (Debian's prometheus-alertmanager package; "
                                  ".ci/run installs it)")
MONITORED = {"hosts.yml": (SMALL / "hosts.yml").read_text() + "    monitoring:\n      hosts:\n        ctl1:\n",
             "group_vars/all/monitoring.yml": 'kiln_versions_extra: x\n'}


def _inventory(tmp_path: Path, extra: str = "", versions: str = "") -> Path:
    root = tmp_path / "inv"
    shutil.copytree(SMALL, root)
    (root / "hosts.yml").write_text(MONITORED["hosts.yml"])
    (root / "group_vars" / "all" / "versions.yml").write_text(
        (SMALL / "group_vars" / "all" / "versions.yml").read_text()
        + '  prometheus: "2.42.0+ds-5+deb12u1"\n  alertmanager: "0.25.0-1+b4"\n  node_exporter: "1.5.0-1+b6"\n'
        + versions)
    (root / "group_vars" / "all" / "monitoring.yml").write_text(extra or "kiln_monitoring_scrape_seconds: 15\n")
    return root


def _cluster(tmp_path: Path, extra: str = "", versions: str = ""):
    cluster, errors = validate(_inventory(tmp_path, extra, versions))
    assert not errors, [str(e) for e in errors]
    return cluster


def _errors(tmp_path: Path, extra: str) -> list[str]:
    cluster, errors = validate(_inventory(tmp_path, extra))
    assert cluster is None
    return [str(e) for e in errors]


# --- the rules -------------------------------------------------------------------------------------

def test_every_alert_has_a_firing_and_a_quiet_promtool_case():
    tests = yaml.safe_load((HERE / "rules_test.yml").read_text())["tests"]
    cases = [c for t in tests for c in t["alert_rule_test"]]
    for alert in alert_rules.ALERTS:
        mine = [c for c in cases if c["alertname"] == alert.name]
        assert any(c["exp_alerts"] for c in mine), f"{alert.name} has no case where it fires"
        assert any(not c["exp_alerts"] for c in mine), f"{alert.name} has no case where it stays quiet"


@needs_promtool
def test_promtool_unit_tests_of_every_rule_pass(tmp_path):
    rules = alert_rules.rules(AlertThresholds(), 30)
    for rule in rules["groups"][0]["rules"]:
        rule.pop("annotations")  # the cases check labels; promtool check rules reads the templates below
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules, sort_keys=False))
    shutil.copy(HERE / "rules_test.yml", tmp_path)
    out = subprocess.run([PROMTOOL, "test", "rules", "rules_test.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@needs_promtool
def test_rendered_rules_and_config_pass_promtool(tmp_path):
    cluster = _cluster(tmp_path)
    rules, config = tmp_path / "rules.yml", tmp_path / "prometheus.yml"
    rules.write_text(conf.rules_yml(cluster))
    config.write_text(conf.prometheus_yml(cluster).replace(conf.RULES, str(rules)))
    (tmp_path / "pw").write_text("x")
    config.write_text(config.read_text().replace(conf.PASSWORD_FILE, str(tmp_path / "pw")))
    for args in (["check", "rules", str(rules)], ["check", "config", str(config)]):
        out = subprocess.run([PROMTOOL, *args], capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr


@needs_amtool
def test_rendered_alertmanager_config_passes_amtool(tmp_path):
    cluster = _cluster(tmp_path, "kiln_monitoring_receivers:\n  - {name: oncall, webhook_url: 'http://10.0.0.5:8080/hook'}\n"
                                 "  - {name: mail, email_to: ops@example.org}\n"
                                 "kiln_monitoring_smtp: {smarthost: 'smtp.example.org:25', sender: kiln@example.org}\n")
    path = tmp_path / "alertmanager.yml"
    path.write_text(conf.alertmanager_yml(cluster))
    out = subprocess.run([AMTOOL, "check-config", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    data = yaml.safe_load(path.read_text())
    assert [r["receiver"] for r in data["route"]["routes"]] == ["oncall", "mail"]
    assert data["global"]["smtp_smarthost"] == "smtp.example.org:25"


def _validated_file_commands(monkeypatch, path: str, content: bytes, check: str) -> list[str]:
    """The shell commands ``validated_file`` gives for a node without the file (pyinfra's upload as a cat)."""
    from types import SimpleNamespace

    from roles import operations

    def upload(src, dest, **_):
        yield f"cat > {dest} <<'EOF'\n{src.read().decode()}EOF"
    monkeypatch.setattr(operations, "files", SimpleNamespace(put=SimpleNamespace(_inner=upload)))
    snap = SimpleNamespace(files={}, covers=lambda _: True)
    ctx = SimpleNamespace(snapshot=snap, paths=[], units=[], lines=[], line_anchors={}, modules=[], packages=[], users=[],
                          groups=[])
    return list(operations.validated_file._inner(ctx=ctx, path=path, content=content, mode="640", user="root",
                                                 group="root", check=check))


@pytest.mark.parametrize("accepted", [True, False])
def test_a_file_the_check_refuses_never_replaces_the_one_in_use(tmp_path, monkeypatch, accepted):
    live = tmp_path / "prometheus.yml"
    live.write_text("old: config\n")
    commands = _validated_file_commands(monkeypatch, str(live), b"new: config\n", "true {}" if accepted else "false {}")
    script = "set -e\n" + "\n".join(c for c in commands if not c.startswith(("chown", "chmod"))) + "\n"
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert (out.returncode == 0) == accepted, out.stderr
    assert live.read_text() == ("new: config\n" if accepted else "old: config\n")
    assert not (tmp_path / "prometheus.yml.kiln-new").exists()
    if not accepted:
        assert "was not installed: false refused it" in out.stderr


# --- targets, listeners, auth -----------------------------------------------------------------------

def test_targets_cover_every_host_and_only_scraped_gpu_nodes(tmp_path):
    cluster = _cluster(tmp_path)
    t = conf.targets(cluster)
    assert sorted(e["labels"]["node"] for e in t["node"]) == sorted(cluster.hosts)
    assert t["dcgm"] == []  # no dcgm_exporter pin, no external exporter: GPU nodes' :9400 is not scraped
    cluster = _cluster(tmp_path / "b", versions='  dcgm_exporter: "4.2.3-4.1.3-1"\n')
    gpu = [e["labels"]["node"] for e in conf.targets(cluster)["dcgm"]]
    assert gpu == [h for h in sorted(cluster.hosts) if cluster.hosts[h].gpu_count]
    assert f"\nkiln_node_gpus_expected {cluster.hosts['gpu01'].gpu_count}\n" in conf.node_textfile(cluster, cluster.hosts["gpu01"])
    assert "\nkiln_node_gpus_expected 0\n" in conf.node_textfile(cluster, cluster.hosts["cpu01"])


def test_every_listener_is_on_the_cluster_address_with_basic_auth(tmp_path):
    cluster = _cluster(tmp_path)
    ctl = cluster.hosts["ctl1"]
    for text in (conf.node_exporter_defaults(cluster, ctl), conf.prometheus_defaults(cluster, ctl),
                 conf.alertmanager_defaults(cluster, ctl)):
        assert "--web.listen-address=10.0.0.1:" in text and f"--web.config.file={conf.WEB_CONFIG}" in text
        assert "0.0.0.0" not in text
    assert '--cluster.listen-address="' in conf.alertmanager_defaults(cluster, ctl)  # no gossip port for one alone
    prom = yaml.safe_load(conf.prometheus_yml(cluster))
    assert all(j["basic_auth"] == {"username": "kiln", "password_file": conf.PASSWORD_FILE} for j in prom["scrape_configs"])
    # HTTPS by default, trusting the cluster CA alone, for every scrape and for the alerts Prometheus sends
    assert all(j["scheme"] == "https" and j["tls_config"] == {"ca_file": conf.CA_FILE, "min_version": "TLS12"}
               for j in prom["scrape_configs"] + prom["alerting"]["alertmanagers"])
    for tls in (True, False):
        web = yaml.safe_load(conf.web_config("s3cret-pass", tls))
        import bcrypt
        assert bcrypt.checkpw(b"s3cret-pass", web["basic_auth_users"]["kiln"].encode())
        assert conf.web_config("s3cret-pass", tls) == conf.web_config("s3cret-pass", tls)  # a second deploy changes nothing
        assert "s3cret-pass" not in conf.web_config("s3cret-pass", tls)
        assert ("tls_server_config" in web) is tls
    assert yaml.safe_load(conf.web_config("p", True))["tls_server_config"] == {
        "cert_file": conf.TLS_CERT, "key_file": conf.TLS_KEY, "min_version": "TLS12"}
    plain = _cluster(tmp_path / "plain", extra="kiln_monitoring_tls: false\nkiln_log_shipping: false\n")
    prom = yaml.safe_load(conf.prometheus_yml(plain))
    assert not any("scheme" in j or "tls_config" in j for j in prom["scrape_configs"] + prom["alerting"]["alertmanagers"])


def test_the_monitoring_password_is_generated_and_masked(tmp_path):
    from kiln.secrets import MONITORING_PASSWORD, load_or_create
    cluster = _cluster(tmp_path)
    secrets = load_or_create(cluster)
    assert (cluster.secrets_dir / cluster.name / MONITORING_PASSWORD).stat().st_mode & 0o077 == 0
    assert secrets.monitoring_password and secrets.mask(f"pw={secrets.monitoring_password}") == "pw=********"
    assert load_or_create(cluster).monitoring_password == secrets.monitoring_password
    from kiln.secrets import monitoring_password
    assert monitoring_password(cluster) == secrets.monitoring_password


# --- hostile and wrong values ----------------------------------------------------------------------

@pytest.mark.parametrize("extra, key, says", [
    ("kiln_monitoring_receivers:\n  - {name: x, webhook_url: \"http://a/b\\nreceivers: []\"}\n",
     "kiln_monitoring_receivers", "control character"),
    ("kiln_monitoring_receivers:\n  - {name: \"x\\ny: 1\", webhook_url: \"http://a/b\"}\n", "kiln_monitoring_receivers",
     ""),
    ("kiln_monitoring_receivers:\n  - {name: x, webhook_url: \"http://a/b\", email_to: a@b.org}\n",
     "kiln_monitoring_receivers", "exactly one"),
    ("kiln_monitoring_receivers:\n  - {name: x, webhook_url: \"file:///etc/passwd\"}\n", "kiln_monitoring_receivers",
     "http(s) URL"),
    ("kiln_monitoring_receivers:\n  - {name: x, email_to: \"a@b.org\\nbcc: evil@x.org\"}\n", "kiln_monitoring_receivers", ""),
    ("kiln_monitoring_receivers:\n  - {name: x, email_to: a@b.org}\n", "kiln_monitoring_receivers", "kiln_monitoring_smtp"),
    ("kiln_monitoring_receivers:\n  - {name: x, webhook_url: \"http://a/\"}\n  - {name: x, webhook_url: \"http://b/\"}\n",
     "kiln_monitoring_receivers", "twice"),
    ("kiln_alert_thresholds: {gpu_temperature_celsius: \"90) or vector(1\"}\n", "kiln_alert_thresholds", ""),
    ("kiln_alert_thresholds: {gpu_temperature_celsius: 1000}\n", "kiln_alert_thresholds", ""),
    ("kiln_alert_thresholds: {node_down_seconds: 60, extra_rule: 1}\n", "kiln_alert_thresholds", ""),
    ("kiln_monitoring_scrape_seconds: \"10s\\nscrape_configs: []\"\n", "kiln_monitoring_scrape_seconds", ""),
    ("kiln_monitoring_smtp: {smarthost: \"smtp.example.org:25 --evil\", sender: a@b.org}\n", "kiln_monitoring_smtp", ""),
])
def test_hostile_monitoring_values_are_refused_with_file_and_key(tmp_path, extra, key, says):
    errors = _errors(tmp_path, extra)
    assert any(key in e and "monitoring.yml" in e and says in e for e in errors), errors


def test_rocky_hosts_cannot_be_monitored_by_kiln(tmp_path):
    root = _inventory(tmp_path)
    (root / "group_vars" / "cpu_b.yml").write_text((root / "group_vars" / "cpu_b.yml").read_text() + "kiln_os: rocky9\n")
    cluster, errors = validate(root)
    assert cluster is None and any("cpu01 runs rocky9, whose repositories carry no" in str(e) and "kiln_os" in str(e)
                                   for e in errors), errors


def test_an_inventory_without_a_monitoring_group_runs_no_monitoring(tmp_path):
    cluster, errors = validate(SMALL)
    assert not errors and not any("monitoring" in h.roles for h in cluster.hosts.values())
    assert all("monitoring" in h.roles for h in _cluster(tmp_path).hosts.values())


# --- the Slurm collector, on outputs recorded from the testbed's Slurm 22.05 ------------------------

SINFO = """kiln02|allocated|Unknown|none
kiln03|draining|2026-12-02T10:00:00|kiln: GPU_XID_79 Xid 79 (GPU has fallen off the bus)
kiln04|drained*|2026-12-02T10:00:00|disk swap "tomorrow"
kiln04|drained*|2026-12-02T10:00:00|disk swap "tomorrow"
kiln05|down*|2026-12-02T10:00:00|Not responding
"""
SQUEUE = """5|PENDING|vision|AssocGrpGRES|cpu=1,mem=512M,node=1,billing=1,gres/gpu=2
4|RUNNING|vision|None|cpu=1,mem=512M,node=1,billing=1,gres/gpu=1
6|RUNNING|language|None|cpu=2,mem=1G,node=2,billing=2,gres/gpu=2
7|RUNNING|vision|None|cpu=1,mem=512M,node=1,billing=1,gres/gpu=1,gres/gpu:h100=1
8|PENDING|language|Priority|cpu=1,mem=512M,node=1,billing=1
"""


def test_collector_reads_nodes_jobs_and_gpus_by_tres():
    states, drained = slurm_metrics.parse_nodes(frame(SINFO, 4, SEP), SEP)
    assert states == {"allocated": 1, "draining": 1, "drained": 1, "down": 1}
    assert drained == [("kiln03", "kiln", "GPU_XID_79"), ("kiln04", "person", "")]  # never the reason's text
    # a drained node mid-reboot: Slurm prints the reboot first (reboot^); still drained, still kiln's
    rebooting = "".join(SEP.join(row) + "\n" for row in (("kiln05", "reboot^", "2026-12-02T10:00:00",
                                                           "kiln: repair reboot GPU_XID_79", "kiln05"),
                                                          ("kiln06", "reboot", "Unknown", "none", "kiln06")))
    states, drained = slurm_metrics.parse_nodes(rebooting, SEP)
    assert states == {"reboot": 2} and drained == [("kiln05", "repair", "")]
    jobs = slurm_metrics.parse_jobs(frame(SQUEUE, 5, SEP), SEP)
    assert jobs["vision"]["gpus"] == 2 and jobs["language"]["gpus"] == 2  # --gpus-per-node counted, typed not twice
    assert jobs["vision"]["pending"] == {"AssocGrpGRES": 1} and jobs["language"]["states"] == {"RUNNING": 1, "PENDING": 1}
    sdiag = (REPO / "tests" / "unit" / "monitoring" / "sdiag.txt").read_text()
    assert slurm_metrics.parse_sdiag(sdiag) == {"dbd_agent_queue": 0, "scheduler_last_cycle_microseconds": 883,
                                                 "scheduler_mean_cycle_microseconds": 227}
    assert ping_up("Slurmctld(primary) at kiln01 is UP\n") and not ping_up("Slurmctld(primary) at kiln01 is DOWN\n")
    assert slurm_metrics.parse_sdiag("") == {} and slurm_metrics.parse_jobs("", SEP) == {}
    unreadable = slurm_metrics.parse_jobs(f"garbage\n4{SEP}RUNNING{SEP}vision{SEP}None{SEP}gres/gpu=1{SEP}5\n", SEP)
    assert unreadable == {"(unreadable)": {"states": {"UNREADABLE": 1}, "pending": {}, "gpus": 0}}  # never a guess


@needs_promtool
def test_collector_output_is_valid_exposition_with_escaped_labels():
    text = slurm_metrics.exposition(1, 0, slurm_metrics.parse_nodes(frame(SINFO, 4, SEP), SEP), slurm_metrics.parse_jobs(frame(SQUEUE, 5, SEP), SEP),
                                    {"dbd_agent_queue": 3}, 1e9)
    assert "tomorrow" not in text  # a person's reason is no label (its changes would restart every for: clock)
    assert 'kiln_slurm_node_drained{slurm_node="kiln03",by="kiln",check="GPU_XID_79"} 1' in text
    out = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


# --- the dcgm-exporter stand-in -----------------------------------------------------------------------

def _stand_in(tmp_path, monkeypatch, inject=()):
    import importlib.machinery
    import importlib.util
    import sys
    sims = REPO / "kiln" / "testbed" / "simulators"
    monkeypatch.setenv("KILN_SIM_STATE", str(tmp_path / "state.json"))
    monkeypatch.syspath_prepend(str(sims))
    for name in ("simstate",):
        sys.modules.pop(name, None)
    loader = importlib.machinery.SourceFileLoader("dcgm_standin", str(sims / "dcgm-exporter"))
    spec = importlib.util.spec_from_loader("dcgm_standin", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    mod.COUNTERS = str(REPO / "templates" / "monitoring" / "dcgm-counters.csv")
    state = mod.simstate.healthy(4, "h100", "535.261.03", 18, 2, 400, "InfiniBand")
    for fault in inject:
        fault(state, mod)
    return mod.exposition(state, "gpu01")


def _xid(state, mod):
    import time
    state["kernel_log"].append({"t": time.time(), "line": "2026-12-02T10:00:00+0000 gpu01 kernel: NVRM: Xid "
                                "(PCI:0000:38:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."})


@needs_promtool
def test_stand_in_serves_dcgm_exporters_exposition(tmp_path, monkeypatch):
    healthy = _stand_in(tmp_path, monkeypatch)
    out = subprocess.run([PROMTOOL, "check", "metrics"], input=healthy, capture_output=True, text=True)
    assert "parsing error" not in out.stderr, out.stderr  # (promtool's lint of dcgm-exporter's own names aside)
    line = next(x for x in healthy.splitlines() if x.startswith("DCGM_FI_DEV_GPU_TEMP{"))
    assert line.startswith('DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-00000000-0000-0000-0000-000000000000",'
                           'pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",'
                           'Hostname="gpu01",DCGM_FI_DRIVER_VERSION="535.261.03"} ')
    assert "DCGM_EXP_XID_ERRORS_COUNT{" not in healthy
    assert all(x.endswith(" 0") for x in healthy.splitlines() if x.startswith("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{"))
    faulty = _stand_in(tmp_path, monkeypatch, [_xid, lambda s, m: s["gpus"][1].update(ecc_uncorrected=2),
                                               lambda s, m: s["gpus"][3].update(lost=True)])
    assert 'gpu="2",' in faulty and 'window_size_in_ms="300000",xid="79"} 1' in faulty
    assert any(x.startswith('DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="1",') and x.endswith(" 2") for x in faulty.splitlines())
    assert 'gpu="3",' not in faulty  # a lost GPU has no series


# --- dashboards: every query reads metrics kiln's exporters serve ------------------------------------------

DASHBOARDS = REPO / "templates" / "monitoring" / "dashboards"
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}
# node_exporter's infiniband collector serves these where /sys/class/infiniband exists (real HCAs, the VM
# tier's soft-RoCE); the recorded names below come from a testbed container, which has none.
NODE_EXPORTER_INFINIBAND = {"node_infiniband_state_id", "node_infiniband_physical_state_id",
                            "node_infiniband_rate_bytes_per_second", "node_infiniband_info"}
PROMETHEUS_OWN = {"up", "ALERTS", "scrape_duration_seconds", "process_start_time_seconds"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: the metrics contract's one reader."""
    return series_in(expr)


def served_metrics() -> set[str]:
    node_exporter = {line for line in (HERE / "node_exporter_metrics.txt").read_text().splitlines()
                     if line and not line.startswith("#")}
    dcgm = {line.split(",")[0].strip() for line in (REPO / "templates" / "monitoring" / "dcgm-counters.csv").read_text().splitlines()
            if line.strip() and not line.startswith("#")}
    import re
    collector = slurm_metrics.exposition(1, 1, slurm_metrics.parse_nodes(frame(SINFO, 4, SEP), SEP), slurm_metrics.parse_jobs(frame(SQUEUE, 5, SEP), SEP),
                                         slurm_metrics.parse_sdiag((HERE / "sdiag.txt").read_text()), 0)
    node_files = {"kiln_node_gpus_expected", "kiln_node_fabric_rate_gbps_expected", "kiln_node_health_check_expected",
                  "kiln_node_fabric_hca_expected", "kiln_node_time_sync_expected"}  # kiln-node.prom
    assert all(f"\"{name}\"" in (REPO / "roles" / "monitoring_config.py").read_text() for name in node_files)
    from checks import node_local
    kiln_prom = {"kiln_check_ok", "kiln_check_last_run_timestamp_seconds", "kiln_check_duration_seconds"}
    assert all(name in (REPO / "checks" / "node_local.py").read_text() for name in kiln_prom), node_local
    from checks.remediation_metrics import metrics as remediation_metrics  # kiln-remediation.prom
    remediation = set(re.findall(r"^(kiln_[a-z_]+)", remediation_metrics([], 0), re.M))
    tls = set(re.findall(r"^(kiln_[a-z_]+)", conf.certificate_expiry_textfile(1e9), re.M))  # kiln-tls.prom
    return (node_exporter | NODE_EXPORTER_INFINIBAND | dcgm | PROMETHEUS_OWN | kiln_prom
            | set(re.findall(r"^(kiln_[a-z_]+)", collector, re.M)) | node_files | remediation | tls)


def test_metric_names_are_read_from_promql():
    assert metric_names('sum by (node) (rate(node_cpu_seconds_total{mode="idle",node=~"$node"}[5m])) / 2') == {
        "node_cpu_seconds_total"}
    assert metric_names('a > on(node) count by (node) (b{x="y"}) unless c') == {"a", "b", "c"}


@pytest.mark.parametrize("path", sorted(DASHBOARDS.glob("*.json")), ids=lambda p: p.name)
def test_every_dashboard_query_reads_served_metrics(path):
    board = json.loads(path.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    assert exprs and board["uid"] == path.stem
    missing = {m for e in exprs for m in metric_names(e.replace("$node", "x"))} - served_metrics()
    assert not missing, f"{path.name} reads metrics no kiln exporter serves: {sorted(missing)}"


def test_every_alert_rule_reads_served_metrics():
    """Every series each rendered rule reads (KilnMetricMissing's included) is served by one of its names
    (a DCGM field renamed in DCGM 3.3 is read under both)."""
    rules = alert_rules.rules(AlertThresholds(), 30)["groups"][0]["rules"]
    served = served_metrics()
    read = {BY_NAME[m].name if m in BY_NAME else m for r in rules for m in metric_names(r["expr"])}
    missing = {m for m in read if not set(BY_NAME[m].names if m in BY_NAME else (m,)) & served}
    assert not missing, sorted(missing)


# --- the monitoring check suite, on Prometheus API answers recorded on the testbed ---------------------------

def _suite(answers: dict[str, tuple[int, str]]):
    from checks import monitoring
    from checks.node import Node, Result
    # the rules the recorded answer holds (kiln's count when it was recorded)
    recorded = len(json.loads(_recorded("api-rules.json"))["data"]["groups"][0]["rules"])
    expect = {"monitoring": {"prometheus": "10.213.0.11:9090", "rules": recorded}}

    def run(command: str) -> Result:
        for key, (rc, text) in answers.items():
            if key in command:
                return Result(rc, text, "" if rc == 0 else "urllib.error.URLError: <urlopen error [Errno 111] Connection refused>")
        raise AssertionError(command)
    return {v.id: v for v in monitoring.run(Node("kiln01", run), expect)}


def _recorded(name: str) -> str:
    return (HERE / name).read_text()


def test_monitoring_suite_passes_on_a_healthy_prometheus():
    found = _suite({"/api/v1/targets": (0, _recorded("api-targets-up.json")), "/api/v1/rules": (0, _recorded("api-rules.json"))})
    assert {k: v.severity for k, v in found.items()} == {"MONITORING_PROMETHEUS": "ok", "MONITORING_TARGETS": "ok",
                                                         "MONITORING_RULES": "ok"}


def test_monitoring_suite_fails_on_a_target_down_naming_it():
    found = _suite({"/api/v1/targets": (0, _recorded("api-targets-down.json")), "/api/v1/rules": (0, _recorded("api-rules.json"))})
    assert found["MONITORING_TARGETS"].failed
    assert "node kiln02 (10.213.0.12:9100)" in found["MONITORING_TARGETS"].message
    assert "connection refused" in found["MONITORING_TARGETS"].message


def test_monitoring_suite_fails_on_missing_or_broken_rules_and_a_silent_prometheus():
    rules = json.loads(_recorded("api-rules.json"))
    rules["data"]["groups"][0]["rules"] = rules["data"]["groups"][0]["rules"][:5]
    rules["data"]["groups"][0]["rules"][0].update(health="err", lastError="many-to-many matching not allowed")
    found = _suite({"/api/v1/targets": (0, _recorded("api-targets-up.json")), "/api/v1/rules": (0, json.dumps(rules))})
    assert found["MONITORING_RULES"].failed and "5 of kiln's" in found["MONITORING_RULES"].message
    assert "many-to-many" in found["MONITORING_RULES"].message
    found = _suite({"/api/v1/targets": (1, ""), "/api/v1/rules": (1, "")})
    assert list(found) == ["MONITORING_PROMETHEUS"] and found["MONITORING_PROMETHEUS"].failed
    assert "Connection refused" in found["MONITORING_PROMETHEUS"].message


def test_nvidias_dcgm_exporter_runs_with_kilns_counters_address_and_auth(tmp_path):
    cluster = _cluster(tmp_path, versions='  dcgm_exporter: "4.2.3-4.1.3-1"\n')
    dropin = conf.dcgm_exporter_dropin(cluster.hosts["gpu01"])
    assert "ExecStart=\nExecStart=/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/kiln-counters.csv " in dropin
    assert f"-a {cluster.hosts['gpu01'].address}:9400 --web-config-file /etc/prometheus/kiln-web.yml" in dropin
    assert "--xid-count-window-size 300000" in dropin


# --- kiln's job summary (EpilogSlurmctld): the job's GPUs from scontrol, one PromQL over them ----------------

SHOW_JOB = """JobId=42 JobName=train
   UserId=alice(2101) GroupId=vision(2001) MCS_label=N/A
   JobState=COMPLETED Reason=None Dependency=(null)
   RunTime=00:02:00 TimeLimit=UNLIMITED TimeMin=N/A
   SubmitTime=2026-12-02T10:20:00 EligibleTime=2026-12-02T10:20:00
   StartTime=2026-12-02T10:20:01 EndTime=2026-12-02T10:22:01 Deadline=N/A
   NodeList=kiln[02-03]
   NumNodes=2 NumCPUs=2 NumTasks=2 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
   TRES=cpu=2,mem=1G,node=2,billing=2,gres/gpu=3,gres/gpu:h100=3
     Nodes=kiln02 CPU_IDs=0 Mem=512 GRES=gpu:h100:2(IDX:0-1)
     Nodes=kiln03 CPU_IDs=0 Mem=512 GRES=gpu:h100:1(IDX:3)
   MinCPUsNode=1 MinMemoryNode=512M MinTmpDiskNode=0
"""


def test_job_summary_reads_the_jobs_gpus_and_asks_one_query():
    from checks import job_summary
    info = job_summary.parse_job(SHOW_JOB)
    assert info["gpus"] == {"kiln02": [0, 1], "kiln03": [3]}
    assert info["end"] - info["start"] == 120
    q = job_summary.query("DCGM_FI_DEV_GPU_UTIL", info["gpus"], 120)
    assert q == ('avg((avg_over_time(DCGM_FI_DEV_GPU_UTIL{node="kiln02"}[120s]) * on(node, UUID) '
                 'kiln_gpu_device_info{node="kiln02",minor=~"0|1"}) or '
                 '(avg_over_time(DCGM_FI_DEV_GPU_UTIL{node="kiln03"}[120s]) * on(node, UUID) '
                 'kiln_gpu_device_info{node="kiln03",minor=~"3"}))')
    text = job_summary.summary(63.25, 40.0, info["gpus"], 120, "gr_engine_active")
    from kiln.usage.sacct import admin_util
    assert admin_util(text) == 63.2
    assert text == "kiln:gpu_util=63.2,gpu_mem_util=40.0,gpus=3,seconds=120,util_by=gr_engine_active"
    assert job_summary.parse_job("JobId=7 JobName=x\n   JobState=PENDING Reason=None\n")["gpus"] == {}
    with pytest.raises(ValueError):
        job_summary.query("X", {'a"}or vector(1)': [0]}, 10)


@needs_promtool
def test_job_summary_query_is_valid_promql(tmp_path):
    from checks import job_summary
    q = job_summary.query("DCGM_FI_DEV_GPU_UTIL", {"kiln02": [0, 1], "kiln03": [3]}, 120)
    rules = {"groups": [{"name": "q", "rules": [{"record": "kiln:job_util", "expr": q}]}]}
    (tmp_path / "r.yml").write_text(yaml.safe_dump(rules))
    out = subprocess.run([PROMTOOL, "check", "rules", str(tmp_path / "r.yml")], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_target_not_scraped_yet_is_waited_for_not_called_down(tmp_path):
    """Right after a deploy adds a target, Prometheus lists it with health "unknown" until its first scrape:
    the real command (Python on the node) asks again until it is scraped, within one scrape interval."""
    import http.server
    import subprocess
    import threading

    from checks import monitoring
    from checks.node import Result

    up = json.loads(_recorded("api-targets-up.json"))
    fresh = json.loads(_recorded("api-targets-up.json"))
    fresh["data"]["activeTargets"][0].update(health="unknown", lastError="")
    answers = [json.dumps(fresh), json.dumps(fresh), json.dumps(up)]
    asked = []

    class Prometheus(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            asked.append(self.headers.get("Authorization"))
            body = (answers.pop(0) if len(answers) > 1 else answers[0]).encode()
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Prometheus)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    password = tmp_path / "pw"
    password.write_text("s3cret\n")
    try:
        mon = {"prometheus": f"127.0.0.1:{server.server_port}", "url": f"http://127.0.0.1:{server.server_port}"}
        command = monitoring.ask_targets(mon, 10).replace(monitoring.PASSWORD, str(password))
        out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert len(asked) == 3 and asked[0] == "Basic " + __import__("base64").b64encode(b"kiln:s3cret").decode()
        assert monitoring.targets_down(json.loads(out.stdout)) == []
        # never scraped within the bound: it is reported, with what Prometheus says of it
        answers[:] = [json.dumps(fresh)]
        command = monitoring.ask_targets(mon, 3).replace(monitoring.PASSWORD, str(password))
        out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=30)
        expect = {"monitoring": {"prometheus": "x", "rules": 0}}
        found = {v.id: v for v in monitoring.run(
            monitoring.Node("kiln01", lambda c: Result(0, out.stdout if "targets" in c else '{"status": "success", "data": {"groups": []}}', "")),
            expect)}
        assert found["MONITORING_TARGETS"].failed and "unknown" in found["MONITORING_TARGETS"].message
    finally:
        server.shutdown()


def test_kiln_node_prom_names_the_hcas_the_fabric_alerts_watch():
    """A node whose inventory names its HCAs gets one series each; the fabric alerts watch those ports only
    (promtool: tests/unit/monitoring/rules_test.yml), as the node's fabric check does."""
    from kiln.inventory import load_cluster
    cluster = load_cluster(REPO / "tests" / "inventories" / "fabric")
    named = [h for h in cluster.hosts.values() if h.fabric.type in ("infiniband", "roce") and h.fabric.hcas]
    assert named
    for host in named:
        text = conf.node_textfile(cluster, host)
        for hca in host.fabric.hcas:
            assert f'kiln_node_fabric_hca_expected{{device="{hca}"}} 1' in text
    for host in cluster.hosts.values():
        if host.fabric.type == "none":
            assert "kiln_node_fabric_hca_expected" not in conf.node_textfile(cluster, host)
