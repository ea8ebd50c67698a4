"""`kiln deploy`: converge the inventory's hosts with kiln's roles, in parallel, and say what happened."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from kiln.cli.common import (EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, default_inventory, echo, inventory_option,
                             json_option, load_or_exit)


def gevent_patch() -> None:
    """pyinfra handles hosts in greenlets; without this their network waits run one after another."""
    from gevent import monkey
    if not monkey.is_module_patched("socket"):
        monkey.patch_all()


@click.command()
@inventory_option
@click.option("--roles", "role_list", default=None, help="comma-separated roles to run (default: each host's roles)")
@click.option("--limit", default=None, help="Ansible host pattern: hosts, groups, globs, ~regex, a,b, !x, &y")
@click.option("--dry-run", is_flag=True, help="show what would change on each host, with file diffs; change nothing")
@json_option
def deploy(inventory: Path | None, role_list: str | None, limit: str | None, dry_run: bool, as_json: bool) -> None:
    """Converge hosts: exit 0 all good, 1 some host failed, 2 bad input (nothing touched)."""
    import roles
    from kiln.inventory.limit import LimitError, resolve_limit
    from kiln.secrets import SecretsError, load_or_create

    cluster = load_or_exit(inventory or default_inventory())
    names = None
    if role_list is not None:
        names = [r.strip() for r in role_list.split(",") if r.strip()]
        unknown = [r for r in names if r not in roles.ORDER]
        if unknown or not names:
            echo(f"--roles: unknown role(s) {', '.join(unknown) or '(none given)'}; kiln has "
                       f"{', '.join(roles.ORDER)}; nothing was touched", err=True)
            sys.exit(EXIT_BAD_INPUT)
    try:
        hosts = resolve_limit(cluster, limit)
        secrets = load_or_create(cluster, create=not dry_run)
    except (LimitError, SecretsError) as e:
        echo(f"{e}; nothing was touched", err=True)
        sys.exit(EXIT_BAD_INPUT)

    # After the inventory is loaded: ansible-core probes socket behaviour at import, which a patched
    # socket module reports as an error.
    gevent_patch()
    from kiln.deploy.runner import Deploy
    say = (lambda line: echo(line, err=True)) if as_json else echo
    result = Deploy(cluster, secrets, hosts, names, dry_run=dry_run, progress=say).run()
    if as_json:
        echo(json.dumps(result.as_dict(), indent=2))
    else:
        _print_summary(result)
    sys.exit(EXIT_FAILED if result.failed or result.stopped else EXIT_OK)


def _print_summary(result) -> None:
    echo("")
    what = "dry run (nothing changed)" if result.dry_run else "deploy"
    echo(f"{what}: roles {', '.join(result.roles) or '(none)'}, {len(result.hosts)} host(s), "
               f"{result.seconds:.1f} s")
    width = max([len(h.name) for h in result.hosts] + [4])
    for h in result.hosts:
        detail = f"{len(h.changed)} of {h.ops} operations" if h.status in ("changed", "would change") else ""
        if h.status == "changed":
            detail += f" ({len(h.install_changed)} of them install stage)"
        if h.failed_op:
            detail = f"at {h.failed_op!r}"
        echo(f"  {h.name:<{width}}  {h.status:<12} {detail}".rstrip())
        if result.dry_run:
            for name in h.changed:
                echo(f"      ~ {name}")
            for diff in h.diffs:
                echo("\n".join("      " + line for line in diff.splitlines()))
        if h.error:
            echo("\n".join("      | " + line for line in h.error.splitlines()))
        if h.next_step:
            echo(f"      next: {h.next_step}")
        for reason in h.reboot_required:
            echo(f"      ! {reason} (kiln patch --reboot needed reboots nodes batch by batch)")
    if result.stopped:
        echo(f"stopped: {result.stopped}")
    counts = result.as_dict()["summary"]
    echo("summary: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
