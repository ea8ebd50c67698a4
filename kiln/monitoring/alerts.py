"""What Alertmanager holds: the firing alerts, folded by alert into host lists (``kiln alerts``), and a
query of Prometheus for tests and the README's demo.

Both are read over HTTP from the operator's machine at the first monitoring host's cluster address, with
the basic auth of user ``kiln`` and the password in the secrets directory (``monitoring.password``): the
same path a browser takes (``kiln testbed ssh kiln01 -L 9093:ADDRESS:9093`` where the cluster network
is not reachable directly).
"""

from __future__ import annotations

import base64
import json
import urllib.parse
import urllib.request
from dataclasses import dataclass

from kiln.hostlist import fold
from kiln.inventory.model import MONITORING, Cluster
from kiln.monitoring import ALERTMANAGER_PORT, PROMETHEUS_PORT
from kiln.monitoring.alert_rules import ALERTS

RUNBOOKS = {a.name: a.runbook for a in ALERTS}


class MonitoringError(Exception):
    pass


def _base(cluster: Cluster, port: int) -> str:
    hosts = cluster.group(MONITORING)
    if not hosts:
        raise MonitoringError("the inventory has no monitoring group: kiln deploys no Prometheus or Alertmanager here")
    address = hosts[0].address
    return f"http://{'[' + address + ']' if ':' in address else address}:{port}"


def get(cluster: Cluster, password: str, port: int, path: str, timeout: float = 10.0):
    """The JSON at ``path`` of the first monitoring host's Prometheus or Alertmanager."""
    url = _base(cluster, port) + path
    token = base64.b64encode(f"kiln:{password}".encode()).decode()
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (http to the cluster)
            return json.loads(response.read(16 << 20))
    except OSError as e:
        raise MonitoringError(f"{url.split('?')[0]} did not answer ({e}): is kiln deploy done, and the "
                              "cluster network reachable from here?") from None
    except ValueError:
        raise MonitoringError(f"{url.split('?')[0]} answered something that is not JSON") from None


def query(cluster: Cluster, password: str, promql: str) -> list[dict]:
    """Prometheus' instant vector for ``promql``: [{"metric": {...}, "value": [t, "v"]}]."""
    data = get(cluster, password, PROMETHEUS_PORT, "/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    return data.get("data", {}).get("result", [])


def firing(cluster: Cluster, password: str) -> list[dict]:
    """Alertmanager's active alerts (silenced and inhibited ones left out)."""
    return get(cluster, password, ALERTMANAGER_PORT, "/api/v2/alerts?active=true&silenced=false&inhibited=false")


@dataclass(frozen=True)
class Folded:
    alert: str
    severity: str
    hosts: str          # folded host list (gpu[01-04])
    count: int          # alerts behind it (one per GPU, mount, ...)
    since: str          # the earliest start
    summary: str        # the first alert's summary
    runbook: str

    def as_dict(self) -> dict:
        return self.__dict__.copy()


def folded(alerts: list[dict]) -> list[Folded]:
    """One line per alert name: the hosts it fires on (the ``slurm_node`` label for Slurm's view of a
    node, else ``node``), how many alerts, since when; critical first."""
    by_name: dict[str, list[dict]] = {}
    for a in alerts:
        by_name.setdefault(a.get("labels", {}).get("alertname", "?"), []).append(a)
    out = []
    for name, group in by_name.items():
        labels = [a.get("labels", {}) for a in group]
        hosts = sorted({lb.get("slurm_node") or lb.get("node") or lb.get("instance") or "-" for lb in labels})
        severity = "critical" if any(lb.get("severity") == "critical" for lb in labels) else labels[0].get("severity", "")
        out.append(Folded(name, severity, fold(hosts) if hosts != ["-"] else "-", len(group),
                          min(a.get("startsAt", "") for a in group),
                          group[0].get("annotations", {}).get("summary", ""),
                          group[0].get("annotations", {}).get("runbook") or RUNBOOKS.get(name, "")))
    return sorted(out, key=lambda f: (f.severity != "critical", f.alert))
