"""`kiln` entry point: the command group and its sub-commands (their shared options: kiln/cli/common.py)."""

from __future__ import annotations

import sys

import click

from kiln import __version__
from kiln.cli import alerts as alerts_cli
from kiln.cli import check as check_cli
from kiln.cli import deploy as deploy_cli
from kiln.cli import drift as drift_cli
from kiln.cli import image as image_cli
from kiln.cli import inventory as inventory_cli
from kiln.cli import logs as logs_cli
from kiln.cli import patch as patch_cli
from kiln.cli import testbed as testbed_cli
from kiln.cli import remediate as remediate_cli
from kiln.cli import usage as usage_cli
from kiln.cli import vagrant as vagrant_cli


class KilnGroup(click.Group):
    """Ctrl-C ends any command with one line and exit 130 instead of a traceback."""

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException, SystemExit):
            raise
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)


@click.group(cls=KilnGroup)
@click.version_option(__version__, prog_name="kiln")
def main() -> None:
    """kiln provisions, validates and patches GPU clusters."""


for command in (alerts_cli.alerts, check_cli.check, deploy_cli.deploy, drift_cli.drift, image_cli.image, inventory_cli.inventory, logs_cli.logs, patch_cli.patch, remediate_cli.remediate, testbed_cli.testbed,
                usage_cli.usage, vagrant_cli.vagrant):
    main.add_command(command)
