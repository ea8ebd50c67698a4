"""`kiln` entry point and the options every sub-command shares."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import click

from kiln import __version__

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_INVENTORY = REPO_ROOT / "inventory" / "testbed"

# Exit codes (DESIGN.md): 0 all good, 1 something failed on a node, 2 bad input or usage.
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


_HIDDEN = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def visible(text: str) -> str:
    """``text`` with every control and escape character but newline and tab written out (``\\x1b``):
    what a node printed (a failure's tail, a diff, a check's message) never drives the terminal."""
    return _HIDDEN.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def echo(text: str = "", err: bool = False) -> None:
    """Print a line for a person; node output in it is made visible (``visible``)."""
    click.echo(visible(str(text)), err=err)


def default_inventory() -> Path:
    return Path(os.environ.get("KILN_INVENTORY") or DEFAULT_INVENTORY)


def _vault_password_file(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value:  # the loader reads it where Ansible does
        os.environ["ANSIBLE_VAULT_PASSWORD_FILE"] = value


def inventory_option(command):
    """``-i DIR`` and ``--vault-password-file FILE`` (as Ansible's; also ANSIBLE_VAULT_PASSWORD_FILE)."""
    command = click.option("--vault-password-file", type=click.Path(dir_okay=False), default=None,
                           expose_value=False, callback=_vault_password_file, is_eager=True,
                           help="Ansible Vault password file, for encrypted values kiln reads "
                                "(default: $ANSIBLE_VAULT_PASSWORD_FILE)")(command)
    return click.option("-i", "--inventory", "inventory", type=click.Path(path_type=Path), default=None,
                        help="inventory directory (default: $KILN_INVENTORY, else inventory/testbed)")(command)


json_option = click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")


def load_or_exit(path: Path, untouched: str = "nothing was touched"):
    """The validated cluster, or every inventory error on stderr and exit 2."""
    from kiln.inventory import validate

    cluster, errors = validate(path)
    if errors:
        echo(f"{path}: {len(errors)} error(s); {untouched}", err=True)
        for error in errors:
            echo(f"  {error}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    return cluster


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


def _register() -> None:
    from kiln.cli import check as check_cli
    from kiln.cli import deploy as deploy_cli
    from kiln.cli import inventory as inventory_cli
    from kiln.cli import patch as patch_cli
    from kiln.cli import testbed as testbed_cli

    main.add_command(check_cli.check)
    main.add_command(deploy_cli.deploy)
    main.add_command(inventory_cli.inventory)
    main.add_command(patch_cli.patch)
    main.add_command(testbed_cli.testbed)


_register()
