"""`kiln alerts`: the alerts firing in Alertmanager, folded by alert into host lists, with what to do."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from kiln.cli.common import (EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, default_inventory, echo, inventory_option,
                             json_option, load_or_exit)


@click.command()
@inventory_option
@json_option
def alerts(inventory: Path | None, as_json: bool) -> None:
    """Show the alerts firing now, and those a silence holds back (planned work): exit 0 none firing, 1
    some, 2 Alertmanager unreachable or no monitoring here."""
    from kiln.monitoring.alerts import MonitoringError, firing, folded
    from kiln.monitoring.silences import silenced
    from kiln.secrets import SecretsError, monitoring_password

    cluster = load_or_exit(inventory or default_inventory())
    try:
        password = monitoring_password(cluster)
        found = folded(firing(cluster, password))
        held = folded(silenced(cluster, password))
    except (MonitoringError, SecretsError) as e:
        echo(str(e), err=True)
        sys.exit(EXIT_BAD_INPUT)
    if as_json:
        echo(json.dumps({"alerts": [f.as_dict() for f in found], "silenced": [f.as_dict() for f in held]}, indent=2))
        sys.exit(EXIT_FAILED if found else EXIT_OK)
    for f in held:
        echo(f"held back: {f.alert} on {f.hosts} (x{f.count}) by {'; '.join(f.silences)}")
    if not found:
        echo("no alerts firing")
    else:
        width = max(len(f.alert) for f in found)
        hosts = max(len(f.hosts) for f in found)
        for f in found:
            echo(f"{f.alert:<{width}}  {f.severity:<8}  {f.hosts:<{hosts}}  x{f.count:<3} since {f.since[:19]}")
            echo(f"    {f.summary}")
            echo(f"    next: {f.runbook}")
    sys.exit(EXIT_FAILED if found else EXIT_OK)
