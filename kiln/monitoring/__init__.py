"""kiln's monitoring: the alert rules it ships (alert_rules), what reads Prometheus and Alertmanager
(``kiln alerts``), and the ports every monitoring listener uses."""

NODE_EXPORTER_PORT, DCGM_EXPORTER_PORT, PROMETHEUS_PORT, ALERTMANAGER_PORT, ALERTMANAGER_CLUSTER_PORT = (
    9100, 9400, 9090, 9093, 9094)
