"""The cluster CA and the hosts' certificates (kiln/tls.py): made once, kept, made anew only when due; and
the monitoring listeners as kiln configures them, on the real Prometheus and Alertmanager of this machine:
HTTPS only with the host's certificate, which kiln's readers and MONITORING_TLS trust through the cluster CA
alone, and which MONITORING_TLS fails on plain HTTP, another CA's certificate or another address's."""

from __future__ import annotations

import datetime
import os
import shutil
import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from checks import monitoring
from checks.alertmanager import AlertmanagerError, request
from checks.node import local_node
from kiln import tls
from roles import monitoring_config as conf
from tests.ports import free_port

NOW = datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc)
HOSTS = {"ctl1": ["10.0.0.1"], "gpu01": ["10.0.0.11"]}


def _made(tmp_path: Path, hosts=None, now=NOW, create=True, days=365, renew=30) -> tls.ClusterTls:
    return tls.cluster_tls("plan", tmp_path, hosts or HOSTS, days, renew, create=create, now=now)


def test_the_ca_and_each_hosts_certificate_are_made_once_kept_private_and_read_back(tmp_path):
    first = _made(tmp_path)
    assert oct((tmp_path / "tls").stat().st_mode & 0o777) == "0o700"
    files = sorted(p.relative_to(tmp_path / "tls").as_posix() for p in (tmp_path / "tls").rglob("*") if p.is_file())
    assert files == ["ca.crt", "ca.key", "hosts/ctl1.crt", "hosts/ctl1.key", "hosts/gpu01.crt", "hosts/gpu01.key"]
    assert all((tmp_path / "tls" / f).stat().st_mode & 0o077 == 0 for f in files)
    assert _made(tmp_path) == first  # a second deploy changes nothing
    gpu = first.host("gpu01")
    assert tls.why_renew(gpu, first.ca, "gpu01", ["10.0.0.11"], 30, NOW) is None
    assert tls.expires(gpu.cert) - NOW > datetime.timedelta(days=364)
    assert "key masked" in repr(gpu) and "PRIVATE" not in repr(first)
    with pytest.raises(tls.TlsError, match="no TLS certificate for host 'cpu09'"):
        first.host("cpu09")


def test_a_certificate_is_made_anew_when_due_and_only_then(tmp_path):
    first = _made(tmp_path)
    moved = _made(tmp_path, {"ctl1": ["10.0.0.1"], "gpu01": ["10.0.0.99"]})  # the inventory moved gpu01
    assert moved.host("ctl1") == first.host("ctl1") and moved.host("gpu01") != first.host("gpu01")
    assert tls.why_renew(first.host("gpu01"), first.ca, "gpu01", ["10.0.0.99"], 30, NOW) == \
        "names other names or addresses than the inventory's"
    later = NOW + datetime.timedelta(days=340)  # 25 days left: inside the 30-day renewal
    assert tls.why_renew(moved.host("ctl1"), first.ca, "ctl1", ["10.0.0.1"], 30, later) == \
        "expires in 25 days (renewed 30 days ahead)"
    renewed = _made(tmp_path, {"ctl1": ["10.0.0.1"], "gpu01": ["10.0.0.99"]}, now=later)
    assert renewed.host("ctl1") != first.host("ctl1") and renewed.ca == first.ca
    other = tls.new_ca("other", NOW)
    assert tls.why_renew(tls.new_host_certificate(*other, "ctl1", ["10.0.0.1"], 365, NOW), first.ca, "ctl1",
                         ["10.0.0.1"], 30, NOW) == "not signed by the cluster's CA"
    swapped = tls.HostCertificate(first.host("ctl1").cert, first.host("gpu01").key)
    assert tls.why_renew(swapped, first.ca, "ctl1", ["10.0.0.1"], 30, NOW) == "its key is another certificate's"
    assert tls.why_renew(tls.HostCertificate(b"junk", b"junk"), first.ca, "ctl1", [], 30, NOW) == "unreadable"


def test_a_dry_run_writes_nothing_and_half_a_ca_is_refused(tmp_path):
    made_up = _made(tmp_path / "a", create=False)
    assert set(made_up.hosts) == set(HOSTS) and not (tmp_path / "a" / "tls").exists()
    kept = _made(tmp_path / "a")
    # kiln patch and kiln drift read what is kept, due or moved, and never make up what a deploy would renew
    later = NOW + datetime.timedelta(days=340)
    assert _made(tmp_path / "a", {"ctl1": ["10.0.0.1"], "gpu01": ["10.0.0.99"]}, now=later, create=False) == kept
    _made(tmp_path / "b")
    (tmp_path / "b" / "tls" / "ca.key").unlink()
    with pytest.raises(tls.TlsError, match="only one of ca.crt and ca.key"):
        _made(tmp_path / "b")


# --- the listeners as kiln configures them, on this machine's real Prometheus and Alertmanager ------------

PROMETHEUS, ALERTMANAGER = shutil.which("prometheus"), shutil.which("prometheus-alertmanager")
needs_prometheus = pytest.mark.skipif(PROMETHEUS is None or ALERTMANAGER is None, reason=(
    "needs Prometheus and Alertmanager (Debian's prometheus and prometheus-alertmanager; .ci/run installs them)"))


def _files(tmp_path: Path, cluster_tls: tls.ClusterTls, name: str, tls_on: bool = True, password: str = "s3cret") -> Path:
    """kiln's web config for ``name`` with its certificate and key, in ``tmp_path`` (the paths kiln uses on
    hosts replaced by these)."""
    (tmp_path / "ca.crt").write_bytes(cluster_tls.ca)
    (tmp_path / "host.crt").write_bytes(cluster_tls.host(name).cert)
    (tmp_path / "host.key").write_bytes(cluster_tls.host(name).key)
    (tmp_path / "pw").write_text(password + "\n")
    web = conf.web_config(password, tls_on).replace(conf.TLS_CERT, str(tmp_path / "host.crt")) \
        .replace(conf.TLS_KEY, str(tmp_path / "host.key"))
    (tmp_path / "web.yml").write_text(web)
    return tmp_path / "web.yml"


def _serve(command: list[str], port: int) -> subprocess.Popen:
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"{command[0]} never listened on {port}")


def _prometheus(tmp_path: Path, web: Path, port: int) -> subprocess.Popen:
    (tmp_path / "prometheus.yml").write_text("global: {scrape_interval: 15s}\n")
    return _serve([PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}", f"--web.listen-address=127.0.0.1:{port}",
                   f"--web.config.file={web}", f"--storage.tsdb.path={tmp_path / 'data'}"], port)


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


def _tls_verdict(ca: Path, listeners: list) -> monitoring.Verdict:
    found = monitoring.run(local_node("ctl1"), {"monitoring_tls": {"ca_file": str(ca), "listeners": listeners}})
    assert [v.id for v in found] == ["MONITORING_TLS"]
    return found[0]


@needs_prometheus
def test_prometheus_and_alertmanager_serve_only_tls_that_kilns_readers_trust_through_the_ca_alone(tmp_path):
    cluster_tls = tls.cluster_tls("plan", tmp_path / "secrets", {"ctl1": ["127.0.0.1"]}, 365, 30)
    web = _files(tmp_path, cluster_tls, "ctl1")
    port, am_port = free_port(), free_port()
    prometheus = _prometheus(tmp_path, web, port)
    (tmp_path / "am.yml").write_text("route: {receiver: none}\nreceivers: [{name: none}]\n")
    alertmanager = _serve([ALERTMANAGER, f"--config.file={tmp_path / 'am.yml'}", f"--web.listen-address=127.0.0.1:{am_port}",
                           f"--web.config.file={web}", f"--storage.path={tmp_path / 'am'}",
                           "--cluster.listen-address="], am_port)
    try:
        verdict = _tls_verdict(tmp_path / "ca.crt", [["prometheus", "127.0.0.1", port],
                                                     ["alertmanager", "127.0.0.1", am_port]])
        assert not verdict.failed and verdict.message.startswith("2 listener(s) refuse plain HTTP and serve TLS"), verdict
        # kiln's reader (kiln alerts, kiln patch's silences, kiln-remediate, kiln-job-summary): the CA, the password
        url = f"https://127.0.0.1:{port}/api/v1/status/buildinfo"
        assert request(url, "s3cret", ca_file=str(tmp_path / "ca.crt"))["status"] == "success"
        assert request(f"https://127.0.0.1:{am_port}/api/v2/status", "s3cret", ca_file=str(tmp_path / "ca.crt"))["cluster"]
        with pytest.raises(AlertmanagerError, match="no CA file"):
            request(url, "s3cret")
        with pytest.raises(AlertmanagerError, match="CERTIFICATE_VERIFY_FAILED"):  # the system's CAs do not vouch
            request(url, "s3cret", ca_file=ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt")
        with pytest.raises(AlertmanagerError, match="HTTP 401"):
            request(url, "wrong", ca_file=str(tmp_path / "ca.crt"))
        # the monitoring suite's own question to Prometheus, over HTTPS
        mon = {"prometheus": f"127.0.0.1:{port}", "url": f"https://127.0.0.1:{port}", "ca_file": str(tmp_path / "ca.crt")}
        out = local_node("ctl1").run(monitoring.ask(mon, "/api/v1/status/buildinfo").replace(monitoring.PASSWORD,
                                                                                          str(tmp_path / "pw")))
        assert out.rc == 0 and '"status":"success"' in out.stdout.replace(" ", ""), out
        # the isolation suite's probe (a team's user, no credentials): refused with 401 over TLS it trusts;
        # a listener whose certificate the CA did not sign is said to be untrusted, never passed as unreachable
        other = tls.cluster_tls("evil", tmp_path / "evil", {"x": ["127.0.0.1"]}, 365, 30)
        (tmp_path / "evil-ca.crt").write_bytes(other.ca)
        from checks.isolation import _HTTP
        urls = [f"https://127.0.0.1:{port}/api/v1/query?query=up", f"https://127.0.0.1:{am_port}/api/v2/alerts"]
        for ca, expected in ((tmp_path / "ca.crt", "401"), (tmp_path / "evil-ca.crt", "untrusted")):
            said = subprocess.run(["python3", "-c", _HTTP, str(ca), *urls], capture_output=True, text=True, timeout=60)
            assert said.stdout.splitlines() == [f"{expected} {u}" for u in urls], said
        # plain HTTP is answered with a refusal, never with data or a password prompt
        with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
            s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            assert monitoring.plain_answer(s.recv(200).decode("latin-1")) == 400
    finally:
        _stop(prometheus)
        _stop(alertmanager)


@needs_prometheus
@pytest.mark.parametrize("fault", ["plain HTTP", "another CA's certificate", "another address's certificate",
                                   "nothing listening"])
def test_monitoring_tls_fails_on_the_fault_it_targets(tmp_path, fault):
    ours = tls.cluster_tls("plan", tmp_path / "ours", {"ctl1": ["127.0.0.1"]}, 365, 30)
    served = {"another CA's certificate": tls.cluster_tls("evil", tmp_path / "evil", {"ctl1": ["127.0.0.1"]}, 365, 30),
              "another address's certificate": tls.cluster_tls("plan", tmp_path / "ours", {"ctl1": ["10.9.9.9"]}, 365,
                                                               30)}.get(fault, ours)
    web = _files(tmp_path, served, "ctl1", tls_on=fault != "plain HTTP")
    (tmp_path / "ca.crt").write_bytes(ours.ca)
    port = free_port()
    prometheus = _prometheus(tmp_path, web, port) if fault != "nothing listening" else None
    try:
        verdict = _tls_verdict(tmp_path / "ca.crt", [["prometheus", "127.0.0.1", port]])
    finally:
        if prometheus:
            _stop(prometheus)
    assert verdict.failed, verdict
    expected = {"plain HTTP": f"prometheus (127.0.0.1:{port}) answered plain HTTP (status 401)",
                "another CA's certificate": "gave no TLS with a certificate of the cluster CA for its address "
                                            "(SSLCertVerificationError",
                "another address's certificate": "IP address mismatch",
                "nothing listening": f"prometheus (127.0.0.1:{port}) does not answer"}[fault]
    assert expected in verdict.message, verdict.message


def test_the_tls_judge_reads_each_answer():
    now = 1_000_000.0
    good = {"name": "node_exporter", "host": "10.0.0.1", "port": 9100, "tls": "TLSv1.3", "not_after": now + 10 * 86400,
            "plain": "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"}
    assert monitoring.tls_findings([good], now) == ([], 10.0)
    assert monitoring.tls_findings([{**good, "plain": "", "plain_error": "ConnectionResetError: reset"}], now)[0] == []
    found, _ = monitoring.tls_findings([{**good, "plain": "HTTP/1.1 200 OK\r\n"}], now)
    assert found == ["node_exporter (10.0.0.1:9100) answered plain HTTP (status 200)"]
    assert monitoring.plain_answer("\x15\x03\x01\x00\x02\x02") is None  # a TLS alert is no HTTP answer


def test_the_testbeds_dcgm_exporter_stand_in_switches_to_tls_with_the_web_config_as_the_real_one(tmp_path, monkeypatch):
    """The stand-in reads kiln's web config on each connection: plain HTTP (basic auth) before kiln turns TLS
    on, then HTTPS only with the certificate named there, refusing plain HTTP as the real web toolkit does."""
    import importlib.machinery
    import importlib.util
    import threading

    from kiln.testbed.simulate import SIMULATORS
    loader = importlib.machinery.SourceFileLoader("sim_dcgm_exporter", str(SIMULATORS / "dcgm-exporter"))
    monkeypatch.syspath_prepend(str(SIMULATORS))
    sim = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(sim)
    cluster_tls = tls.cluster_tls("plan", tmp_path / "secrets", {"gpu01": ["127.0.0.1"]}, 365, 30)
    web = _files(tmp_path, cluster_tls, "gpu01", tls_on=False)
    monkeypatch.setattr(sim, "WEB_CONFIG", str(web))
    monkeypatch.setattr(sim, "exposition", lambda state, host: "DCGM_FI_DEV_GPU_TEMP{gpu=\"0\"} 35\n")
    monkeypatch.setattr(sim.simstate, "load", lambda: {})
    server = sim.Server(("127.0.0.1", 0), sim.Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        listeners = [["dcgm-exporter", "127.0.0.1", port]]
        assert "answered plain HTTP (status 401)" in _tls_verdict(tmp_path / "ca.crt", listeners).message
        _files(tmp_path, cluster_tls, "gpu01", tls_on=True)  # kiln deploy turns TLS on: no restart
        verdict = _tls_verdict(tmp_path / "ca.crt", listeners)
        assert not verdict.failed, verdict
        import base64  # the exposition is not JSON: read it as Prometheus would
        import urllib.request
        context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        req = urllib.request.Request(f"https://127.0.0.1:{port}/metrics",
                                     headers={"Authorization": "Basic " + base64.b64encode(b"kiln:s3cret").decode()})
        with urllib.request.urlopen(req, context=context, timeout=10) as r:
            assert b"DCGM_FI_DEV_GPU_TEMP" in r.read()
    finally:
        server.shutdown()


# --- validation of the settings of encryption in transit ---------------------------------------------------

@pytest.mark.parametrize("settings, slurm, expected", [
    ("kiln_tls_renew_days: 90\nkiln_tls_certificate_days: 60\n", None,
     "kiln_tls_renew_days: 90 is not less than kiln_tls_certificate_days (60)"),
    ("kiln_slurm_tls: true\n", None, "kiln_slurm_tls: Slurm's own TLS (TLSType=tls/s2n) needs Slurm 25.05 or later, "
                                     "and this cluster runs 22.05.8-4+deb12u3 (Slurm 22.05)"),
    ("kiln_slurm_tls: true\n", "25.05.2-1", "kiln_slurm_tls: Slurm 25.05 has TLS (tls/s2n), but kiln does not "
                                            "configure it yet"),
])
def test_tls_settings_kiln_cannot_keep_are_refused_naming_file_and_key(tmp_path, settings, slurm, expected):
    import re as re_

    from kiln.inventory import validate
    from tests.unit.test_monitoring import _inventory
    root = _inventory(tmp_path, settings)
    if slurm:
        versions = root / "group_vars" / "all" / "versions.yml"
        versions.write_text(re_.sub(r'(?m)^  slurm: ".*"$', f'  slurm: "{slurm}"', versions.read_text()))
    cluster, errors = validate(root)
    assert cluster is None and any(expected in str(e) and "group_vars/all/monitoring.yml" in str(e) for e in errors), \
        [str(e) for e in errors]
