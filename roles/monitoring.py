"""The monitoring role: node_exporter on every host, Prometheus and Alertmanager on the ``monitoring``
group, kiln's alert rules, kiln's Slurm collector on the controller.

It runs only when the inventory has a ``monitoring`` group (``Host.monitored``). Defaults, in one place:

+ Packages from the OS at their pins, held: ``node_exporter`` (prometheus-node-exporter) on every host,
  ``prometheus`` and ``alertmanager`` (prometheus-alertmanager) on monitoring hosts. Debian 12 and
  Ubuntu only: Rocky 9's repositories (EPEL included) carry no Prometheus, and validation says so.
+ Every listener on the host's inventory address only (the cluster network), never 0.0.0.0:
  node_exporter :9100, Prometheus :9090, Alertmanager :9093 (its gossip port 9094 only between several
  monitoring hosts, otherwise off), dcgm-exporter :9400. Each asks for HTTP basic auth (user ``kiln``,
  the password generated into the secrets directory as ``monitoring.password``); the web config holds
  its bcrypt hash, /etc/prometheus/kiln-password (0640 root:prometheus) the password Prometheus sends.
+ ``kiln_monitoring_tls`` (on): each listener serves HTTPS only (TLS 1.2 or later) with its host's certificate
  of the cluster CA (kiln/tls.py: /etc/prometheus/kiln-tls.crt, its key 0640 root:prometheus, the CA in
  kiln-ca.crt), and Prometheus' scrapes and alerts, kiln-job-summary, kiln-remediate and kiln's readers trust
  that CA alone. kiln-tls.prom tells Prometheus when the certificate expires (KilnCertificateExpiresSoon).
+ node_exporter: the textfile collector reads ``kiln_check_textfile_dir`` (kiln.prom of the node checks,
  kiln-node.prom with the GPUs the node must have, kiln-slurm.prom of the Slurm collector), and the
  systemd collector reports the daemons kiln's alerts watch (slurmd, munge, ...).
+ Prometheus: scrape and evaluation every ``kiln_monitoring_scrape_seconds``; targets from the inventory
  in file_sd files (/etc/prometheus/kiln-targets/*.json: a node added is scraped after one deploy, no
  restart); retention ``kiln_monitoring_retention_days`` and ``kiln_monitoring_retention_gb``; kiln's
  rules (kiln/monitoring/alert_rules.py) at ``kiln_alert_thresholds``. ``promtool check rules``/``check config``
  and ``amtool check-config`` accept each file before it replaces the one in use (``validated_file``);
  a changed file is applied with a reload, a changed command line with a restart.
+ Alertmanager: alerts grouped by alert name; ``kiln_monitoring_receivers`` (webhooks, e-mail through
  ``kiln_monitoring_smtp``) each get every alert; with none, alerts stay visible in Alertmanager (and
  ``kiln alerts``).
+ dcgm-exporter (where the ``dcgm_exporter`` pin installs it): kiln's counters file
  (templates/monitoring/dcgm-counters.csv), the Xid count over 5 minutes, the node's address, basic auth
  (a drop-in over the package's command line).
+ kiln-job-summary (checks/job_summary.py) as slurmctld's PrologSlurmctld (keeps the job's GPUs in
  /var/lib/kiln/jobs) and EpilogSlurmctld on a monitored cluster with GPU nodes: each finished job's mean
  GPU utilization and memory use, from Prometheus, in its AdminComment. slurmctld reads both settings only
  at its start: a cluster that gains them is restarted by the deploy that adds them (slurm role).
+ The Slurm collector (checks/slurm_metrics.py) on slurm_controller hosts, every scrape interval, by a
  systemd timer.
"""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

from pyinfra.operations import server

from kiln.inventory.model import CONTROLLER, MONITORING
from kiln.monitoring.alerts import base_url
from kiln.shell import quote
from kiln.tls import expires
from roles import health
from roles import monitoring_config as conf
from roles.secret_files import JOB_SUMMARY_PASSWORD
from roles.slurm_config import job_summary
from roles.context import NodeContext, changed_any, when_changed
from roles.operations import (DAEMON_RELOAD, answers, kept_stopped_until_configured, logs_of, managed_directory, pinned_packages, service_restarted,
                              service_running, tcp_answers)

COLLECTOR = "/usr/local/sbin/kiln-slurm-metrics"
TEMPLATES = Path(str(files("templates"))) / "monitoring"
JOB_SUMMARY = "/usr/local/sbin/kiln-job-summary"
COLLECTOR_UNIT = """# Written by kiln (monitoring role): Slurm's state for node_exporter's textfile collector
[Unit]
Description=kiln: Slurm metrics for Prometheus (kiln-slurm.prom)
After=slurmctld.service

[Service]
Type=oneshot
ExecStart={collector} {directory}
Nice=10
TimeoutStartSec=120
"""
COLLECTOR_TIMER = """# Written by kiln (monitoring role)
[Unit]
Description=kiln: Slurm metrics every {seconds} s

[Timer]
OnBootSec=30s
OnUnitActiveSec={seconds}s
AccuracySec=1s

[Install]
WantedBy=timers.target
"""
NODE_EXPORTER_DEFAULTS = "/etc/default/prometheus-node-exporter"
PROMETHEUS_DEFAULTS = "/etc/default/prometheus"
ALERTMANAGER_DEFAULTS = "/etc/default/prometheus-alertmanager"


def _serves_monitoring(ctx: NodeContext) -> bool:
    return ctx.node.in_group(MONITORING)


def install(ctx: NodeContext) -> None:
    versions = ctx.cluster.versions
    packages = {"prometheus-node-exporter": versions["node_exporter"]}
    if _serves_monitoring(ctx):
        packages |= {"prometheus": versions["prometheus"], "prometheus-alertmanager": versions["alertmanager"]}
    # Debian starts each daemon at its install with the package's defaults (listening on every address
    # without a password; Prometheus scraping its own default targets, whose series, unlabelled by node,
    # outlive kiln's restart by five minutes): masked until configure starts them with kiln's files
    kept_stopped_until_configured(name="monitoring: kept stopped until kiln configures them", ctx=ctx,
                                  daemons={p: p + ".service" for p in packages})
    pinned_packages(name="monitoring: " + ", ".join(packages) + ", held", ctx=ctx, packages=packages)
    if ctx.node.in_group(CONTROLLER):
        health.install_package(ctx)  # the collector and the job summary read Slurm with its shared readers
        ctx.put(COLLECTOR, health.launcher("slurm_metrics", "kiln-slurm-metrics"), mode="755",
                name="monitoring: kiln-slurm-metrics (Slurm collector)")
        ctx.put(JOB_SUMMARY, health.launcher("job_summary", "kiln-job-summary"), mode="755",
                name="monitoring: kiln-job-summary (EpilogSlurmctld)")
        # Slurm runs a program without arguments: the prolog's own name
        ctx.put(JOB_SUMMARY + "-start", f"#!/bin/sh\nexec {JOB_SUMMARY} --start\n", mode="755",
                name="monitoring: kiln-job-summary-start (PrologSlurmctld)")


def configure(ctx: NodeContext) -> None:
    cluster, node = ctx.cluster, ctx.node
    textfiles = cluster.setting("check_textfile_dir")
    for directory in (textfiles, conf.CONF):
        ctx.watch_path(directory)
        managed_directory(name=f"monitoring: {directory}", ctx=ctx, path=directory, user="root", group="root", mode="755")
    tls = cluster.setting("monitoring_tls")
    if tls:
        _certificate(ctx, textfiles)
    web = ctx.put(conf.WEB_CONFIG, conf.web_config(ctx.secrets.monitoring_password, tls), mode="640",
                  group="prometheus", name="monitoring: web config (basic auth and TLS of every listener)")
    ctx.put(f"{textfiles}/{conf.NODE_TEXTFILE}", conf.node_textfile(cluster, node), mode="644",
            name="monitoring: kiln-node.prom (what the node must have)")
    args = ctx.put(NODE_EXPORTER_DEFAULTS, conf.node_exporter_defaults(cluster, node), mode="644",
                   name="monitoring: node_exporter's command line")
    # a listener reads its web config's users and certificate anew on each request, but whether it speaks
    # TLS only at its start: a changed web config (TLS turned on or off, a new password) restarts it
    _daemon(ctx, "prometheus-node-exporter", conf.NODE_EXPORTER_PORT, restart_on=[args, web], reload_on=[])
    if node.in_group(CONTROLLER):
        _collector(ctx, textfiles)
        if job_summary(cluster):
            _job_summary(ctx)
    if node.gpu_count and cluster.versions.get("dcgm_exporter"):
        _dcgm_exporter(ctx, web)
    if _serves_monitoring(ctx):
        _prometheus(ctx, web)


def _certificate(ctx: NodeContext, textfiles: str) -> None:
    """The cluster CA (what clients trust), this host's certificate and key for its listeners (the key the
    prometheus group's, as the web config), and when the certificate expires (kiln-tls.prom). Written before
    the web config that names them."""
    if ctx.secrets.tls is None:
        raise ValueError("kiln_monitoring_tls is on but the cluster's CA was not loaded (kiln/secrets.py)")
    mine = ctx.secrets.tls.host(ctx.node.name)
    ctx.put(conf.CA_FILE, ctx.secrets.tls.ca, mode="644", name="monitoring: the cluster CA's certificate")
    for op in (ctx.put(conf.TLS_CERT, mine.cert, mode="644", name="monitoring: this host's certificate for its listeners"),
               ctx.put(conf.TLS_KEY, mine.key, mode="640", group="prometheus", secret=True,
                       name="monitoring: this host's key for its listeners")):
        ctx.mark("host_certificate", op)  # the logs role restarts its services when they change
    ctx.put(f"{textfiles}/{conf.TLS_TEXTFILE}", conf.certificate_expiry_textfile(expires(mine.cert).timestamp()),
            mode="644", name="monitoring: kiln-tls.prom (when the certificate expires)")


def _dcgm_exporter(ctx: NodeContext, web) -> None:
    """NVIDIA's dcgm-exporter (the dcgm role installs and starts it) with kiln's counters, address and auth;
    restarted when either changed and it runs (it runs where the driver is loaded)."""
    ctx.watch_path("/etc/dcgm-exporter")
    managed_directory(name="monitoring: /etc/dcgm-exporter", ctx=ctx, path="/etc/dcgm-exporter", user="root",
                      group="root", mode="755")
    counters = ctx.put(conf.DCGM_COUNTERS, (TEMPLATES / "dcgm-counters.csv").read_text(), mode="644",
                       name="monitoring: dcgm-exporter's counters (kiln's)")
    dropin_dir = str(Path(conf.DCGM_EXPORTER_DROPIN).parent)
    ctx.watch_path(dropin_dir)
    managed_directory(name=f"monitoring: {dropin_dir}", ctx=ctx, path=dropin_dir, user="root", group="root", mode="755")
    dropin = ctx.put(conf.DCGM_EXPORTER_DROPIN, conf.dcgm_exporter_dropin(ctx.node), mode="644",
                     name="monitoring: dcgm-exporter's command line")
    server.shell(name="monitoring: reload systemd (if dcgm-exporter's drop-in changed)", commands=[DAEMON_RELOAD],
                 _if=when_changed(dropin))
    unit = ctx.watch_unit("nvidia-dcgm-exporter")
    server.shell(name="monitoring: restart dcgm-exporter (if its counters, command line or web config changed)",
                 commands=[f"systemctl try-restart {quote(unit)}"], _if=when_changed(counters, dropin, web))


def _prometheus(ctx: NodeContext, web) -> None:
    cluster, node = ctx.cluster, ctx.node
    ctx.put(conf.PASSWORD_FILE, ctx.secrets.monitoring_password + "\n", mode="640", group="prometheus", secret=True,
            name="monitoring: the password Prometheus sends")
    ctx.watch_path(conf.TARGETS)
    managed_directory(name=f"monitoring: {conf.TARGETS}", ctx=ctx, path=conf.TARGETS, user="root", group="root",
                      mode="755")
    for job, entries in conf.targets(cluster).items():
        ctx.put(f"{conf.TARGETS}/{job}.json", conf.targets_json(entries), mode="644",
                name=f"monitoring: {job} scrape targets (file_sd)")
    rules = ctx.put(conf.RULES, conf.rules_yml(cluster), mode="644", check="promtool check rules {}",
                    name="monitoring: kiln's alert rules (promtool check rules)")
    config = ctx.put(conf.PROMETHEUS_YML, conf.prometheus_yml(cluster), mode="640", group="prometheus",
                     check="promtool check config {}", name="monitoring: prometheus.yml (promtool check config)")
    args = ctx.put(PROMETHEUS_DEFAULTS, conf.prometheus_defaults(cluster, node), mode="644",
                   name="monitoring: Prometheus' command line")
    _daemon(ctx, "prometheus", conf.PROMETHEUS_PORT, restart_on=[args, web], reload_on=[rules, config])
    am_config = ctx.put(conf.ALERTMANAGER_YML, conf.alertmanager_yml(cluster), mode="640", group="prometheus",
                        check="amtool check-config {}", name="monitoring: alertmanager.yml (amtool check-config)")
    am_args = ctx.put(ALERTMANAGER_DEFAULTS, conf.alertmanager_defaults(cluster, node), mode="644",
                      name="monitoring: Alertmanager's command line")
    _daemon(ctx, "prometheus-alertmanager", conf.ALERTMANAGER_PORT, restart_on=[am_args, web], reload_on=[am_config])


def _daemon(ctx: NodeContext, service: str, port: int, restart_on: list, reload_on: list) -> None:
    """Enabled and running; restarted when its command line changed, reloaded when only its files did;
    judged by its port answering on the node's address."""
    unit = ctx.watch_unit(service)
    started = service_running(name=f"monitoring: {service} enabled and running", ctx=ctx, unit=unit)
    # the package's own start (at its install) ran with the package's command line: a changed one
    # restarts the daemon even right after kiln's start
    restarted = service_restarted(name=f"monitoring: restart {service} (if its command line changed)", unit=unit,
                                  _if=when_changed(*restart_on))
    server.shell(name=f"monitoring: reload {service} (if its files changed)", commands=[f"systemctl reload {quote(unit)}"],
                 _if=lambda: changed_any(*reload_on) and not changed_any(restarted))
    server.shell(name=f"monitoring: {service} answers after its start", commands=[answers(
        f"{service} (TCP {port})", tcp_answers(conf.address(ctx.node), port), ctx.cluster.setting("service_start_timeout"),
        "the deploy stops here", logs_of(unit))], _if=when_changed(started, restarted))


def _job_summary(ctx: NodeContext) -> None:
    """What kiln-job-summary (slurmctld's EpilogSlurmctld, run as SlurmUser) needs: where Prometheus is,
    and slurm's own copy of the password (the monitoring hosts' copy is the prometheus group's)."""
    for directory, owner, mode in (("/var/lib/kiln", "root", "755"), ("/var/lib/kiln/jobs", "slurm", "750")):
        ctx.watch_path(directory)
        managed_directory(name=f"monitoring: {directory}", ctx=ctx, path=directory, user=owner, group=owner, mode=mode)
    tls = {"ca_file": conf.CA_FILE} if ctx.cluster.setting("monitoring_tls") else {}
    ctx.put("/etc/slurm/kiln-job-summary.json", json.dumps(
        {"prometheus_url": base_url(ctx.cluster, conf.PROMETHEUS_PORT), **tls,
         "password_file": JOB_SUMMARY_PASSWORD, **conf.usage_settings(ctx.cluster)},
        sort_keys=True) + "\n", mode="644", name="monitoring: kiln-job-summary's Prometheus and prices")
    ctx.put(JOB_SUMMARY_PASSWORD, ctx.secrets.monitoring_password + "\n", mode="600", user="slurm",
            group="slurm", secret=True, name="monitoring: the password kiln-job-summary sends")


def _collector(ctx: NodeContext, textfiles: str) -> None:
    seconds = ctx.cluster.setting("monitoring_scrape_seconds")
    unit = ctx.put("/etc/systemd/system/kiln-slurm-metrics.service",
                   COLLECTOR_UNIT.format(collector=COLLECTOR, directory=textfiles), mode="644",
                   name="monitoring: kiln-slurm-metrics.service")
    timer = ctx.put("/etc/systemd/system/kiln-slurm-metrics.timer", COLLECTOR_TIMER.format(seconds=seconds), mode="644",
                    name="monitoring: kiln-slurm-metrics.timer")
    server.shell(name="monitoring: reload systemd (if the collector's units changed)", commands=[DAEMON_RELOAD],
                 _if=when_changed(unit, timer))
    timer_unit = ctx.watch_unit("kiln-slurm-metrics.timer")
    started = service_running(name="monitoring: the Slurm collector's timer enabled and running", ctx=ctx, unit=timer_unit)
    service_restarted(name="monitoring: restart the collector's timer (if its interval changed)", unit=timer_unit,
                      _if=lambda: changed_any(timer) and not changed_any(started))
