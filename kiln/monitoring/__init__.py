"""kiln's monitoring: the alert rules it ships, and what reads Prometheus and Alertmanager (kiln alerts)."""
