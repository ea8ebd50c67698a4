"""What the inventory says one node must look like, as the plain dict kiln's checks read.

Built here (operator side) for ``kiln check``, and written to /etc/kiln/node-checks.json by the health
role for the node-local runner, so both runners check the same expectations.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from pathlib import Path

from checks.parsers.kernel_log import log_command
from checks.version import package_files, version_line
from kiln import __version__
from kiln.inventory import encryption, gluster
from kiln.inventory.formats import url_host
from kiln.inventory.model import MONITORING, Cluster, Host
from kiln.log_host import PORT as LOG_PORT, UPLOAD_STATE, UPLOAD_UNIT, log_host
from kiln.monitoring import ALERTMANAGER_PORT, DCGM_EXPORTER_PORT, NODE_EXPORTER_PORT, PROMETHEUS_PORT, scheme
from kiln.monitoring.alert_rules import ALERTS, rules
from kiln.monitoring.metrics_contract import needed, scraped_gpus
from kiln.shell import command
from kiln.versions import upstream
from roles.audit import KEYS as AUDIT_KEYS
from roles.firewall_rules import probes
from roles.login_access import admitted_teams
from roles.monitoring_config import CA_FILE
from roles.gluster_tls import SECURE_ACCESS, volume_option_values
from roles.secret_files import secret_files
from roles.slurm_config import dbd_hosts

LOG_LAG_SECONDS = 120  # the logs suite fails a host whose oldest entry not on the log host is older


@cache
def host_programs() -> str:
    """The version line of the host programs this kiln installs (checks/version.py)."""
    return version_line(__version__, package_files(Path(str(files("checks")))))


def _monitoring(cluster: Cluster, host: Host) -> dict:
    """A monitoring host's Prometheus, for the monitoring suite; {} elsewhere."""
    if not host.in_group(MONITORING):
        return {}
    address = url_host(host.address)
    rendered = rules(cluster.setting("alert_thresholds"), cluster.setting("monitoring_scrape_seconds"))
    return {"prometheus": f"{address}:{PROMETHEUS_PORT}", "url": f"{scheme(cluster)}://{address}:{PROMETHEUS_PORT}",
            "ca_file": CA_FILE if cluster.setting("monitoring_tls") else "", "rules": len(rendered["groups"][0]["rules"]),
            "scrape_seconds": cluster.setting("monitoring_scrape_seconds"), "series": needed(cluster, ALERTS)}


def _monitoring_tls(cluster: Cluster, host: Host) -> dict:
    """The listeners kiln runs on ``host`` and the CA they must show, where they serve TLS; {} elsewhere."""
    if not host.monitored or not cluster.setting("monitoring_tls"):
        return {}
    listeners = [["node_exporter", host.address, NODE_EXPORTER_PORT]]
    if scraped_gpus(cluster, host):
        listeners.append(["dcgm-exporter", host.address, DCGM_EXPORTER_PORT])
    if host.in_group(MONITORING):
        listeners += [["prometheus", host.address, PROMETHEUS_PORT], ["alertmanager", host.address, ALERTMANAGER_PORT]]
    return {"ca_file": CA_FILE, "listeners": listeners}


def _logs(cluster: Cluster, host: Host) -> dict:
    """Where ``host`` sends its journal and how far behind it may be: the logs suite's; {} where it sends none."""
    logs = log_host(cluster)
    if logs is None or not host.monitored:
        return {}
    return {"log_host": f"{url_host(logs.address)}:{LOG_PORT}", "lag_seconds": LOG_LAG_SECONDS, "state": UPLOAD_STATE,
            "unit": UPLOAD_UNIT}


def _monitoring_endpoints(cluster: Cluster, host: Host) -> list[str]:
    """URLs of the listeners kiln's monitoring runs that a user on ``host`` could reach: this host's
    node_exporter, each monitoring host's Prometheus and Alertmanager (each behind basic auth)."""
    if not host.monitored:
        return []
    url = lambda h, port, path: f"{scheme(cluster)}://{url_host(h.address)}:{port}{path}"  # noqa: E731
    return [url(host, NODE_EXPORTER_PORT, "/metrics")] + [
        u for m in cluster.group(MONITORING) for u in (url(m, PROMETHEUS_PORT, "/api/v1/query?query=up"),
                                                       url(m, ALERTMANAGER_PORT, "/api/v2/alerts"))]


def _isolation(cluster: Cluster, host: Host) -> dict:
    """On login hosts (the controllers where there are none), the teams' probe accounts, the secrets kiln
    may place and the team directories the host mounts: the isolation suite's; {} elsewhere."""
    probes = [t.probe().name for t in cluster.teams if t.probe()]
    if not probes or host.name not in {h.name for h in cluster.user_logins}:
        return {}
    mounts = [m for m in host.storage_mounts if m.team_directories]
    return {"allowed": _allowed_through(cluster), "monitoring_endpoints": _monitoring_endpoints(cluster, host),
            "monitoring_ca_file": CA_FILE if host.monitored and cluster.setting("monitoring_tls") else "",
            "probes": probes, "probe_teams": {t.probe().name: t.name for t in cluster.teams if t.probe()},
            "secrets": secret_files(cluster), "address": host.address,
            "team_directories": [{"path": path, "team": team} for m in mounts for path, team in m.team_paths(cluster.teams)],
            "team_parents": [m.team_parent(d) for m in mounts for d in m.team_directories if d != "."],
            "homes": [f"/home/{u.name}" for t in cluster.teams if not t.directory for u in t.users],
            "shared_roots": sorted({m.path for m in host.storage_mounts})}


def _allowed_through(cluster: Cluster) -> dict[str, str]:
    """The isolation probes whose protection the inventory itself turns off, each with the setting that
    does: the suite still probes, and reports one that gets through as a warning naming the setting, so
    that an operator's choice does not fail every deploy and rollout."""
    allowed = {}
    private = cluster.setting("slurm_private_data")
    for check, kind in (("ISOLATION_JOBS", "jobs"), ("ISOLATION_USAGE", "usage"), ("ISOLATION_ACCOUNTING", "users")):
        if kind not in private:
            allowed[check] = f"kiln_slurm_private_data leaves out {kind}"
    if cluster.setting("ssh_password_login"):
        allowed["ISOLATION_SSH_PASSWORD"] = "kiln_ssh_password_login is true"
    return allowed


def _logins(cluster: Cluster, host: Host) -> list[dict]:
    """Who sshd's PAM stack on ``host`` must admit or keep out: one user of each team (not an operator, whom
    kiln admits everywhere). On compute nodes pam_slurm_adopt decides by the user's jobs: there each team's
    probe account, which never runs a job (no Slurm association), must be kept out (``no_job``)."""
    if host.is_compute:
        return [{"user": t.probe().name, "team": t.name, "allowed": False, "no_job": True}
                for t in cluster.teams if t.probe()]
    operators = cluster.setting("operators")
    exempt = set(operators.users) if operators else set()
    admitted = {t.name for t in admitted_teams(cluster, host)}
    out = []
    for team in cluster.teams:
        user = next((u.name for u in team.users if u.name not in exempt), None)
        if user:
            out.append({"user": user, "team": team.name, "allowed": team.name in admitted})
    return out


def _directory(cluster: Cluster) -> dict | None:
    """The directory teams' users (user -> team) and groups that SSSD must give every node; None without any."""
    teams = [t for t in cluster.teams if t.directory]
    if not teams:
        return None
    return {"users": {u.name: t.name for t in teams for u in t.users}, "groups": [t.name for t in teams]}


def _gluster_tls(cluster: Cluster, host: Host) -> dict:
    """GlusterFS's TLS as kiln sets it on ``host`` (roles/gluster_tls.py): the storage suite's; {} where it speaks
    none."""
    if host.name not in gluster.tls_hosts(cluster.hosts, bool(cluster.setting("storage_gluster_tls"))):
        return {}
    volumes = {v.name: volume_option_values(gluster.volume_clients(cluster.hosts, host, v.name))
               for v in host.setting("storage_gluster_volumes")}
    return {"secure_access": SECURE_ACCESS, "volumes": volumes}


def _encrypted_mount(volume) -> dict:
    """An encrypted volume's filesystem as the storage suite judges a mount (checks/storage.py)."""
    return {"path": volume.path, "type": volume.filesystem, "source": f"/dev/mapper/{volume.name}",
            "options": volume.options, "warn_percent": 80, "fail_percent": 95, "min_throughput_mbps": 0,
            "backup_servers": [], "team_directories": []}


def node_expectations(cluster: Cluster, host: Host) -> dict:
    custom = cluster.setting("check_kernel_log")  # a program and its words, each quoted: never shell text
    # one read for gpu and fabric; "" leaves the suites their own default (checks.parsers.kernel_log)
    kernel_log = log_command(command(*custom.split(" "))) if custom else ""
    rdma = host.gpudirect_rdma  # the same rule as the nvidia_driver role's: checked where it is set up
    volumes = host.setting("encrypted_volumes")
    tang = encryption.tang_urls(cluster.hosts, cluster.setting("tang_port")) if volumes else []
    return {
        "node": host.name,
        "gpu": {"count": host.gpu_count, "model": host.gpu_model or "", "driver": upstream(cluster.versions.get("nvidia_driver") or ""),
                "nvswitch": host.nvswitch, "nvlinks": host.setting("gpu_nvlinks"),
                "nvlink_layout": host.setting("gpu_nvlink_layout"), "rdma": rdma, "dcgm_level": cluster.setting("check_dcgm_level"),
                "kernel_log": kernel_log,
                "burn_seconds": cluster.setting("check_gpu_burn_seconds"), "bf16_tflops": host.setting("gpu_bf16_tflops"),
                "burn_min_percent": cluster.setting("check_gpu_burn_min_percent"),
                "nccl_busbw_gbps": cluster.setting("check_nccl_busbw_gbps")},
        "fabric": {"type": host.fabric.type, "hca_count": host.fabric.hca_count, "rate_gbps": host.fabric.rate_gbps,
                   "hcas": list(host.fabric.hcas), "kernel_log": kernel_log},
        "storage": [m.model_dump() for m in host.storage_mounts] + [_encrypted_mount(v) for v in volumes],
        "gluster_tls": _gluster_tls(cluster, host),
        "encrypted_volumes": [{"name": v.name, "device": v.device, "path": v.path, "tang": tang} for v in volumes],
        "storage_timeout": cluster.setting("check_storage_timeout"),
        "storage_throughput_mib": cluster.setting("check_storage_throughput_mib"),
        "slurm": {"node": host.name, "gpus": host.gpu_count, "compute": host.is_compute,
                  "job_tmp": job_tmp.base_path if (job_tmp := cluster.setting("slurm_job_tmp")) else ""},
        "monitoring": _monitoring(cluster, host),
        "monitoring_tls": _monitoring_tls(cluster, host),
        "logs": _logs(cluster, host),
        "audit": {"keys": list(AUDIT_KEYS)} if cluster.setting("audit") else {},
        "isolation": _isolation(cluster, host),
        "zones": {"probes": probes(cluster, host)} if cluster.setting("firewall").enabled else {},
        "system": {"kernel": cluster.versions.get("kernel") or "", "memlock_unlimited": cluster.setting("check_memlock"),
                   "time_sync": cluster.setting("check_time_sync"), "host_programs": host_programs(),
                   "firewall": cluster.setting("firewall").enabled, "logins": _logins(cluster, host),
                   "directory": _directory(cluster),
                   "database_socket": host.name in {h.name for h in dbd_hosts(cluster)}},
        "drift": {"ignore_packages": cluster.setting("drift_ignore_packages"),
                  "ignore_units": cluster.setting("drift_ignore_units")},
        "textfile_dir": cluster.setting("check_textfile_dir"),
    }
