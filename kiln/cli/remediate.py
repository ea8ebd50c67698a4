"""`kiln remediate`: one look of kiln-remediate on the controller, by hand (what the service does every
``kiln_remediation.interval_seconds``), a dry run of it, or the circuit breaker closed."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kiln.cli.common import (EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, default_inventory, echo, inventory_option,
                             json_option, load_or_exit)


@click.command()
@inventory_option
@click.option("--once", is_flag=True, help="one look, then exit (a run by hand always is; the service loops)")
@click.option("--dry-run", is_flag=True, help="say what would be done to each node; do nothing")
@click.option("--reset-breaker", is_flag=True, help="close the circuit breaker after an outage (a person's call)")
@json_option
def remediate(inventory: Path | None, once: bool, dry_run: bool, reset_breaker: bool,  # noqa: ARG001 (once)
              as_json: bool) -> None:
    """Repair drained compute nodes now: exit 0 done, 1 the controller could not look, 2 bad input or
    remediation not enabled in the inventory."""
    from kiln.check.remote import RemoteCheck
    from kiln.shell import command

    cluster = load_or_exit(inventory or default_inventory())
    if not cluster.setting("remediation").enabled:
        echo("kiln_remediation.enabled is false in this inventory: set it and run kiln deploy first", err=True)
        sys.exit(EXIT_BAD_INPUT)
    controller = cluster.controllers[0]
    words = ["/usr/local/sbin/kiln-remediate", "--once"] + (["--dry-run"] if dry_run else []) + \
        (["--json"] if as_json else []) + (["--reset-breaker"] if reset_breaker else [])
    with RemoteCheck(cluster, [controller], []) as remote:
        out = remote.node(controller).run(command(*words))
    if out.stdout:
        echo(out.stdout.rstrip("\n"))
    if out.stderr.strip():
        echo(out.stderr.rstrip("\n"), err=True)
    sys.exit(EXIT_OK if out.rc == 0 else EXIT_FAILED)
