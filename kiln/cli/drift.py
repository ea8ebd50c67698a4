"""`kiln drift`: what differs on each node from its image and from kiln's own pins and files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from kiln.cli.common import (EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, default_inventory, echo, inventory_option,
                             json_option, load_or_exit)


@click.command()
@inventory_option
@click.option("--limit", default=None, help="Ansible host pattern: hosts, groups, globs, ~regex, a,b, !x, &y")
@click.option("--image", "image_name", default=None, metavar="NAME",
              help="compare with this image from the store (default: the manifest each node carries)")
@json_option
def drift(inventory: Path | None, limit: str | None, image_name: str | None, as_json: bool) -> None:
    """Report drift per node: exit 0 none, 1 drift or a node unreachable, 2 bad input (nothing touched)."""
    from kiln.image.store import ImageNotFound, find
    from kiln.inventory.limit import LimitError, resolve_limit
    from kiln.secrets import SecretsError, load_or_create

    cluster = load_or_exit(inventory or default_inventory())
    try:
        names = resolve_limit(cluster, limit)
        manifest = find(image_name).manifest if image_name else None
        secrets = load_or_create(cluster, create=False)
    except (LimitError, ImageNotFound, SecretsError) as e:
        echo(f"{e}; nothing was touched", err=True)
        sys.exit(EXIT_BAD_INPUT)
    from kiln import drift as drift_mod
    say = (lambda line: echo(line, err=True)) if as_json else echo
    found = drift_mod.image_drift(cluster, names, manifest, say)
    from kiln.cli.deploy import gevent_patch
    gevent_patch()
    drift_mod.kiln_drift(cluster, secrets, names, found, say)
    nodes = [found[n] for n in names]
    counts = {s: sum(d.status == s for d in nodes) for s in ("no drift", "drift", "unreachable")}
    if as_json:
        echo(json.dumps({"hosts": [d.as_dict() for d in nodes], "summary": counts}, indent=2))
    else:
        _print(nodes, counts)
    sys.exit(EXIT_OK if counts["no drift"] == len(nodes) else EXIT_FAILED)


def _print(nodes, counts) -> None:
    echo("")
    width = max([len(d.host) for d in nodes] + [4])
    for d in nodes:
        echo(f"  {d.host:<{width}}  {d.status:<11} {('image ' + d.image) if d.image else '(no image)'}")
        if d.error:
            echo(f"      | {d.error}")
            echo("      next: check the node is up and reachable over ssh, then run kiln drift again")
        i = d.image_drift
        for key, label in (("packages_added", "package added"), ("packages_removed", "package removed")):
            for name, version in (i.get(key) or {}).items():
                echo(f"      {label}: {name} {version}")
        for name, (was, now) in (i.get("packages_changed") or {}).items():
            echo(f"      package at another version: {name} {was} in the image, {now} here")
        for key, label in (("holds_lost", "hold lost"), ("holds_added", "held here only"),
                           ("units_enabled", "unit enabled here only"), ("units_disabled", "unit disabled here"),
                           ("files_changed", "managed file changed")):
            for name in i.get(key) or []:
                echo(f"      {label}: {name}")
        for name in d.would_change:
            echo(f"      kiln deploy would change: {name}")
        for diff in d.diffs:
            echo("\n".join("        " + line for line in diff.splitlines()))
    echo("summary: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
