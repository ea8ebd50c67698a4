"""kiln's monitoring: the alert rules it ships (alert_rules), what reads Prometheus and Alertmanager
(``kiln alerts``), the ports every monitoring listener uses, and how every client reaches them."""

from __future__ import annotations

NODE_EXPORTER_PORT, DCGM_EXPORTER_PORT, PROMETHEUS_PORT, ALERTMANAGER_PORT, ALERTMANAGER_CLUSTER_PORT = (
    9100, 9400, 9090, 9093, 9094)


def scheme(cluster) -> str:
    """How every client reaches the listeners: https where they serve TLS (kiln_monitoring_tls), else http."""
    return "https" if cluster.setting("monitoring_tls") else "http"
