"""The logs role as a deploy finds a host (kiln_log_shipping): the log host (ctl1, the first monitoring host)
listens on its own address with its certificate and keeps a retention timer; every host's uploader sends to it
with its certificate and the CA alone; a deploy that finds all as it left it changes nothing; a renewed
certificate restarts the uploader and the receiver (systemd hands them their files only at their start);
turned off, both are stopped and kiln's drop-ins removed."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kiln.tls import ClusterTls, new_host_certificate
from roles import logs
from roles.snapshot import FileState, UnitState
from tests.plan.facts import fresh
from tests.plan.harness import PLAN_CA, SECRETS, EveryHost, converged, plan_host
from tests.plan.test_roles_plan import cluster_for

UNITS = ("systemd-journal-upload.service", "systemd-journal-remote.socket", "systemd-journal-remote.service",
         "kiln-log-retention.timer")


def _written(plan: dict) -> set[str]:
    return {name for name, commands in plan.items() if commands and name.startswith("logs: ")}


def _deployed(cluster, name: str, monkeypatch):
    first, ctx = plan_host(cluster, name, "debian12", fresh("debian12"), monkeypatch, with_context=True)
    snap = converged(first, ctx, fresh("debian12"))
    snap.packages[logs.PACKAGE] = "252.39-1~deb12u1"  # installed unpinned: the OS's version
    for path in (logs.UPLOAD_DROPIN, logs.REMOTE_DROPIN, logs.SOCKET_DROPIN):
        snap.files[path.rsplit("/", 1)[0]] = FileState("directory", "755", "root", "root", "")
    for unit in UNITS if name == "ctl1" else UNITS[:1]:
        snap.units[unit] = UnitState("loaded", "active", "enabled")
    return first, snap


def test_a_host_that_is_no_longer_the_log_host_stops_its_receiver(monkeypatch):
    """gpu01 received once (the package's socket listens on every address once kiln's drop-in is gone)."""
    _, snap = _deployed(cluster_for("debian12"), "gpu01", monkeypatch)
    snap.units["systemd-journal-remote.socket"] = UnitState("loaded", "active", "enabled")
    snap.files[logs.SOCKET_DROPIN] = FileState("regular file", "644", "root", "root", "0" * 40)
    plan = dict(plan_host(cluster_for("debian12"), "gpu01", "debian12", snap, monkeypatch))
    assert _written(plan) == {"logs: no receiver here (not the log host)", f"logs: no {logs.SOCKET_DROPIN}"}
    assert plan["logs: no receiver here (not the log host)"][0].endswith(
        "then systemctl disable --now systemd-journal-remote.socket; fi")


@pytest.mark.proves("monitoring", tier="plan")
def test_the_log_host_listens_on_its_address_and_every_host_sends_to_it_with_its_certificate(monkeypatch):
    cluster = cluster_for("debian12")
    ctl_plan, ctl_ctx = plan_host(cluster, "ctl1", "debian12", fresh("debian12"), monkeypatch, with_context=True)
    gpu_plan, gpu_ctx = plan_host(cluster, "gpu01", "debian12", fresh("debian12"), monkeypatch, with_context=True)
    ctl, gpu = dict(ctl_plan), dict(gpu_plan)
    assert ctl["logs: systemd-journal-remote"] and gpu["logs: systemd-journal-remote"]  # the package, on both
    text = lambda ctx: "\n".join(f.content.decode() for f in ctx.files if not f.secret)  # noqa: E731
    assert "ListenStream=10.0.0.2:19532" in text(ctl_ctx) and "--listen-https=-3 --split-mode=host" in text(ctl_ctx)
    assert "--vacuum-time=180d --vacuum-size=50G" in text(ctl_ctx) and ctl["logs: kiln-log-retention.timer enabled and running"]
    for plan, ctx in ((ctl, ctl_ctx), (gpu, gpu_ctx)):
        assert "--url=https://10.0.0.2:19532" in text(ctx)
        assert "LoadCredential=kiln-tls.key:/etc/prometheus/kiln-tls.key" in text(ctx)
        assert "--trust=${CREDENTIALS_DIRECTORY}/kiln-ca.crt" in text(ctx) and "StartLimitIntervalSec=0" in text(ctx)
        assert plan["logs: systemd-journal-upload enabled and running"]
    assert "ListenStream" not in text(gpu_ctx) and "kiln-log-retention" not in text(gpu_ctx)
    # the uploader's account comes first, with its fixed ID, before any package could make one
    accounts = "\n".join(c for n, cmds in gpu.items() if n.startswith("base: service accounts") for c in cmds)
    assert "-u 982" in accounts and "-g 982 systemd-journal-upload" in accounts, accounts


@pytest.mark.parametrize("case", ["unchanged", "renewed certificate", "turned off"])
def test_a_renewed_certificate_restarts_both_ends_and_turning_it_off_stops_them(case, monkeypatch):
    cluster = cluster_for("debian12")
    for name in ("ctl1", "gpu01"):
        _, snap = _deployed(cluster, name, monkeypatch)
        secrets, now = SECRETS, cluster
        if case == "renewed certificate":
            secrets = replace(SECRETS, tls=ClusterTls(SECRETS.tls.ca, EveryHost(
                {"*": new_host_certificate(*PLAN_CA, "plan", ["10.0.0.1"], 364)})))  # made another day
        if case == "turned off":
            now = cluster_for("debian12", log_shipping=False)
        plan = dict(plan_host(now, name, "debian12", snap, monkeypatch, secrets=secrets))
        written = _written(plan)
        if case == "unchanged":
            assert written == set(), (name, written)
        elif case == "renewed certificate":
            expected = {"logs: restart systemd-journal-upload (if its drop-in or certificate changed)"}
            if name == "ctl1":
                expected.add("logs: restart the receiver (if its drop-in or certificate changed)")
            assert written == expected, (name, written)
        else:
            assert "logs: uploader and receiver stopped and disabled (no log shipping)" in written
            removed = {c for n in written if n.startswith("logs: no ") for c in plan[n]}
            assert f"rm -f {logs.UPLOAD_DROPIN}" in removed, removed
            assert (f"rm -f {logs.SOCKET_DROPIN}" in removed) is (name == "ctl1"), removed
            assert "logs: systemd-journal-upload enabled and running" not in plan


@pytest.mark.proves("base", tier="plan")
def test_auditd_runs_with_kiln_rules_outside_containers_and_is_stopped_when_turned_off(monkeypatch):
    cluster = cluster_for("debian12")
    vm = dict(plan_host(cluster, "gpu01", "debian12", fresh("debian12"), monkeypatch))
    container = dict(plan_host(cluster, "gpu01", "debian12", fresh("debian12"), monkeypatch, in_container=True))
    for plan in (vm, container):  # the package and the rules, kept from starting at the install
        assert plan["audit: auditd kept stopped until kiln configures it"] == ["systemctl mask auditd.service"]
        assert plan["audit: kiln's audit rules"][0] == "upload /etc/audit/rules.d/kiln.rules"
    assert vm["audit: auditd enabled and running"][-1] == "systemctl start auditd.service"
    assert "audit: auditd enabled and running" not in container  # the host's kernel audits there
    # a deployed node whose rules changed loads them; turned off, auditd stops and the rules go
    first, ctx = plan_host(cluster, "gpu01", "debian12", fresh("debian12"), monkeypatch, with_context=True)
    snap = converged(first, ctx, fresh("debian12"))
    snap.packages["auditd"] = "1:3.0.9-1"
    snap.units["auditd.service"] = UnitState("loaded", "active", "enabled")
    assert not any(dict(plan_host(cluster, "gpu01", "debian12", snap, monkeypatch))[n] for n in
                   ("audit: kiln's audit rules", "audit: load kiln's rules (if they changed)"))
    snap.files["/etc/audit/rules.d/kiln.rules"] = replace(snap.files["/etc/audit/rules.d/kiln.rules"], sha1="0" * 40)
    again = dict(plan_host(cluster, "gpu01", "debian12", snap, monkeypatch))
    assert again["audit: load kiln's rules (if they changed)"] == ["augenrules --load"]
    off = dict(plan_host(cluster_for("debian12", audit=False), "gpu01", "debian12", snap, monkeypatch))
    assert off["audit: auditd stopped and disabled (kiln_audit off)"] == ["systemctl disable --now auditd.service"]
    assert off["audit: no kiln audit rules"] == ["rm -f /etc/audit/rules.d/kiln.rules"]
