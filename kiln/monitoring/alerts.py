"""What Alertmanager holds: the firing alerts, folded by alert into host lists (``kiln alerts``), and a
query of Prometheus for tests and the README's demo.

Both are read over HTTPS (trusting the cluster CA alone) from the operator's machine at the first monitoring host's cluster address, with
the basic auth of user ``kiln`` and the password in the secrets directory (``monitoring.password``): the
same path a browser takes (``kiln testbed ssh kiln01 -L 9093:ADDRESS:9093`` where the cluster network
is not reachable directly).
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

from checks.alertmanager import AlertmanagerError, request
from kiln.hostlist import HostListError, fold
from kiln.inventory.model import MONITORING, Cluster
from kiln.monitoring import ALERTMANAGER_PORT, PROMETHEUS_PORT, scheme
from kiln.monitoring.alert_rules import ALERTS
from kiln.secrets import ca_file

RUNBOOKS = {a.name: a.runbook for a in ALERTS}


class MonitoringError(Exception):
    pass


def _base(cluster: Cluster, port: int) -> str:
    hosts = cluster.group(MONITORING)
    if not hosts:
        raise MonitoringError("the inventory has no monitoring group: kiln deploys no Prometheus or Alertmanager here")
    address = hosts[0].address
    return f"{scheme(cluster)}://{'[' + address + ']' if ':' in address else address}:{port}"


def base_url(cluster: Cluster, port: int) -> str:
    """``https://ADDRESS:PORT`` of the first monitoring host (http where kiln_monitoring_tls is off)."""
    return _base(cluster, port)


def trusted_ca(cluster: Cluster) -> str | None:
    """The CA file the operator's side trusts the listeners by (the cluster CA's, in the secrets directory)."""
    found = ca_file(cluster)
    return str(found) if found else None


def get(cluster: Cluster, password: str, port: int, path: str, timeout: float = 10.0, method: str = "GET",
        body=None):
    """The JSON at ``path`` of the first monitoring host's Prometheus or Alertmanager (``method`` and a
    JSON ``body`` for the API's writes; an empty answer is None)."""
    try:
        return request(_base(cluster, port) + path, password, method, body, timeout, ca_file=trusted_ca(cluster))
    except AlertmanagerError as e:
        raise MonitoringError(str(e)) from None


def _strings(value) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def query(cluster: Cluster, password: str, promql: str) -> list[dict]:
    """Prometheus' instant vector for ``promql``: [{"metric": {...}, "value": [t, "v"]}]."""
    data = get(cluster, password, PROMETHEUS_PORT, "/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    return vector(data)


def vector(data) -> list[dict]:
    """The result of a Prometheus instant query, checked for shape (MonitoringError naming what is wrong)."""
    result = data.get("data", {}).get("result") if isinstance(data, dict) and isinstance(data.get("data"), dict) else None
    if not isinstance(result, list):
        raise MonitoringError("Prometheus answered without a data.result list")
    for i, r in enumerate(result):
        value = r.get("value") if isinstance(r, dict) else None
        if not (isinstance(r, dict) and _strings(r.get("metric")) and isinstance(value, list) and len(value) == 2
                and isinstance(value[1], str)):
            raise MonitoringError(f"Prometheus answered a result of another shape (result[{i}]: {str(r)[:120]})")
    return result


def firing(cluster: Cluster, password: str) -> list[dict]:
    """Alertmanager's active alerts (silenced and inhibited ones left out)."""
    return alert_list(get(cluster, password, ALERTMANAGER_PORT,
                          "/api/v2/alerts?active=true&silenced=false&inhibited=false"))


def alert_list(data) -> list[dict]:
    """Alertmanager's /api/v2/alerts answer, checked for shape: a list of alerts, each with string labels and
    annotations and a startsAt string (MonitoringError naming the first that is not)."""
    if not isinstance(data, list):
        raise MonitoringError(f"Alertmanager answered a {type(data).__name__}, not a list of alerts")
    for i, a in enumerate(data):
        if not (isinstance(a, dict) and _strings(a.get("labels")) and _strings(a.get("annotations", {}))
                and isinstance(a.get("startsAt", ""), str)):
            raise MonitoringError(f"Alertmanager answered an alert of another shape (alert {i}: {str(a)[:120]})")
    return data


@dataclass(frozen=True)
class Folded:
    alert: str
    severity: str
    hosts: str          # folded host list (gpu[01-04])
    count: int          # alerts behind it (one per GPU, mount, ...)
    since: str          # the earliest start
    summary: str        # the first alert's summary
    runbook: str
    silences: tuple = ()  # held back: the silences that hold these alerts ("kiln patch: kiln patch r1 batch 2 ...")

    def as_dict(self) -> dict:
        return self.__dict__.copy()


def _hosts(hosts: list[str]) -> str:
    """The hosts folded; labels that are no host names (another exporter's, a hostile value) are listed as
    they are."""
    if hosts == ["-"]:
        return "-"
    if not all(re.fullmatch(r"[A-Za-z0-9_.:-]{1,253}", h) for h in hosts):
        return ",".join(repr(h) if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,253}", h) else h for h in hosts)
    try:
        return fold(hosts)
    except HostListError:
        return ",".join(hosts)


def folded(alerts: list[dict]) -> list[Folded]:
    """One line per alert name (and, for held-back alerts, per set of silences holding them): the hosts
    it fires on (the ``slurm_node`` label for Slurm's view of a node, else ``node``), how many alerts,
    since when; critical first."""
    by_name: dict[tuple, list[dict]] = {}
    for a in alerts:
        by_name.setdefault((a.get("labels", {}).get("alertname", "?"), tuple(a.get("silences", ()))), []).append(a)
    out = []
    for (name, holding), group in by_name.items():
        labels = [a.get("labels", {}) for a in group]
        hosts = sorted({lb.get("slurm_node") or lb.get("node") or lb.get("instance") or "-" for lb in labels})
        severity = "critical" if any(lb.get("severity") == "critical" for lb in labels) else labels[0].get("severity", "")
        out.append(Folded(name, severity, _hosts(hosts), len(group),
                          min(a.get("startsAt", "") for a in group),
                          group[0].get("annotations", {}).get("summary", ""),
                          group[0].get("annotations", {}).get("runbook") or RUNBOOKS.get(name, ""), holding))
    return sorted(out, key=lambda f: (f.severity != "critical", f.alert))
