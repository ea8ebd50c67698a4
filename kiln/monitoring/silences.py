"""Alertmanager silences for kiln's planned work on the operator's side (``kiln patch``): a batch drained,
patched and rebooted on purpose pages nobody, while every node outside the work still alerts.

The silences' shape and the HTTP calls are ``checks/alertmanager.py``'s, shared with kiln-remediate on the
controller. Each runs from the work's start to the end of its window and is expired as soon as the work
ends; one left by a crash ends with its window. The comment names the work (``kiln patch <rollout> batch
2``), ``createdBy`` the program, so ``kiln alerts`` can say which silence holds back an alert. Same basic
auth and address as ``kiln alerts``.
"""

from __future__ import annotations

from dataclasses import dataclass

from checks.alertmanager import NODE_LABELS, AlertmanagerError, expire_silences, make_silences
from kiln.inventory.model import MONITORING, Cluster
from kiln.monitoring import ALERTMANAGER_PORT
from kiln.monitoring.alerts import MonitoringError, alert_list, base_url, get, trusted_ca

CREATED_BY = "kiln"


@dataclass(frozen=True)
class Silence:
    id: str
    comment: str
    created_by: str
    state: str          # active, pending or expired
    nodes: str          # the matcher's value (the nodes, |-joined)
    ends_at: str

    def as_dict(self) -> dict:
        return self.__dict__.copy()


class Silences:
    """Make, expire and read kiln's silences on a cluster's Alertmanager. ``enabled`` is False where the
    inventory deploys no monitoring: every call is then a no-op."""

    def __init__(self, cluster: Cluster, password: str | None, program: str = CREATED_BY, timeout: float = 10.0,
                 port: int = ALERTMANAGER_PORT):
        self.cluster, self.password, self.program, self.timeout, self.port = cluster, password, program, timeout, port
        self.enabled = bool(cluster.group(MONITORING)) and bool(password)

    @staticmethod
    def grace(cluster: Cluster) -> int:
        """Seconds a silence outlives its work: the node's next health check (its kiln.prom) and four
        scrapes, for alerts the work caused to resolve before the silence ends."""
        return int(cluster.health_check_interval) + 4 * int(cluster.setting("monitoring_scrape_seconds"))

    def make(self, nodes: list[str], starts: float, ends: float, comment: str) -> list[str]:
        """Silence every alert on ``nodes`` from ``starts`` to ``ends`` (epoch seconds); the new silences' ids."""
        if not self.enabled:
            return []
        try:
            return make_silences(base_url(self.cluster, self.port), self.password or "", nodes, starts, ends,
                                 comment, self.program, self.timeout, ca_file=trusted_ca(self.cluster))
        except AlertmanagerError as e:
            raise MonitoringError(str(e)) from None

    def expire(self, ids: list[str], after: float = 0) -> list[str]:
        """End the silences ``ids`` now or ``after`` seconds from now (one already gone is no error)."""
        if not self.enabled:
            return []
        try:
            return expire_silences(base_url(self.cluster, self.port), self.password or "", ids, self.timeout, after,
                                   ca_file=trusted_ca(self.cluster))
        except AlertmanagerError as e:
            raise MonitoringError(str(e)) from None

    def listed(self) -> list[Silence]:
        """Alertmanager's silences made by kiln's programs (createdBy starting ``kiln``), by end time."""
        if not self.enabled:
            return []
        data = get(self.cluster, self.password or "", self.port, "/api/v2/silences", self.timeout)
        return [s for s in silence_list(data) if s.created_by.startswith(CREATED_BY)]


def silence_list(data) -> list[Silence]:
    """Alertmanager's /api/v2/silences answer, checked for shape (MonitoringError naming the first that is
    not a silence)."""
    if not isinstance(data, list):
        raise MonitoringError(f"Alertmanager answered a {type(data).__name__}, not a list of silences")
    out = []
    for i, s in enumerate(data):
        ok = isinstance(s, dict) and all(isinstance(s.get(k), str) for k in ("id", "comment", "createdBy", "endsAt")) \
            and isinstance(s.get("status"), dict) and isinstance(s["status"].get("state"), str) \
            and isinstance(s.get("matchers"), list) and all(isinstance(m, dict) for m in s["matchers"])
        if not ok:
            raise MonitoringError(f"Alertmanager answered a silence of another shape (silence {i}: {str(s)[:120]})")
        nodes = next((str(m.get("value", "")) for m in s["matchers"] if m.get("name") in NODE_LABELS), "")
        out.append(Silence(s["id"], s["comment"], s["createdBy"], s["status"]["state"], nodes, s["endsAt"]))
    return sorted(out, key=lambda s: s.ends_at)


def silenced(cluster: Cluster, password: str, port: int = ALERTMANAGER_PORT) -> list[dict]:
    """Alertmanager's alerts held back by a silence, each with ``silences``: the comment and creator of
    each silence that holds it (the alert's status names their ids)."""
    held = [a for a in alert_list(get(cluster, password, port,
                                      "/api/v2/alerts?active=false&silenced=true&inhibited=false&unprocessed=false"))
            if isinstance(a.get("status"), dict) and a["status"].get("silencedBy")]
    if not held:
        return []
    by_id = {s.id: s for s in silence_list(get(cluster, password, port, "/api/v2/silences"))}
    for a in held:
        ids = [i for i in a["status"]["silencedBy"] if isinstance(i, str)]
        a["silences"] = [f"{by_id[i].created_by}: {by_id[i].comment}" if i in by_id else i for i in ids]
    return held
