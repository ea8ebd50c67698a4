"""The monitoring daemons never run with their packages' defaults: Debian starts a daemon at its install
(every address, no password, Prometheus scraping its own default targets), so kiln masks the units of
packages it is about to install and unmasks each when it starts it with kiln's files."""

from __future__ import annotations

from roles.snapshot import UnitState
from tests.plan.facts import fresh
from tests.plan.harness import plan_host
from tests.plan.test_rdma_plan import commands
from tests.plan.test_roles_plan import MONITORING, cluster_for

UNITS = ("prometheus-node-exporter.service", "prometheus.service", "prometheus-alertmanager.service")


def test_fresh_daemons_are_masked_before_their_install_and_unmasked_when_kiln_starts_them(monkeypatch):
    text = commands(plan_host(cluster_for("debian12"), "ctl1", "debian12", fresh("debian12"), monkeypatch))
    mask = text.index("systemctl mask " + " ".join(UNITS))
    assert mask < text.index("apt-get install -y -q --no-install-recommends --allow-downgrades "
                             "-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold prometheus-node-exporter")


def test_a_masked_daemon_is_unmasked_before_it_is_enabled_and_one_installed_is_left_alone(monkeypatch):
    snap = fresh("debian12")
    versions = dict(zip(("prometheus", "prometheus-alertmanager", "prometheus-node-exporter"), MONITORING["debian12"]))
    snap.packages.update(versions, auditd="1:3.0.9-1")  # the audit role's daemon, installed too
    for unit in UNITS:
        snap.units[unit] = UnitState("masked", "inactive", "masked")
    text = commands(plan_host(cluster_for("debian12"), "ctl1", "debian12", snap, monkeypatch))
    assert "systemctl mask" not in text  # installed already: nothing to keep from starting
    for unit in UNITS:
        assert text.index(f"systemctl unmask {unit}") < text.index(f"systemctl enable {unit}") \
            < text.index(f"systemctl start {unit}"), unit


def test_a_first_deploy_unmasks_what_it_masked(monkeypatch):
    """The snapshot is read before the run: a unit masked by this run's install is unmasked by its start."""
    text = commands(plan_host(cluster_for("debian12"), "ctl1", "debian12", fresh("debian12"), monkeypatch))
    for unit in UNITS:
        assert text.index("systemctl mask ") < text.index(f"systemctl unmask {unit}") \
            < text.index(f"systemctl enable {unit}"), unit
