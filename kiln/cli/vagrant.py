"""`kiln vagrant box|inventory|host`: a Vagrant cluster of kiln nodes (see kiln/vagrant.py and the Vagrantfile)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click

from kiln.cli.common import EXIT_BAD_INPUT, EXIT_FAILED, echo, load_or_exit

INVENTORY = Path("inventory") / "vagrant"


@click.group()
def vagrant() -> None:
    """A Vagrant cluster (libvirt provider) from boxes kiln builds locally; needs root, vagrant and vagrant-libvirt."""


def _fail(exc: Exception, code: int = EXIT_FAILED) -> None:
    echo(f"error: {exc}", err=True)
    sys.exit(code)


@vagrant.command()
@click.option("--compute", default=2, show_default=True, type=click.IntRange(1, 32), help="compute VMs beside the controller")
def box(compute: int) -> None:
    """Write inventory/vagrant/, build the controller's and the compute nodes' images as Vagrant boxes, add them."""
    from kiln import vagrant as vg
    from kiln.image.build import ImageBuildError, build
    from kiln.image.outputs import OutputError
    from kiln.image.recipe import RecipeError, recipe

    if os.geteuid() != 0:
        _fail("kiln vagrant needs root (libvirt's system instance, the image store)", EXIT_BAD_INPUT)
    repo = Path.cwd()
    if not (repo / "Vagrantfile").is_file():
        _fail("run this in the directory of kiln's Vagrantfile (the repository root)", EXIT_BAD_INPUT)
    vg.write_inventory(INVENTORY, compute, repo)
    cluster = load_or_exit(INVENTORY)
    try:
        vg.STATE.mkdir(parents=True, exist_ok=True)  # vagrant box add runs there (a fresh machine has none)
        boxes = {}
        for role, target in (("controller", "slurm_controller"), ("compute", vg.NODE_TYPE)):
            result = build(cluster, recipe(cluster, target), ["dir", "vagrant-box"], progress=lambda m: echo(m, err=True))
            name = f"kiln/{result.name}"
            echo(f"adding box {name}", err=True)
            out = subprocess.run(["vagrant", "box", "add", "--force", "--name", name, str(result.path / "image.box")],
                                 capture_output=True, text=True, cwd=str(vg.STATE),  # not this Vagrantfile
                                 env=dict(os.environ, VAGRANT_HOME=str(vg.VAGRANT_HOME)))
            if out.returncode != 0:
                _fail(f"vagrant box add {name}: {(out.stderr or out.stdout).strip()[-400:]}")
            boxes[role] = name
            for volume in vg.forget_box_volumes(name):
                echo(f"removed {volume}, the libvirt volume of the box it replaces", err=True)
    except (ImageBuildError, OutputError, RecipeError, OSError) as exc:
        _fail(exc)
    vg.write_inventory(INVENTORY, compute, repo, boxes)
    echo(json.dumps(boxes, indent=2))
    echo(f"next: export VAGRANT_HOME={vg.VAGRANT_HOME}; kiln vagrant host start; vagrant up", err=True)


@vagrant.command()
@click.option("--wait", default=300, show_default=True, help="seconds to wait for each VM's keys on its console")
def inventory(wait: int) -> None:
    """known_hosts for inventory/vagrant from the keys each VM printed on its serial console (run by vagrant up)."""
    from kiln import vagrant as vg

    if not (INVENTORY / vg.SPEC).is_file():
        _fail(f"{INVENTORY}/{vg.SPEC} is missing: run kiln vagrant box first", EXIT_BAD_INPUT)
    try:
        found = vg.write_known_hosts(INVENTORY, wait)
    except vg.VagrantError as exc:
        _fail(exc)
    for name, count in found.items():
        echo(f"{name}: {count} host key(s) from its console")


@vagrant.command()
@click.argument("action", type=click.Choice(["start", "stop"]))
def host(action: str) -> None:
    """start: libvirtd/virtlogd where no systemd runs them, kiln's storage pool; stop: all of it removed, the host put back."""
    from kiln import vagrant as vg

    try:
        done = vg.host_start() if action == "start" else vg.host_stop()
    except vg.VagrantError as exc:
        _fail(exc)
    for line in done or ["nothing to do"]:
        echo(line)
