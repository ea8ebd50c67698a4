"""Validation of the day-2 settings against the rest of the inventory: monitoring (roles/monitoring.py) and
the prices of kiln usage (kiln/usage)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kiln.inventory import model
from kiln.inventory.loader import RawInventory

# One billing unit: Slurm's billing TRES is an integer of hundredths of the currency per hour
# (kiln/usage/billing.py UNITS); a price below it bills 0.
SMALLEST_PRICE = 0.01

# Operating systems whose own repositories carry Prometheus, Alertmanager and node_exporter
MONITORING_OS = ("debian12", "debian13", "ubuntu2204", "ubuntu2404")


def check_monitoring(raw: RawInventory, hosts: dict[str, model.Host], values: dict[str, Any], add: Any) -> None:
    receivers = values.get("kiln_monitoring_receivers") or []
    file, line = raw.origin("kiln_monitoring_receivers", default="group_vars/all/")
    names = [r.name for r in receivers]
    for name in sorted(n for n, c in Counter(names).items() if c > 1):
        add(file, "kiln_monitoring_receivers", f"receiver name {name!r} is used twice: give each receiver its own", line)
    if "kiln-alertmanager-only" in names:
        add(file, "kiln_monitoring_receivers", "receiver name 'kiln-alertmanager-only' is kiln's own default "
            "receiver: choose another name", line)
    if any(r.email_to for r in receivers) and values.get("kiln_monitoring_smtp") is None:
        add(file, "kiln_monitoring_receivers", "an e-mail receiver needs kiln_monitoring_smtp (the relay and the "
            "From: address) in group_vars/all/", line)
    if not any(h.monitored for h in hosts.values()):
        return
    for host in hosts.values():
        if host.os not in MONITORING_OS:
            where = "Prometheus and Alertmanager" if host.in_group(model.MONITORING) else "node_exporter"
            file, line = raw.origin("kiln_os", host=host.name)
            add(file, "kiln_os",
                f"{host.name} runs {host.os}, whose repositories carry no {where} package kiln can pin (monitoring "
                f"runs on {', '.join(MONITORING_OS)}): leave the monitoring group out of this inventory, or "
                "monitor these hosts with the site's own tools", line)


def check_usage_prices(raw: RawInventory, node_types: dict, hosts: dict, values: dict[str, Any], add: Any) -> None:
    """Every priced node type exists (a misspelt one would price its jobs at 0), no price is below the
    hundredth Slurm's integer billing keeps (it would bill 0), and the GPU node types of one partition share one price: Slurm bills a partition by one set of weights (kiln/usage/billing.py)."""
    prices = values.get("kiln_usage_gpu_hour_prices") or {}
    file, line = raw.origin("kiln_usage_gpu_hour_prices", default="group_vars/all/")
    currency = values.get("kiln_usage_currency") or "USD"
    for name, price in prices.items():
        if 0 < price < SMALLEST_PRICE:
            add(file, f"kiln_usage_gpu_hour_prices.{name}", f"{price} {currency} per GPU-hour is less than one "
                f"hundredth: Slurm's billing counts whole hundredths of the currency per hour, so its jobs would "
                "be billed 0; give 0 (free) or at least 0.01", line)
        if name not in node_types:
            add(file, f"kiln_usage_gpu_hour_prices.{name}", f"{name!r} is not a node type of this inventory (node "
                f"types: {', '.join(sorted(node_types)) or 'none'}): a price for it would never apply", line)
    if not prices:
        return
    compute = [h for h in raw.groups.get(model.COMPUTE, ()) if h in hosts]
    parts = values.get("kiln_slurm_partitions") or []
    members = ({p.name: [h for g in p.groups for h in raw.groups.get(g, ()) if h in compute] for p in parts}
               or {model.DEFAULT_PARTITION: compute})
    for part, names in members.items():
        priced = {hosts[h].node_type: prices.get(hosts[h].node_type or "") for h in names if hosts[h].gpu_count}
        if len(set(priced.values())) > 1:
            detail = ", ".join(f"{t}: {'no price' if v is None else v}" for t, v in sorted(priced.items(), key=str))
            add(file, f"kiln_usage_gpu_hour_prices.{sorted(priced, key=str)[0]}",
                f"partition {part!r} holds GPU node types of different prices ({detail}); Slurm bills a partition "
                "by one set of weights: give them one price, or put each in a partition of its own", line)
