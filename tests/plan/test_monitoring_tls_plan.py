"""TLS on the monitoring listeners, as a deploy finds a host (``kiln_monitoring_tls``): a deploy that finds
everything as it left it changes nothing; a renewed certificate is written (certificate, key, kiln-tls.prom)
and restarts nothing, as the listeners read it anew on each connection; turning TLS on restarts each
listener, which decides between HTTP and HTTPS only at its start."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kiln.tls import ClusterTls, new_host_certificate
from roles.snapshot import UnitState
from tests.plan.facts import fresh
from tests.plan.harness import SECRETS, PLAN_CA, EveryHost, converged, plan_host
from tests.plan.test_roles_plan import cluster_for

LISTENERS = ("prometheus-node-exporter", "prometheus", "prometheus-alertmanager")
WRITES = ("monitoring: this host's certificate for its listeners", "monitoring: this host's key for its listeners",
          "monitoring: kiln-tls.prom (when the certificate expires)")


def _restarts(plan: dict) -> set[str]:
    return {s for s in LISTENERS if plan[f"monitoring: restart {s} (if its command line changed)"]}


def _deployed(cluster, monkeypatch):
    """The monitoring host (ctl1) as ``cluster``'s deploy left it: its files, packages and running daemons."""
    first, ctx = plan_host(cluster, "ctl1", "debian12", fresh("debian12"), monkeypatch, with_context=True)
    snap = converged(first, ctx, fresh("debian12"))
    for unit in LISTENERS:
        snap.units[f"{unit}.service"] = UnitState("loaded", "active", "enabled")
    return snap


@pytest.mark.parametrize("case", ["unchanged", "renewed certificate", "TLS turned on"])
def test_a_renewed_certificate_restarts_nothing_and_turning_tls_on_restarts_every_listener(case, monkeypatch):
    cluster = cluster_for("debian12")
    assert cluster.setting("monitoring_tls")  # the default
    before = cluster_for("debian12", monitoring_tls=False) if case == "TLS turned on" else cluster
    snap = _deployed(before, monkeypatch)
    secrets = SECRETS
    if case == "renewed certificate":
        secrets = replace(SECRETS, tls=ClusterTls(SECRETS.tls.ca, EveryHost(
            {"*": new_host_certificate(*PLAN_CA, "plan", ["10.0.0.1"], 364)})))  # made another day
    plan = dict(plan_host(cluster, "ctl1", "debian12", snap, monkeypatch, secrets=secrets))
    written = {op for op in WRITES if plan[op]}
    if case == "unchanged":
        assert not written and not _restarts(plan), (written, _restarts(plan))
    elif case == "renewed certificate":
        assert written == set(WRITES) and not _restarts(plan), (written, _restarts(plan))
        assert not plan["monitoring: web config (basic auth and TLS of every listener)"]
    else:
        assert written == set(WRITES) and _restarts(plan) == set(LISTENERS), (written, _restarts(plan))
