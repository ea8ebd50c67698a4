"""The metrics contract: every series kiln's alert rules read, who serves it, and on which nodes it must
be there. A rule whose series no target serves can never fire, and says nothing; the contract makes that
visible three ways:

- a unit test fails when a rule reads a series the contract does not list (``series_in``);
- ``kiln check --suite monitoring`` asks Prometheus which of the series this cluster needs it holds, and
  fails naming each missing one with the rules that read it and who should serve it (MONITORING_SERIES);
- per rule group, an alert (``KilnMetricMissing``) fires where a node serves its group's metrics but not
  one series a rule reads: a site's own dcgm-exporter with its stock counters file, say, which lacks the
  ECC, NVLink error, clock-event and windowed-Xid series (``absent_rules``).

Scopes: ``node`` every node_exporter target; ``checked`` a node whose slurmd runs kiln's health check
(``kiln_node_health_check_expected``); ``gpu`` a node that serves GPU metrics at all (a node that serves
none is KilnGPUMetricsMissing's); ``fabric`` a node whose node_exporter sees HCAs at all
(``node_infiniband_info``: a node whose inventory lists HCAs its kernel does not show is the fabric
check's to find); ``cluster`` one series for the whole cluster (the Slurm collector); ``optional`` a
series that exists only while its condition holds (pending jobs, a drained node, HCAs in the inventory,
kiln-remediate enabled): never missing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kiln.inventory.model import Cluster, Host

# dcgm-exporter's stock etc/default-counters.csv (NVIDIA/dcgm-exporter, the same fields in its 3.x and 4.x
# releases): what a site's own exporter serves unless its counters file adds more.
DCGM_STOCK_DEFAULT = (
    "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
)
KILN_COUNTERS = "templates/monitoring/dcgm-counters.csv"
NODE_EXPORTER = "node_exporter (Debian's prometheus-node-exporter, 1.5 and later)"
KILN_NODE = "kiln's node checks (kiln.prom, kiln-node.prom in node_exporter's textfile directory)"


@dataclass(frozen=True)
class Series:
    name: str
    scope: str                 # node, gpu, fabric, cluster, optional
    served_by: str             # the exporter, and how (a collector, a counters file)
    also: tuple[str, ...] = ()  # other names of the same series (a DCGM field renamed): one of them is enough

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.also)


def _dcgm(name: str, also: tuple[str, ...] = (), scope: str = "gpu", when: str = "") -> Series:
    stock = "in stock default-counters.csv" if name in DCGM_STOCK_DEFAULT else \
        f"only with kiln's counters file ({KILN_COUNTERS}): a stock dcgm-exporter does not serve it"
    return Series(name, scope, f"dcgm-exporter, {stock}{when}", also)


CONTRACT: tuple[Series, ...] = (
    Series("up", "node", "Prometheus itself (every scrape)"),
    Series("node_systemd_unit_state", "node", f"{NODE_EXPORTER}, --collector.systemd with kiln's unit list"),
    Series("node_filesystem_avail_bytes", "node", f"{NODE_EXPORTER}, filesystem collector (default)"),
    Series("node_filesystem_size_bytes", "node", f"{NODE_EXPORTER}, filesystem collector (default)"),
    Series("node_filesystem_device_error", "node", f"{NODE_EXPORTER}, filesystem collector (default)"),
    Series("node_infiniband_state_id", "fabric", f"{NODE_EXPORTER}, infiniband collector (default)"),
    Series("node_infiniband_rate_bytes_per_second", "fabric", f"{NODE_EXPORTER}, infiniband collector (default)"),
    Series("kiln_check_ok", "checked", KILN_NODE + ", written by each health check"),
    Series("kiln_check_last_run_timestamp_seconds", "checked", KILN_NODE + ", written by each health check"),
    Series("kiln_node_gpus_expected", "node", KILN_NODE),
    Series("kiln_node_health_check_expected", "node", KILN_NODE),
    Series("kiln_node_time_sync_expected", "node", KILN_NODE),
    Series("kiln_tls_certificate_expiry_timestamp_seconds", "optional",
           "kiln-tls.prom in node_exporter's textfile directory (where kiln_monitoring_tls is on)"),
    Series("kiln_node_fabric_hca_expected", "optional", KILN_NODE + " (where the inventory lists HCAs)"),
    Series("kiln_node_fabric_rate_gbps_expected", "optional", KILN_NODE + " (where the inventory gives a rate)"),
    Series("kiln_slurm_up", "cluster", "kiln's Slurm collector (kiln-slurm-metrics.timer on the controller)"),
    Series("kiln_slurm_collected_timestamp_seconds", "cluster", "kiln's Slurm collector"),
    Series("kiln_slurm_dbd_agent_queue", "cluster", "kiln's Slurm collector (sdiag)"),
    Series("kiln_slurm_node_drained", "optional", "kiln's Slurm collector (only while a node is drained)"),
    Series("kiln_slurm_jobs_pending", "optional", "kiln's Slurm collector (only while jobs pend)"),
    Series("kiln_remediation_breaker_open", "optional", "kiln-remediate (where kiln_remediation is enabled)"),
    _dcgm("DCGM_FI_DEV_GPU_TEMP"),
    _dcgm("DCGM_FI_DEV_ROW_REMAP_FAILURE"),
    # one series per GPU and Xid seen in the window: none on a GPU without Xids, so its absence cannot be
    # told from health (kiln's node check reads the kernel log for Xids: GPU_XID_<code>)
    _dcgm("DCGM_EXP_XID_ERRORS_COUNT", scope="optional", when="; only while a GPU has had an Xid in the window"),
    _dcgm("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
    _dcgm("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", also=("DCGM_FI_DEV_CLOCKS_EVENT_REASONS",)),  # renamed in DCGM 3.3
    _dcgm("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"),
    _dcgm("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"),
    _dcgm("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"),
)
BY_NAME = {n: s for s in CONTRACT for n in s.names}

_KEYWORDS = {"and", "or", "unless", "on", "ignoring", "by", "without", "group_left", "group_right", "bool",
             "offset", "inf", "nan"}


def series_in(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers that are no function (followed by ``(``), no
    keyword, no label (inside ``{...}`` or a ``by``/``on``/``ignoring``/``group_*`` list) and no string,
    duration or number."""
    names = {n for alternatives in re.findall(r'__name__\s*=~?\s*"([^"]*)"', expr) for n in alternatives.split("|")}
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    for m in re.finditer(r"(?<![\w.$])([A-Za-z_:][A-Za-z0-9_:]*)\s*(\()?", text):
        word, call = m.group(1), m.group(2)
        if not call and word.lower() not in _KEYWORDS:
            names.add(word)
    return names


def uncontracted(alerts) -> dict[str, list[str]]:
    """Series a rule reads that the contract does not list -> the alerts reading them (none, in kiln)."""
    return {name: readers for name, readers in rules_reading(alerts).items() if name not in BY_NAME}


def rules_reading(alerts) -> dict[str, list[str]]:
    """Contract series name -> the alerts (kiln.monitoring.alert_rules.Alert) that read it."""
    out: dict[str, list[str]] = {}
    for a in alerts:
        for name in sorted(series_in(a.expr)):
            readers = out.setdefault(BY_NAME[name].name if name in BY_NAME else name, [])
            if a.name not in readers:
                readers.append(a.name)
    return out


def scraped_gpus(cluster: Cluster, host: Host) -> bool:
    """A host whose dcgm-exporter Prometheus scrapes: it has GPUs, and kiln installs the exporter (the
    dcgm_exporter pin) or the site runs one (kiln_monitoring_dcgm_exporter_external)."""
    return bool(host.gpu_count) and bool(cluster.versions.get("dcgm_exporter")
                                         or cluster.setting("monitoring_dcgm_exporter_external"))


def health_checked(cluster: Cluster, host: Host) -> bool:
    """A host whose slurmd runs kiln's node checks as its HealthCheckProgram (they write kiln.prom)."""
    return host.is_compute and bool(cluster.setting("slurm_health_check"))


def needed(cluster: Cluster, alerts) -> list[dict]:
    """The series this cluster's Prometheus must hold for each rule to be able to fire, for the monitoring
    suite: [{"name", "also", "rules", "served_by", "when"}]: GPU series only where some node's GPU metrics
    are scraped, the health check's where it runs; a fabric series only ``when`` Prometheus holds
    ``node_infiniband_info`` (some node's kernel shows HCAs); optional series never."""
    wanted = {"node": True, "cluster": True, "fabric": True, "optional": False,
              "gpu": any(scraped_gpus(cluster, h) for h in cluster.hosts.values()),
              "checked": any(health_checked(cluster, h) for h in cluster.hosts.values())}
    out = []
    for name, rules in sorted(rules_reading(alerts).items()):
        s = BY_NAME.get(name)
        if s and wanted[s.scope]:
            out.append({"name": s.name, "also": list(s.also), "rules": rules, "served_by": s.served_by,
                        "when": FABRIC_SEEN if s.scope == "fabric" else ""})
    return out


def _selector(s: Series) -> str:
    return s.name if not s.also else '{__name__=~"' + "|".join(s.names) + '"}'


# A node that serves its scope's metrics at all (the others are another alert's: KilnNodeDown,
# KilnGPUMetricsMissing)
FABRIC_SEEN = "node_infiniband_info"
_SCOPE_NODES = {"node": 'group by (node) (up{job="node",node!=""} == 1)',
                "checked": "group by (node) (kiln_node_health_check_expected == 1)",
                "gpu": "group by (node) (DCGM_FI_DEV_GPU_TEMP)",
                "fabric": f"group by (node) ({FABRIC_SEEN})"}


def absent_expr(s: Series) -> str:
    """PromQL that is non-empty where ``s`` is missing: per node for node, gpu and fabric series, once for
    a cluster series."""
    if s.scope == "cluster":
        return f"absent({_selector(s)})"
    return f"{_SCOPE_NODES[s.scope]} unless on (node) group by (node) ({_selector(s)})"


def absent_rules(alerts, for_: str) -> list[dict]:
    """One KilnMetricMissing rule per series kiln's rules read (optional ones and ``up`` aside), labelled
    with the series, its rule group (scope) and the alerts that read it."""
    out = []
    for name, readers in sorted(rules_reading(alerts).items()):
        s = BY_NAME.get(name)
        if s is None or s.scope == "optional" or s.name == "up" or s.name == "DCGM_FI_DEV_GPU_TEMP":
            continue  # conditional; Prometheus' own; KilnGPUMetricsMissing's
        where = "the cluster" if s.scope == "cluster" else "{{ $labels.node }}"
        out.append({"alert": "KilnMetricMissing", "expr": absent_expr(s), "for": for_,
                    "labels": {"severity": "warning", "series": s.name, "rule_group": s.scope,
                               "read_by": ",".join(readers)},
                    "annotations": {"summary": f"{where} serves no {s.name}: kiln's alert(s) {', '.join(readers)} "
                                               "can never fire there",
                                    "runbook": f"serve it: {s.served_by}"}})
    return out
