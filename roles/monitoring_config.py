"""The monitoring role's files: pure functions of the inventory (and the monitoring password).

Every file is built as data and written with ``yaml.safe_dump`` or ``json.dumps``: an inventory value
fills only its own field (a host name, a URL, a number) and can never add a scrape job, a rule or a
key. ``command_line`` words are checked against a plain character set before they are joined.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re

import bcrypt
import yaml

from checks.parsers.exposition import Exposition
from kiln.inventory.formats import url_host
from kiln.inventory.model import MONITORING, Cluster, Host
from kiln.monitoring import (ALERTMANAGER_CLUSTER_PORT, ALERTMANAGER_PORT, DCGM_EXPORTER_PORT, NODE_EXPORTER_PORT,
                             PROMETHEUS_PORT, alert_rules)
from kiln.monitoring.metrics_contract import health_checked, scraped_gpus
from kiln.usage import billing
from roles.secret_files import MONITORING_TLS_KEY, PROMETHEUS_PASSWORD

USER = "kiln"  # the HTTP basic-auth user of every monitoring listener
CONF = "/etc/prometheus"
WEB_CONFIG = f"{CONF}/kiln-web.yml"
PASSWORD_FILE = PROMETHEUS_PASSWORD
RULES = f"{CONF}/kiln-rules.yml"
TARGETS = f"{CONF}/kiln-targets"
PROMETHEUS_YML = f"{CONF}/prometheus.yml"
ALERTMANAGER_YML = f"{CONF}/alertmanager.yml"
NODE_TEXTFILE = "kiln-node.prom"
TLS_TEXTFILE = "kiln-tls.prom"
CA_FILE = f"{CONF}/kiln-ca.crt"  # the cluster CA's certificate: what every client of the listeners trusts
TLS_CERT = f"{CONF}/kiln-tls.crt"  # this host's certificate for its listeners
TLS_KEY = MONITORING_TLS_KEY
# The units node_exporter's systemd collector reports: the daemons kiln's alerts watch.
WATCHED_UNITS = ("slurmd|slurmctld|slurmdbd|munge|mariadb|nvidia-dcgm|nvidia-dcgm-exporter|nvidia-fabricmanager|"
                 "nvidia-persistenced|nfs-server|glusterd|chrony|prometheus|prometheus-alertmanager")
# bcrypt writes its salt in base64 with its own alphabet
_BCRYPT_ALPHABET = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
                                 "./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_ARG = re.compile(r"^--[a-z][a-z0-9.-]*(?:=[A-Za-z0-9_./:|()\[\]+-]*)?$", re.ASCII)


def _dump(data) -> str:
    return "# Written by kiln (monitoring role); changes here are undone by the next deploy.\n" + yaml.safe_dump(
        data, sort_keys=False, width=1000, default_flow_style=False)


def address(host: Host) -> str:
    """Where a host's listeners listen and are scraped: its inventory address (the cluster network)."""
    return host.address


def web_config(password: str, tls: bool) -> str:
    """The web config every kiln-run listener reads (node_exporter, Prometheus, Alertmanager,
    dcgm-exporter): basic auth for user kiln and, with ``tls``, HTTPS only (TLS 1.2 or later) with the host's
    certificate of the cluster CA. The bcrypt salt is derived from the password, so the same password gives
    the same file and a second deploy changes nothing. The listeners read the certificate anew on each
    connection (a renewed one needs no restart), but whether they speak TLS at all only at their start."""
    digest = hashlib.sha256(b"kiln-monitoring-salt:" + password.encode()).digest()[:16]  # bcrypt's 16 salt bytes
    salt_chars = base64.b64encode(digest).decode()[:22].translate(_BCRYPT_ALPHABET)
    hashed = bcrypt.hashpw(password.encode(), b"$2b$10$" + salt_chars.encode()).decode()
    data: dict = {"basic_auth_users": {USER: hashed}}
    if tls:
        data = {"tls_server_config": {"cert_file": TLS_CERT, "key_file": TLS_KEY, "min_version": "TLS12"}, **data}
    return _dump(data)


def certificate_expiry_textfile(expires: float) -> str:
    """kiln-tls.prom: when this host's listeners' certificate expires (KilnCertificateExpiresSoon); written
    with the certificate, so it is always that file's."""
    out = Exposition()
    out.add("kiln_tls_certificate_expiry_timestamp_seconds", "gauge", "When the TLS certificate of this host's "
            "monitoring listeners (of the cluster's CA) expires, in seconds since the epoch.", int(expires),
            {"file": TLS_CERT})
    return out.text()


def targets(cluster: Cluster) -> dict[str, list[dict]]:
    """file_sd target lists per job: every kiln host's node_exporter, every scraped GPU node's dcgm-exporter.
    Prometheus reads a changed file without a restart, so a node added is scraped after one deploy."""
    def entry(h: Host, port: int) -> dict:
        labels = {"node": h.name}
        if h.node_type:
            labels["node_type"] = h.node_type
        return {"targets": [f"{url_host(address(h))}:{port}"], "labels": labels}
    hosts = sorted(cluster.hosts.values(), key=lambda h: h.name)
    return {"node": [entry(h, NODE_EXPORTER_PORT) for h in hosts],
            "dcgm": [entry(h, DCGM_EXPORTER_PORT) for h in hosts if scraped_gpus(cluster, h)]}


def targets_json(entries: list[dict]) -> str:
    return json.dumps(entries, indent=1, sort_keys=True) + "\n"




def node_textfile(cluster: Cluster, host: Host) -> str:
    """What the node must have, for rules that compare (GPUs missing, a fabric port slower than its rate):
    kiln-node.prom, static."""
    out = Exposition()
    out.add("kiln_node_gpus_expected", "gauge", "GPUs the inventory gives this node (0: no GPU metrics expected).",
            host.gpu_count if scraped_gpus(cluster, host) else 0)
    if host.fabric.type in ("infiniband", "roce", "rxe") and host.fabric.rate_gbps:
        out.add("kiln_node_fabric_rate_gbps_expected", "gauge", "The rate each of the node's fabric ports must run at.",
                host.fabric.rate_gbps)
    out.add("kiln_node_health_check_expected", "gauge", "1 where slurmd runs kiln's node checks (they write "
            "kiln.prom): their series must be there.", int(health_checked(cluster, host)))
    out.add("kiln_node_time_sync_expected", "gauge", "1 where the node keeps its own clock with chrony (0 in "
            "containers, whose clock is the host's: kiln_check_time_sync).", int(bool(cluster.setting("check_time_sync"))))
    if host.fabric.type in ("infiniband", "roce", "rxe"):
        text = "1 for each HCA the inventory gives this node (fabric alerts watch these ports only)."
        for hca in host.fabric.hcas:
            out.add("kiln_node_fabric_hca_expected", "gauge", text, 1, {"device": hca})
    return out.text()


DCGM_EXPORTER_DROPIN = "/etc/systemd/system/nvidia-dcgm-exporter.service.d/kiln.conf"
DCGM_COUNTERS = "/etc/dcgm-exporter/kiln-counters.csv"


def dcgm_exporter_dropin(host: Host) -> str:
    """NVIDIA's dcgm-exporter as kiln runs it: kiln's counters, the Xid count over 5 minutes, on the
    node's cluster address, behind the same basic auth as every other listener."""
    return ("# Written by kiln (monitoring role)\n[Service]\nExecStart=\n"
            f"ExecStart=/usr/bin/dcgm-exporter -f {DCGM_COUNTERS} -a {url_host(address(host))}:{DCGM_EXPORTER_PORT} "
            f"--web-config-file {WEB_CONFIG} --xid-count-window-size 300000\n")


def _auth(cluster: Cluster) -> dict:
    """How Prometheus reaches a listener: basic auth and, where they serve TLS, HTTPS trusting the cluster CA
    alone (the target's address is checked against its certificate)."""
    auth: dict = {"basic_auth": {"username": USER, "password_file": PASSWORD_FILE}}
    if cluster.setting("monitoring_tls"):
        auth |= {"scheme": "https", "tls_config": {"ca_file": CA_FILE, "min_version": "TLS12"}}
    return auth


def prometheus_yml(cluster: Cluster) -> str:
    interval = f"{cluster.setting('monitoring_scrape_seconds')}s"
    monitors = cluster.group(MONITORING)
    jobs = [{"job_name": job, **_auth(cluster), "file_sd_configs": [{"files": [f"{TARGETS}/{job}.json"]}]}
            for job in ("node", "dcgm")]
    for job, port in (("prometheus", PROMETHEUS_PORT), ("alertmanager", ALERTMANAGER_PORT)):
        jobs.append({"job_name": job, **_auth(cluster), "static_configs": [
            {"targets": [f"{url_host(address(h))}:{port}"], "labels": {"node": h.name}} for h in monitors]})
    return _dump({
        "global": {"scrape_interval": interval, "evaluation_interval": interval,
                   "scrape_timeout": f"{min(10, cluster.setting('monitoring_scrape_seconds'))}s",
                   "external_labels": {"cluster": cluster.name}},
        "rule_files": [RULES],
        "alerting": {"alertmanagers": [{**_auth(cluster), "static_configs": [
            {"targets": [f"{url_host(address(h))}:{ALERTMANAGER_PORT}" for h in monitors]}]}]},
        "scrape_configs": jobs,
    })


def rules_yml(cluster: Cluster) -> str:
    return _dump(alert_rules.rules(cluster.setting("alert_thresholds"), cluster.setting("monitoring_scrape_seconds")))


def alertmanager_yml(cluster: Cluster) -> str:
    timing = cluster.setting("monitoring_alerting")
    receivers: list[dict] = [{"name": "kiln-alertmanager-only"}]  # alerts stay visible in Alertmanager
    for r in cluster.setting("monitoring_receivers"):
        entry: dict = {"name": r.name}
        if r.webhook_url:
            entry["webhook_configs"] = [{"url": r.webhook_url, "send_resolved": r.send_resolved}]
        else:
            entry["email_configs"] = [{"to": r.email_to, "send_resolved": r.send_resolved}]
        receivers.append(entry)
    route = {"receiver": "kiln-alertmanager-only", "group_by": ["alertname", "cluster"],
             "group_wait": f"{timing.group_wait_seconds}s", "group_interval": f"{timing.group_interval_seconds}s",
             "repeat_interval": f"{timing.repeat_interval_seconds}s"}
    if len(receivers) > 1:
        route["routes"] = [{"receiver": r["name"], "continue": True} for r in receivers[1:]]
    data: dict = {"route": route, "receivers": receivers}
    smtp = cluster.setting("monitoring_smtp")
    if smtp is not None:
        data = {"global": {"smtp_smarthost": smtp.smarthost, "smtp_from": smtp.sender,
                           "smtp_require_tls": smtp.require_tls}, **data}
    return _dump(data)


def _args(words: list[str]) -> str:
    for w in words:
        if not _ARG.fullmatch(w):
            raise ValueError(f"refusing the daemon argument {w!r}: it holds characters an argument never needs")
    return 'ARGS="' + " ".join(words) + '"\n'


def node_exporter_defaults(cluster: Cluster, host: Host) -> str:
    return "# Written by kiln (monitoring role)\n" + _args([
        f"--web.listen-address={url_host(address(host))}:{NODE_EXPORTER_PORT}", f"--web.config.file={WEB_CONFIG}",
        f"--collector.textfile.directory={cluster.setting('check_textfile_dir')}", "--collector.systemd",
        f"--collector.systemd.unit-include=({WATCHED_UNITS})[.]service"])


def prometheus_defaults(cluster: Cluster, host: Host) -> str:
    return "# Written by kiln (monitoring role)\n" + _args([
        f"--config.file={PROMETHEUS_YML}", f"--web.listen-address={url_host(address(host))}:{PROMETHEUS_PORT}",
        f"--web.config.file={WEB_CONFIG}", "--storage.tsdb.path=/var/lib/prometheus/metrics2/",
        f"--storage.tsdb.retention.time={cluster.setting('monitoring_retention_days')}d",
        f"--storage.tsdb.retention.size={cluster.setting('monitoring_retention_gb')}GB"])


def alertmanager_defaults(cluster: Cluster, host: Host) -> str:
    peers = [h for h in cluster.group(MONITORING) if h.name != host.name]
    # gossip between Alertmanagers only where there are several (it would listen on every address)
    cluster_args = ([f"--cluster.listen-address={url_host(address(host))}:{ALERTMANAGER_CLUSTER_PORT}"]
                    + [f"--cluster.peer={url_host(address(p))}:{ALERTMANAGER_CLUSTER_PORT}" for p in peers]
                    if peers else ["--cluster.listen-address="])
    return "# Written by kiln (monitoring role)\n" + _args([
        f"--config.file={ALERTMANAGER_YML}", f"--web.listen-address={url_host(address(host))}:{ALERTMANAGER_PORT}",
        f"--web.config.file={WEB_CONFIG}", "--storage.path=/var/lib/prometheus/alertmanager", *cluster_args])


def usage_settings(cluster: Cluster) -> dict:
    """What kiln-job-summary's usage counters need (checks/job_summary.py): each GPU node's price per
    GPU-hour (``kiln_usage_gpu_hour_prices`` by node type) and the partitions Slurm bills by kiln's weights
    (kiln/usage/billing.py), and for the Slurm collector the currency and
    each team's fair-share target."""
    prices = cluster.setting("usage_gpu_hour_prices")
    total = sum(t.shares for t in cluster.teams) or 1
    return {"node_prices": {h.name: prices[h.node_type] for h in cluster.compute
                            if h.gpu_count and h.node_type in prices},
            # partitions whose jobs Slurm bills by kiln's weights: a job there costs its billing TRES
            "billed_partitions": sorted(p for p, w in billing.partition_weights(cluster, prices).items() if w),
            "currency": cluster.setting("usage_currency"),
            "share_targets": {t.name: round(t.shares / total, 6) for t in cluster.teams}}
