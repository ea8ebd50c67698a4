"""What every `kiln` sub-command shares: exit codes, the inventory and JSON options, loading the
inventory or exiting 2, and printing for a person (node output made visible)."""

from __future__ import annotations

import re
import sys
from datetime import datetime, timezone
from pathlib import Path

import click

from kiln.inventory.location import default_inventory, testbed_inventory

__all__ = ["EXIT_OK", "EXIT_FAILED", "EXIT_BAD_INPUT", "EXIT_CHANGES", "default_inventory", "testbed_inventory",
           "echo", "visible", "inventory_option", "json_option", "forks_option", "verbose_option", "load_or_exit",
           "validate_inventory", "allow_open_files"]

# Exit codes (README, Exit codes): 0 all good, 1 something failed on a node, 2 bad input or usage,
# 3 a dry run found changes pending (deploy --dry-run, patch --dry-run).
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_CHANGES = 0, 1, 2, 3
DEFAULT_FORKS = 256


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


json_option = click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table (and nothing else "
                           "on standard output)")
verbose_option = click.option("-v", "--verbose", count=True, help="per-host detail instead of folded host lists; "
                              "on a terminal, one line per event instead of the live display")
def forks_option(default: int = DEFAULT_FORKS):
    return click.option("--forks", default=default, show_default=True, type=click.IntRange(min=1),
                        help="hosts worked on at once")


def allow_open_files(connections: int) -> None:
    """Raise this process's open-file limit (toward its hard limit) when ``connections`` ssh
    connections, held for the whole run, could pass the soft one (often 1024)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 64 + 2 * connections
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))


def load_or_exit(path: Path, untouched: str = "nothing was touched"):
    """The validated cluster, or every inventory error on stderr and exit 2."""
    cluster, errors = validate_inventory(path)
    if errors:
        echo(f"{path}: {len(errors)} error(s); {untouched}", err=True)
        for error in errors:
            echo(f"  {error}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    return cluster


# --- shell completion (README, Shell completion): click asks these while the user presses Tab ---
def _last_word(incomplete: str) -> tuple[str, str]:
    """(what is before the word being typed, the word) in a comma list such as ``slurm,nv``."""
    head, _, word = incomplete.rpartition(",")
    return (head + "," if head else ""), word


def complete_hosts(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """Host and group names of the inventory in ``-i`` (or the default one), read without ansible-core."""
    from kiln.inventory.files import read_inventory_files

    root = ctx.params.get("inventory") or default_inventory()
    try:
        files = read_inventory_files(Path(root).resolve())
    except Exception:  # noqa: BLE001 - a completion never fails the shell
        return []
    groups = set(files.group_vars) | {"all"}
    head, word = _last_word(incomplete)
    head += word[: len(word) - len(word.lstrip("!&"))]  # a pattern's ! (not) or & (and) stays
    word = word.lstrip("!&")
    return [head + n for n in sorted(set(files.host_source) | groups) if n.startswith(word)]


def complete_roles(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    import roles

    head, word = _last_word(incomplete)
    return [head + r for r in roles.ORDER if r.startswith(word)]


def complete_suites(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    from checks.suites import SUITES

    head, word = _last_word(incomplete)
    return [head + s for s in SUITES if s.startswith(word)]


def utc_time(text: str | None, default: datetime) -> datetime:
    """A command line's date or time, read as UTC; ``default`` when none was given."""
    if not text:
        return default
    for fmt in ("%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M"):
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=timezone.utc)
        except ValueError:
            continue
    raise click.BadParameter(f"{text!r} is not a date: give YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS] (UTC)")
