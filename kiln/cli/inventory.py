"""`kiln inventory validate|show`: check an inventory and see what kiln resolves from it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from kiln.cli.common import (EXIT_BAD_INPUT, EXIT_OK, complete_hosts, default_inventory, echo, inventory_option,
                             json_option, validate_inventory)


@click.group()
def inventory() -> None:
    """Validate and inspect an inventory (nothing connects to any host)."""


@inventory.command("validate")
@inventory_option
@json_option
def validate_cmd(inventory: Path | None, as_json: bool) -> None:
    """Validate the whole inventory: exit 0 and a summary, or exit 2 and every error."""
    path = inventory or default_inventory()
    cluster, errors = validate_inventory(path)
    if as_json:
        echo(json.dumps({
            "valid": not errors,
            "inventory": str(path),
            "errors": [e.as_dict() for e in errors],
            "summary": cluster.summary() if cluster else {},
        }, indent=2))
        sys.exit(EXIT_BAD_INPUT if errors else EXIT_OK)
    if errors:
        echo(f"{path}: {len(errors)} error(s); nothing was touched", err=True)
        for error in errors:
            echo(f"  {error}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    s = cluster.summary()
    echo(f"{path}: valid. cluster {s['cluster']}: {s['hosts']} hosts, {s['gpus_total']} GPUs")
    echo("  groups:     " + ", ".join(f"{g} {n}" for g, n in s["groups"].items()))
    for name, t in s["node_types"].items():
        gpus = f"{t['gpus_per_node']}x {t['gpu_model']}" if t["gpus_per_node"] else "no GPUs"
        echo(f"  node type:  {name}: {t['hosts']} nodes, {gpus}")
    echo("  partitions: " + (", ".join(s["partitions"]) or "(none)"))
    echo("  teams:      " + (", ".join(f"{t} ({sh} shares)" for t, sh in s["teams"].items()) or "(none)"))
    echo("  versions:   " + ", ".join(f"{k}={v}" for k, v in s["versions"].items() if v))
    if s["ignored"]:
        shown = ", ".join(s["ignored"][:10]) + (f" and {len(s['ignored']) - 10} more" if len(s["ignored"]) > 10 else "")
        echo(f"  ignored:    {len(s['ignored'])} host(s) in no kiln group get no roles: {shown}")


@inventory.command("show")
@inventory_option
@click.option("--host", "host_name", shell_complete=complete_hosts, default=None,
              help="show one host only")
@click.option("--limit", shell_complete=complete_hosts, default=None,
              help="Ansible host pattern: list only the matching hosts' names (as "
              "ansible --list-hosts does)")
@json_option
def show_cmd(inventory: Path | None, host_name: str | None, limit: str | None, as_json: bool) -> None:
    """Print the resolved variables of every host (or one), after precedence and templating; with --limit,
    the names of the hosts a pattern selects."""
    path = inventory or default_inventory()
    cluster, errors = validate_inventory(path)
    if errors:
        for error in errors:
            echo(f"  {error}", err=True)
        echo(f"{path}: invalid; run `kiln inventory validate -i {path}`", err=True)
        sys.exit(EXIT_BAD_INPUT)
    hosts = cluster.hosts
    if limit is not None:
        from kiln.inventory.limit import LimitError, resolve_limit
        try:
            names = resolve_limit(cluster, limit)
        except LimitError as e:
            echo(f"{e}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        echo(json.dumps(names) if as_json else "\n".join(names))
        return
    if host_name is not None:
        if host_name not in hosts:
            echo(f"no host {host_name!r} in {path}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        hosts = {host_name: hosts[host_name]}
    data = {
        name: {"groups": list(h.groups), "node_type": h.node_type, "roles": sorted(h.roles),
               "connection": h.connection, "vars": dict(sorted(h.vars.items()))}
        for name, h in hosts.items()
    }
    if as_json:
        echo(json.dumps(data, indent=2, default=str))
        return
    for name, d in data.items():
        echo(f"{name}  groups={','.join(d['groups'])}  roles={','.join(d['roles'])}")
        for key, value in d["vars"].items():
            echo(f"    {key}: {json.dumps(value, default=str)}")


@inventory.command("settings")
@click.option("--markdown", is_flag=True, help="print the reference as Markdown (docs/settings.md is this output)")
@json_option
def settings_cmd(markdown: bool, as_json: bool) -> None:
    """Every kiln setting and version pin: type, default, scope and meaning (from the schema itself)."""
    from kiln.inventory import reference

    if as_json:
        click.echo(json.dumps({"settings": reference.settings(), "fields": reference.fields(),
                               "pins": reference.pins()}, indent=2, default=str))
    elif markdown:
        click.echo(reference.markdown(), nl=False)
    else:
        click.echo(reference.text())

