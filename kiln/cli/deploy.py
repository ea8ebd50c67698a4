"""`kiln deploy`: converge the inventory's hosts with kiln's roles, in parallel, and say what happened."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from kiln.cli.common import (EXIT_BAD_INPUT, EXIT_CHANGES, EXIT_FAILED, EXIT_OK, allow_open_files, complete_hosts,
                             complete_roles, default_inventory, echo, forks_option, inventory_option, json_option,
                             load_or_exit, verbose_option)
from kiln.hostlist import fold, group


def gevent_patch() -> None:
    """pyinfra handles hosts in greenlets; without this their network waits run one after another."""
    from gevent import monkey
    if not monkey.is_module_patched("socket"):
        monkey.patch_all()


@click.command()
@inventory_option
@click.option("--roles", "role_list", shell_complete=complete_roles, default=None,
              help="comma-separated roles to run (default: each host's roles)")
@click.option("--limit", shell_complete=complete_hosts, default=None,
              help="Ansible host pattern: hosts, groups, globs, ~regex, a,b, !x, &y")
@click.option("--dry-run", is_flag=True, help="show what would change on each host, with file diffs; change "
              "nothing. Exit 0: nothing would change, 3: changes pending, 1: a host failed")
@click.option("--no-isolation-gate", "no_gate", is_flag=True,
              help="do not run the isolation suite on the login hosts deployed afterwards (it is run by default; "
              "`kiln check --suite isolation` runs it on demand)")
@forks_option()
@verbose_option
@json_option
def deploy(inventory: Path | None, role_list: str | None, limit: str | None, dry_run: bool, no_gate: bool,
           forks: int, verbose: int, as_json: bool) -> None:
    """Converge hosts: exit 0 all good, 1 some host failed (or, after a deploy, the isolation suite on its
    login hosts), 2 bad input (nothing touched), 3 (--dry-run) changes pending."""
    import roles
    from kiln.inventory.limit import LimitError, resolve_limit
    from kiln.secrets import SecretsError, load_or_create

    inventory = inventory or default_inventory()
    cluster = load_or_exit(inventory)
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
    from kiln.check.isolation_gate import failures, lines as gate_lines, run_gate
    from kiln.cli.progress import Progress
    from kiln.deploy.runner import Deploy
    from kiln.runlog import RunLog

    allow_open_files(min(len(hosts), forks))  # more hosts than --forks go in waves
    log = RunLog(inventory, cluster.name, "deploy-dry-run" if dry_run else "deploy", sys.argv[1:])
    try:
        with Progress.for_command("dry run" if dry_run else "deploy", hosts, as_json, verbose, log) as progress:
            result = Deploy(cluster, secrets, hosts, names, dry_run=dry_run, progress=progress.note,
                            events=progress, log=log, forks=forks).run()
            for h in result.hosts:  # those that ended before any operation ran (lost, refused, a dry run)
                if h.name not in progress.done:
                    progress.finish(h.name, h.status, f"at {h.failed_op!r}" if h.failed_op else "")
        for h in result.hosts:
            if h.error:
                log.event(h.name, f"{h.status} at {h.failed_op!r}: next: {h.next_step}\n{h.error}")
        gate = {}
        if not (dry_run or no_gate or result.failed or result.stopped):
            gate = run_gate(cluster, [h.name for h in result.hosts], forks=forks, log=log)
    finally:
        log.close()
    if as_json:
        echo(json.dumps({**result.as_dict(), "isolation": {h: [v.as_dict() for v in vs] for h, vs in gate.items()},
                         "log": str(log.path)}, indent=2))
    else:
        print_summary(result, verbose)
        for line in gate_lines(gate):
            echo(line)
        echo(f"log: {log.path}")
    if result.failed or result.stopped or failures(gate):
        sys.exit(EXIT_FAILED)
    sys.exit(EXIT_CHANGES if dry_run and any(h.status == "would change" for h in result.hosts) else EXIT_OK)


def print_summary(result, verbose: int = 0) -> None:
    """Hosts with the same outcome on one line (``changed  gpu[001-031,033]``); a failed host always on
    its own, with what it printed and what to do; every host on its own with ``-v``."""
    echo("")
    what = "dry run (nothing changed)" if result.dry_run else "deploy"
    echo(f"{what}: roles {', '.join(result.roles) or '(none)'}, {len(result.hosts)} host(s), "
               f"{result.seconds:.1f} s")
    ok = [h for h in result.hosts if not h.error and not h.failed_op]
    if verbose:
        rows = [([h.name], h) for h in ok]
    else:  # one row per outcome and, in a dry run, the same pending operations
        key = (lambda h: (h.status, tuple(h.changed), tuple(h.diffs))) if result.dry_run else (lambda h: h.status)
        by_name = {h.name: h for h in ok}
        rows = [(hosts, by_name[hosts[0]]) for _, hosts in group({h.name: key(h) for h in ok})]
    for names, h in rows:
        detail = f"({len(names)} hosts)" if len(names) > 1 else ""
        if verbose and h.status in ("changed", "would change"):
            detail = f"{len(h.changed)} of {h.ops} operations"
            if h.status == "changed":
                detail += f" ({len(h.install_changed)} of them install stage)"
        echo(f"  {h.status:<12} {fold(names)}  {detail}".rstrip())
        if result.dry_run:
            for name in h.changed:
                echo(f"      ~ {name}")
            for diff in h.diffs:
                echo("\n".join("      " + line for line in diff.splitlines()))
    for h in result.hosts:
        if h in ok:
            continue
        echo(f"  {h.status:<12} {h.name}  at {h.failed_op!r}" if h.failed_op else f"  {h.status:<12} {h.name}")
        if h.error:
            echo("\n".join("      | " + line for line in h.error.splitlines()))
        if h.next_step:
            echo(f"      next: {h.next_step}")
    for reason, names in group({h.name: tuple(h.reboot_required) for h in result.hosts if h.reboot_required}):
        for line in reason:
            echo(f"  ! {fold(names)}: {line} (kiln patch --reboot needed reboots nodes batch by batch)")
    if result.stopped:
        echo(f"stopped: {result.stopped}")
    counts = result.as_dict()["summary"]
    echo("summary: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
