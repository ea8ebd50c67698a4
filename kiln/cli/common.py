"""What every `kiln` sub-command shares: exit codes, the inventory and JSON options, loading the
inventory or exiting 2, and printing for a person (node output made visible)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import click

from kiln.inventory.location import default_inventory, testbed_inventory

__all__ = ["EXIT_OK", "EXIT_FAILED", "EXIT_BAD_INPUT", "default_inventory", "testbed_inventory", "echo", "visible",
           "inventory_option", "json_option", "load_or_exit", "validate_inventory"]

# Exit codes (README, Exit codes): 0 all good, 1 something failed on a node, 2 bad input or usage.
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


_HIDDEN = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def visible(text: str) -> str:
    """``text`` with every control and escape character but newline and tab written out (``\\x1b``):
    what a node printed (a failure's tail, a diff, a check's message) never drives the terminal."""
    return _HIDDEN.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def echo(text: str = "", err: bool = False) -> None:
    """Print a line for a person; node output in it is made visible (``visible``)."""
    click.echo(visible(str(text)), err=err)


def _vault_password_file(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    ctx.meta["kiln_vault_password_file"] = value  # for this command only (validate reads the variable too)


def vault_password_file() -> str | None:
    """``--vault-password-file`` of the running command, if given (else the loader reads
    ANSIBLE_VAULT_PASSWORD_FILE, as Ansible does)."""
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get("kiln_vault_password_file") if ctx else None


def validate_inventory(path: Path):
    """(cluster or None, errors) of the inventory at ``path``, with the command's vault password."""
    from kiln.inventory import validate

    return validate(path, vault_password_file=vault_password_file())


def inventory_option(command):
    """``-i DIR`` and ``--vault-password-file FILE`` (as Ansible's; also ANSIBLE_VAULT_PASSWORD_FILE)."""
    command = click.option("--vault-password-file", type=click.Path(dir_okay=False), default=None,
                           expose_value=False, callback=_vault_password_file, is_eager=True,
                           help="Ansible Vault password file, for encrypted values kiln reads "
                                "(default: $ANSIBLE_VAULT_PASSWORD_FILE)")(command)
    return click.option("-i", "--inventory", "inventory", type=click.Path(path_type=Path), default=None,
                        help="inventory directory (default: $KILN_INVENTORY, else ./inventory/testbed)")(command)


json_option = click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")


def load_or_exit(path: Path, untouched: str = "nothing was touched"):
    """The validated cluster, or every inventory error on stderr and exit 2."""
    cluster, errors = validate_inventory(path)
    if errors:
        echo(f"{path}: {len(errors)} error(s); {untouched}", err=True)
        for error in errors:
            echo(f"  {error}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    return cluster
