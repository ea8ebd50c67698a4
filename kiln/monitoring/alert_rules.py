"""kiln's alert rules: one entry per alert, with the kiln check it answers to and a runbook line.

Pure data and one function. ``rules(thresholds, interval)`` gives Prometheus' rule file as a dict
(``yaml.safe_dump`` writes it): every inventory value that reaches a rule is an integer of
``AlertThresholds``, put into the expression as a number, so no value can change a rule's shape.
tests/unit/monitoring/rules_test.yml proves each rule with ``promtool test rules``: it fires on its fault's
series and stays quiet on healthy and flapping ones.

Metric sources: node_exporter (``up{job="node"}``, ``node_systemd_unit_state``, ``node_filesystem_*``,
``node_infiniband_*``), kiln's node checks (``kiln_check_ok`` in kiln.prom), dcgm-exporter
(``DCGM_*``, with kiln's counters file), and kiln's Slurm collector (``kiln_slurm_*``).
"""

from __future__ import annotations

from dataclasses import dataclass
from string import Template

from checks.parsers.xid_catalog import FATAL
from kiln.monitoring.metrics_contract import absent_rules


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str            # PromQL; $name is a threshold's value
    for_: str            # a threshold's name (seconds) or a literal like "0s"
    severity: str        # critical: the node or the cluster is out of service; warning: look soon
    check: str           # the kiln check id the alert corresponds to ("" where there is none)
    summary: str         # Prometheus template: {{ $labels.node }} and the like
    runbook: str         # what to do first


FATAL_XIDS = "|".join(str(code) for code in sorted(FATAL))
# The clock-event reasons that mean the hardware slowed the GPU (HW slowdown 0x8, SW thermal 0x20,
# HW thermal 0x40, HW power brake 0x80); PromQL has no bit operators, so each bit is tested by division.
# DCGM 3.3 renamed the field DCGM_FI_DEV_CLOCKS_EVENT_REASONS: either name is read.
_REASONS = '{__name__=~"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS|DCGM_FI_DEV_CLOCKS_EVENT_REASONS"}'
_THROTTLE_BITS = " or ".join(f"(floor({_REASONS} / {bit}) % 2 == 1)" for bit in (8, 32, 64, 128))
STORAGE_TYPES = "nfs|nfs4|fuse.glusterfs|lustre|beegfs|ceph"

def _listed_hcas(expr: str) -> str:
    """``expr`` over fabric ports, kept to the HCAs the inventory lists for the node (kiln-node.prom's
    ``kiln_node_fabric_hca_expected``, as the node check reads them); a node whose inventory lists none
    keeps every port. An unused or storage port never alerts where the inventory names the HCAs."""
    return (f"({expr}) and on (node, device) kiln_node_fabric_hca_expected == 1"
            f" or ({expr}) unless on (node) kiln_node_fabric_hca_expected")


ALERTS: tuple[Alert, ...] = (
    # node!="": kiln's own targets only (a package's default config scrapes localhost:9100 until kiln's replaces it)
    Alert("KilnNodeDown", 'up{job="node",node!=""} == 0', "node_down_seconds", "critical", "NODE_UNREACHABLE",
          "{{ $labels.node }} does not answer Prometheus (node_exporter at {{ $labels.instance }})",
          "the node lost power, its network or node_exporter: kiln testbed status / the BMC; kiln check -l NODE"),
    Alert("KilnExporterDown", 'up{job!="node",node!=""} == 0', "node_down_seconds", "warning", "",
          "{{ $labels.job }} on {{ $labels.node }} does not answer ({{ $labels.instance }})",
          "systemctl status of the exporter on the node (dcgm-exporter: is nv-hostengine running?)"),
    Alert("KilnGPUMetricsMissing",
          'kiln_node_gpus_expected > 0 unless on(node) DCGM_FI_DEV_GPU_TEMP', "node_down_seconds", "critical",
          "GPU_COUNT", "{{ $labels.node }} should have {{ $value }} GPUs but serves no GPU metrics",
          "a hung GPU or DCGM stops its series: kiln check -l NODE -s gpu; nvidia-smi on the node"),
    Alert("KilnGPUMissing",
          'kiln_node_gpus_expected > on(node) count by (node) (DCGM_FI_DEV_GPU_TEMP)', "node_down_seconds",
          "critical", "GPU_COUNT", "{{ $labels.node }} serves metrics of fewer GPUs than the {{ $value }} it has",
          "a GPU fell off the bus (Xid 79): drain the node, reboot it; if it recurs, service the GPU"),
    Alert("KilnGPUFatalXid", f'DCGM_EXP_XID_ERRORS_COUNT{{xid=~"{FATAL_XIDS}"}} > 0', "0s", "critical",
          "GPU_XID_<code>", "GPU {{ $labels.gpu }} of {{ $labels.node }} reported fatal Xid {{ $labels.xid }}",
          "kiln check -l NODE -s gpu names the Xid and its action (reset the GPU, reboot, service)"),
    Alert("KilnGPUECCUncorrected", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL > 0", "0s", "critical", "GPU_ECC_UNCORRECTED",
          "GPU {{ $labels.gpu }} of {{ $labels.node }} has {{ $value }} uncorrected ECC errors since its last reset",
          "drain the node and reset the GPU; if they recur, service it"),
    Alert("KilnGPURowRemapFailure", "DCGM_FI_DEV_ROW_REMAP_FAILURE == 1", "0s", "critical", "GPU_REMAP_FAILURE",
          "GPU {{ $labels.gpu }} of {{ $labels.node }} failed to remap a memory row", "service the GPU (RMA)"),
    Alert("KilnGPUTemperatureHigh", "DCGM_FI_DEV_GPU_TEMP > $gpu_temperature_celsius", "gpu_temperature_seconds",
          "warning", "GPU_THROTTLE", "GPU {{ $labels.gpu }} of {{ $labels.node }} runs at {{ $value }} C",
          "check the node's fans, airflow and inlet temperature"),
    Alert("KilnGPUThrottled", _THROTTLE_BITS, "gpu_throttle_seconds", "warning", "GPU_THROTTLE",
          "GPU {{ $labels.gpu }} of {{ $labels.node }} is slowed by the hardware (thermal or power brake)",
          "check cooling and power supply; nvidia-smi -q -d PERFORMANCE on the node names the reason"),
    Alert("KilnNVLinkErrors",
          "sum by (node, gpu) (increase(DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL[10m]) + "
          "increase(DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL[10m]) + "
          "increase(DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL[10m])) > $nvlink_errors_per_10m", "0s", "warning",
          "GPU_NVLINK_INACTIVE", "GPU {{ $labels.gpu }} of {{ $labels.node }}: {{ $value }} NVLink errors in 10 minutes",
          "check the fabric manager and NVLink state (nvidia-smi nvlink -s); reset the GPUs when the node is idle"),
    Alert("KilnFabricPortDown", _listed_hcas("node_infiniband_state_id != 4"), "node_down_seconds", "critical",
          "FABRIC_PORT_DOWN",
          "{{ $labels.device }} port {{ $labels.port }} of {{ $labels.node }} is not Active",
          "check the cable, the switch port and the subnet manager"),
    Alert("KilnFabricPortDegraded", _listed_hcas(
          "node_infiniband_rate_bytes_per_second * 8 / 1e9 < on(node) group_left() kiln_node_fabric_rate_gbps_expected"),
          "node_down_seconds", "warning", "FABRIC_RATE",
          "{{ $labels.device }} port {{ $labels.port }} of {{ $labels.node }} runs at {{ $value }} Gb/s, below its rate",
          "check the cable and the switch port (a link trained down to fewer lanes or a lower speed)"),
    Alert("KilnNodeCheckFailed", 'kiln_check_ok{severity="fail"} == 0', "0s", "warning", "(the check's id)",
          "{{ $labels.node }} fails kiln check {{ $labels.check }}",
          "kiln check -l NODE shows the message and what to do; the node drains itself in Slurm"),
    Alert("KilnStorageNotResponding",
          f'node_filesystem_device_error{{fstype=~"{STORAGE_TYPES}"}} == 1 or '
          'kiln_check_ok{check="STORAGE_RESPONDING"} == 0', "node_down_seconds", "critical", "STORAGE_RESPONDING",
          "{{ $labels.mountpoint }}{{ $labels.check }} on {{ $labels.node }} does not answer",
          "the file server or the path to it is down: processes that touch the mount hang; check the server first"),
    Alert("KilnNodeChecksStale", "time() - kiln_check_last_run_timestamp_seconds > $check_stale_seconds", "0s",
          "warning", "", "kiln's node checks on {{ $labels.node }} last ran {{ $value | humanizeDuration }} ago",
          "slurmd runs them (HealthCheckProgram): is slurmd running? kiln-node-check on the node by hand"),
    Alert("KilnNodeDrainedByChecks", 'kiln_slurm_node_drained{by="kiln"} == 1', "drained_seconds", "warning", "",
          "{{ $labels.slurm_node }} is drained by kiln's check {{ $labels.check }}",
          "the reason names the check; fix the node, its next passing health check resumes it"),
    Alert("KilnNodeEscalated", 'kiln_slurm_node_drained{by="escalated"} == 1', "0s",
          "critical", "", "{{ $labels.slurm_node }} needs a person: kiln-remediate escalated it",
          "kiln-remediate tried what it may (the reason says what and why it stopped): service the node, then "
          "scontrol update nodename=NODE state=resume"),
    Alert("KilnRemediationBreakerOpen", "kiln_remediation_breaker_open == 1", "0s", "critical", "",
          "kiln-remediate stopped all automatic repair on {{ $labels.node }}: too many nodes failed at once",
          "find the shared cause (fabric, storage, power) in kiln-remediate's journal; then kiln remediate "
          "--reset-breaker"),
    Alert("KilnSlurmdDown", 'node_systemd_unit_state{name="slurmd.service",state="active"} == 0',
          "slurm_daemon_seconds", "critical", "SLURM_SLURMD", "slurmd is not active on {{ $labels.node }}",
          "systemctl start slurmd; journalctl -u slurmd"),
    Alert("KilnMungeDown", 'node_systemd_unit_state{name="munge.service",state="active"} == 0',
          "slurm_daemon_seconds", "critical", "SLURM_MUNGE", "munge is not active on {{ $labels.node }}: Slurm "
          "refuses its messages", "systemctl start munge; check /etc/munge/munge.key matches the controller's"),
    Alert("KilnMariaDBDown", 'node_systemd_unit_state{name="mariadb.service",state="active"} == 0',
          "slurm_daemon_seconds", "critical", "", "MariaDB is not active on {{ $labels.node }}: slurmdbd has no "
          "database", "systemctl status mariadb; its log (journalctl -u mariadb)"),
    Alert("KilnFabricManagerDown", 'node_systemd_unit_state{name="nvidia-fabricmanager.service",state="active"} == 0',
          "slurm_daemon_seconds", "critical", "GPU_FABRIC_MANAGER", "the NVIDIA fabric manager is not active on "
          "{{ $labels.node }}: its NVSwitch GPUs cannot run CUDA", "systemctl start nvidia-fabricmanager; "
          "/var/log/fabricmanager.log"),
    Alert("KilnClockNotSynchronised", 'node_systemd_unit_state{name="chrony.service",state="active"} == 0 '
          'and on (node) kiln_node_time_sync_expected == 1',
          "slurm_daemon_seconds", "warning", "SYSTEM_TIME_SYNC", "chrony is not active on {{ $labels.node }}: its "
          "clock drifts (Slurm, munge and TLS need the nodes' clocks to agree)", "systemctl start chrony; "
          "chronyc tracking"),
    Alert("KilnDiskAlmostFull",
          f'node_filesystem_avail_bytes{{fstype!~"tmpfs|overlay|squashfs|{STORAGE_TYPES}"}} * 100 / '
          f'node_filesystem_size_bytes{{fstype!~"tmpfs|overlay|squashfs|{STORAGE_TYPES}"}} < $disk_free_percent',
          "disk_free_seconds", "warning", "", "{{ $labels.mountpoint }} on {{ $labels.node }} has "
          "{{ $value | humanize }}% free", "free space there (Slurm's spool and logs, /tmp, container images) "
          "before jobs and daemons fail to write"),
    Alert("KilnCertificateExpiresSoon",
          "kiln_tls_certificate_expiry_timestamp_seconds - time() < $certificate_days * 86400", "0s", "warning",
          "MONITORING_TLS", "the TLS certificate of {{ $labels.node }}'s monitoring listeners expires in "
          "{{ $value | humanizeDuration }}",
          "run kiln deploy: it makes certificates anew kiln_tls_renew_days ahead; once one expires, scrapes of that "
          "node fail"),
    Alert("KilnSlurmctldDown", 'kiln_slurm_up{daemon="slurmctld"} == 0', "slurm_daemon_seconds", "critical", "",
          "slurmctld does not answer (scontrol ping on {{ $labels.node }})",
          "systemctl status slurmctld on the controller; its log in /var/log/slurm"),
    Alert("KilnSlurmdbdDown", 'kiln_slurm_up{daemon="slurmdbd"} == 0', "slurm_daemon_seconds", "critical", "",
          "slurmdbd does not answer slurmctld: accounting waits in the DBD agent queue",
          "systemctl status slurmdbd and mariadb on the slurm_dbd host"),
    Alert("KilnSlurmMetricsStale", "time() - kiln_slurm_collected_timestamp_seconds > $check_stale_seconds", "0s",
          "warning", "", "kiln's Slurm collector on {{ $labels.node }} last wrote {{ $value | humanizeDuration }} ago",
          "systemctl status kiln-slurm-metrics.timer on the controller"),
    Alert("KilnSlurmDBDQueueGrowing", "kiln_slurm_dbd_agent_queue > $dbd_queue_messages", "dbd_queue_seconds",
          "warning", "", "slurmctld holds {{ $value }} messages for slurmdbd",
          "slurmdbd or its database does not keep up: check slurmdbd's log and the database; jobs run on"),
    Alert("KilnTeamAtGPULimit",
          'sum by (account) (kiln_slurm_jobs_pending{reason=~"(Assoc|QOS)(Grp|Max)GRES.*"}) > 0',
          "team_gpu_limit_pending_seconds", "warning", "",
          "team {{ $labels.account }} has {{ $value }} jobs waiting on its GPU limit",
          "the team uses all the GPUs it may: raise its gpu_limit (kiln_teams) or wait"),
)


def _seconds(value: int) -> str:
    return f"{value}s"


def rules(thresholds, interval: int) -> dict:
    """Prometheus' rule file for ``thresholds`` (an ``AlertThresholds``) and the evaluation ``interval``."""
    values = thresholds.model_dump()
    out = []
    for a in ALERTS:
        duration = _seconds(values[a.for_]) if a.for_ in values else a.for_
        out.append({"alert": a.name, "expr": Template(a.expr).substitute(values), "for": duration,
                    "labels": {"severity": a.severity, **({"kiln_check": a.check} if a.check else {})},
                    "annotations": {"summary": a.summary, "runbook": a.runbook}})
    # where a series a rule reads is not served, the rule can never fire: KilnMetricMissing says so
    out += absent_rules(ALERTS, _seconds(values["check_stale_seconds"]))
    return {"groups": [{"name": "kiln", "interval": _seconds(interval), "rules": out}]}
