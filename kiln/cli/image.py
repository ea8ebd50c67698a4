"""`kiln image build|list|rm`: node images built from the inventory's roles, and the store that keeps them."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from kiln.cli.common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, default_inventory, echo, inventory_option, json_option, \
    load_or_exit


@click.group()
def image() -> None:
    """Build node images from the inventory's roles (install stages only) and manage the image store."""


def _formats(value: str) -> list[str]:
    from kiln.image.build import FORMATS
    wanted = [f.strip() for f in value.split(",") if f.strip()]
    bad = [f for f in wanted if f not in FORMATS]
    if bad or not wanted:
        raise click.BadParameter(f"{', '.join(bad) or '(none)'}: give some of {', '.join(FORMATS)}")
    return wanted if "dir" in wanted else ["dir", *wanted]


def _testbed_proxy(path: Path) -> str | None:
    """The testbed's apt proxy, when ``path`` is a testbed's inventory and its proxy runs."""
    marker = path / ".kiln-testbed"
    if not marker.is_file():
        return None
    from kiln.testbed.testbed import Testbed
    testbed = Testbed(marker.read_text().strip(), progress=lambda line: None)
    return testbed.proxy.url if testbed.proxy.running() else None


@image.command("build")
@inventory_option
@click.option("--node-type", default=None, help="the node type (a sub-group of compute) to build for")
@click.option("--group", default=None, help="an inventory group to build for (e.g. slurm_controller)")
@click.option("--format", "fmt", default="dir", show_default=True, help="outputs, comma-separated: dir, tar, qcow2, vagrant-box")
@click.option("--plan", is_flag=True, help="print the recipe (bootstrap, install-stage operations, files); build nothing")
@json_option
def build_cmd(inventory: Path | None, node_type: str | None, group: str | None, fmt: str, plan: bool,
              as_json: bool) -> None:
    """Build an image per target (default: every node type): exit 0 built or found, 1 a build failed, 2 bad input."""
    from kiln.image.recipe import RecipeError, recipe, select

    if node_type and group:
        echo("give --node-type or --group, not both; nothing was built", err=True)
        sys.exit(EXIT_BAD_INPUT)
    try:
        formats = _formats(fmt)
    except click.BadParameter as e:
        echo(f"--format {e.message}; nothing was built", err=True)
        sys.exit(EXIT_BAD_INPUT)
    path = inventory or default_inventory()
    cluster = load_or_exit(path, "nothing was built")
    try:
        recipes = [recipe(cluster, t) for t in select(cluster, node_type, group)]
    except RecipeError as e:
        echo(f"{path}: {e}; nothing was built", err=True)
        sys.exit(EXIT_BAD_INPUT)
    if plan:
        _print_plan(recipes, as_json)
        sys.exit(EXIT_OK)
    if os.geteuid() != 0:
        echo("kiln image build needs root (chroot, mounts in a private namespace); nothing was built", err=True)
        sys.exit(EXIT_BAD_INPUT)
    from kiln.image.build import ImageBuildError, build
    from kiln.image.outputs import OutputError
    from kiln.cli.progress import Progress

    proxy = _testbed_proxy(path)
    results, failed = [], []
    # each image's stage and install-stage operation, live on a terminal; with --json on standard error
    with Progress.for_command("image build", [r.name for r in recipes], as_json,
                              stream=sys.stderr if as_json else sys.stdout) as progress:
        for r in recipes:
            try:
                result = build(cluster, r, formats, progress=progress.note, proxy=proxy, events=progress)
                results.append(result)
                progress.finish(r.name, "found" if result.cached else "built", f"{result.seconds:.0f} s")
            except (ImageBuildError, OutputError) as e:
                failed.append({"name": r.name, "error": str(e)})
                progress.finish(r.name, "failed", str(e).splitlines()[0])
    for f in failed:
        echo(f"{f['name']}: {f['error']}", err=True)
    if as_json:
        echo(json.dumps({"images": [b.as_dict() for b in results], "failed": failed}, indent=2))
    else:
        for b in results:
            sizes = ", ".join(f"{f} {b.sizes[f] / 2**20:.0f} MiB" for f in b.formats)
            echo(f"{b.name}: {'found in the store (unchanged recipe)' if b.cached else 'built'} in {b.seconds:.1f} s; "
                 f"{sizes}; {b.path}")
    sys.exit(EXIT_FAILED if failed else EXIT_OK)


def _print_plan(recipes, as_json: bool) -> None:
    from kiln.image.base import bootstrap_commands
    plans = [{"name": r.name, "target": r.target, "os": r.os, "roles": list(r.roles),
              "bootstrap": bootstrap_commands(r.os, "ROOT"),
              "install": [{"operation": name, "commands": list(cmds)} for name, cmds in r.steps],
              "files": list(r.files)} for r in recipes]
    if as_json:
        echo(json.dumps(plans, indent=2))
        return
    for p in plans:
        echo(f"{p['name']} ({p['os']}; roles {', '.join(p['roles'])})")
        for c in p["bootstrap"]:
            echo(f"  $ {c}")
        for step in p["install"]:
            echo(f"  {step['operation']}")
            for c in step["commands"]:
                echo(f"      {c[:160]}")


@image.command("list")
@json_option
def list_cmd(as_json: bool) -> None:
    """The images in the store, oldest first."""
    from kiln.image.store import STORE, images
    found = images()
    rows = [{"name": i.name, "target": i.manifest.get("target"), "os": i.manifest.get("os"),
             "built": i.manifest.get("built"), "formats": i.formats, "packages": len(i.manifest.get("packages", {})),
             "bytes": i.size("dir"), "path": str(i.path)} for i in found]
    if as_json:
        echo(json.dumps(rows, indent=2))
        return
    if not rows:
        echo(f"no images in {STORE} (kiln image build makes one)")
    for r in rows:
        echo(f"{r['name']}  {r['os']}  built {r['built']}  {r['packages']} packages  {r['bytes'] / 2**20:.0f} MiB  "
             f"{','.join(r['formats'])}")


@image.command("rm")
@click.argument("names", nargs=-1, required=True)
def rm_cmd(names: tuple[str, ...]) -> None:
    """Remove images from the store by name (exit 2 when one is not there or in use; the others are removed)."""
    from kiln.image.store import ImageInUse, images, remove
    missing = 0
    by_name = {i.name: i for i in images()}
    for name in names:
        if name not in by_name:
            echo(f"{name}: no such image (kiln image list shows them)", err=True)
            missing += 1
            continue
        try:
            remove(by_name[name])
        except ImageInUse as e:
            echo(str(e), err=True)
            missing += 1
            continue
        echo(f"removed {name}")
    sys.exit(EXIT_BAD_INPUT if missing else EXIT_OK)


@image.command("prune")
@click.option("--keep", type=click.IntRange(1, 100), default=2, show_default=True,
              help="images to keep of each cluster, target and OS (the newest)")
@click.option("--dry-run", is_flag=True, help="say what would be removed, remove nothing")
def prune_cmd(keep: int, dry_run: bool) -> None:
    """Remove older images: all but the --keep newest of each cluster, target and OS. An image a
    testbed's nodes boot from (up or stopped) is kept, whatever its age."""
    from kiln.image.store import STORE, ImageInUse, images, prunable, remove
    from kiln.testbed.testbed import images_in_use
    used = images_in_use()
    found = images()
    doomed = prunable(found, keep, set(used))
    freed = failed = 0
    for image in doomed:
        size = image.size("dir") + sum(image.size(f) for f in image.formats if f != "dir")
        if dry_run:
            echo(f"would remove {image.name} ({size / 2**20:.0f} MiB)")
            freed += size
            continue
        try:
            remove(image)
        except ImageInUse as e:
            echo(str(e), err=True)
            failed += 1
            continue
        echo(f"removed {image.name} ({size / 2**20:.0f} MiB)")
        freed += size
    for name, testbeds in sorted(used.items()):
        if any(i.name == name for i in found):
            echo(f"kept {name}: testbed {', '.join(testbeds)} boots from it")
    verb = "would free" if dry_run else "freed"
    echo(f"{verb} {freed / 2**20:.0f} MiB in {STORE}: {len(doomed) - failed} of {len(found)} image(s), "
         f"keeping the {keep} newest of each cluster, target and OS")
    sys.exit(EXIT_BAD_INPUT if failed else EXIT_OK)
