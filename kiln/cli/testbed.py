"""`kiln testbed up|status|ssh|stop|start|down|inject|clear`: the local cluster of systemd-nspawn nodes or VMs."""

from __future__ import annotations

import json
import os
import sys

import click

from kiln.cli.common import EXIT_BAD_INPUT, EXIT_FAILED, json_option, testbed_inventory
from kiln.testbed.cpu_limit import FAULT as CPU_SLOW
from kiln.testbed.simulate import FAULTS

name_option = click.option("--name", default="kiln", show_default=True, help="testbed name (up to 8 letters/digits)")
os_option = click.option("--os", "node_os", type=click.Choice(["debian12", "debian13"]), default=None,
                         help="the nodes' OS (default for a new testbed: debian12; an existing one keeps its own; "
                         "another OS makes every node again)")


def _testbed(name: str, kind: str | None = None, node_os: str | None = None):
    from kiln.testbed.host import TestbedError
    from kiln.testbed.testbed import Testbed

    try:
        return Testbed(name=name, progress=lambda m: click.echo(m, err=True), node_kind=kind, node_os=node_os)
    except TestbedError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)


def _fail(exc: Exception) -> None:
    from kiln.testbed.host import TestbedUnavailable

    click.echo(f"error: {exc}", err=True)
    sys.exit(EXIT_BAD_INPUT if isinstance(exc, TestbedUnavailable) else EXIT_FAILED)


@click.group()
def testbed() -> None:
    """Local cluster of real systemd nodes (systemd-nspawn containers or QEMU VMs) on this host; needs root."""


@testbed.command()
@click.option("--nodes", default=3, show_default=True, type=click.IntRange(1, 200),
              help="node 1 is the controller and login node, the rest compute")
@click.option("--image", "images", multiple=True, metavar="NAME",
              help="boot the nodes an image was built for (its node type or group) from it (kiln image list); repeatable")
@click.option("--fresh", is_flag=True, help="remove every node's disk first (a clean slate); by default a node "
              "that is down boots again from its own disk and a running one is left as it is")
@click.option("--kind", type=click.Choice(["nspawn", "vm"]), default=None,
              help="nspawn: containers sharing this host's kernel (default for a new testbed); vm: QEMU virtual "
              "machines with their own kernel (cgroup v2, modules, real reboots; KVM where it works, else emulation)")
@os_option
@name_option
@json_option
def up(nodes: int, name: str, images: tuple[str, ...], fresh: bool, kind: str | None, node_os: str | None,
       as_json: bool) -> None:
    """Build the testbed, or boot the nodes that are down from their own disks, and write inventory/testbed/."""
    from kiln.testbed.host import TestbedError

    from kiln.cli.progress import Progress

    tb = _testbed(name, kind, node_os)
    # what each node is doing, live on a terminal (on standard error: --json keeps standard output)
    try:
        with Progress.for_command(f"testbed {name} up", [n.name for n in tb.node_list(nodes)], as_json,
                                  stream=sys.stderr) as progress:
            tb.progress, tb.events = progress.note, progress
            status = tb.up(nodes, inventory_dir=testbed_inventory(name), images=images, fresh=fresh)
    except TestbedError as exc:  # reported once the live panel is gone
        _fail(exc)
    _print_status(status, as_json)


@testbed.command("inventory")
@click.option("--nodes", default=3, show_default=True, type=click.IntRange(1, 200))
@click.option("--kind", type=click.Choice(["nspawn", "vm"]), default=None, help="as for up")
@os_option
@name_option
def inventory_cmd(nodes: int, kind: str | None, node_os: str | None, name: str) -> None:
    """Write the inventory `up` with these options will have, before any node exists (to build its images first)."""
    from kiln.testbed.host import TestbedError

    tb = _testbed(name, kind, node_os)
    try:
        tb.write_inventory(nodes, testbed_inventory(name))
    except TestbedError as exc:
        _fail(exc)
    click.echo(str(testbed_inventory(name)))


@testbed.command()
@name_option
@json_option
def status(name: str, as_json: bool) -> None:
    """Nodes, addresses and their systemd state."""
    _print_status(_testbed(name).status(), as_json)


def _print_status(status: dict, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(status, indent=2))
        return
    click.echo(f"testbed {status['name']}: bridge {status['bridge']} ({'up' if status['bridge_up'] else 'absent'}), "
               f"apt proxy {status['apt_proxy'] or 'stopped'}, shared dir {status['shared_dir']}")
    if not status["nodes"]:
        click.echo("  no nodes: run `kiln testbed up`")
    for node in status["nodes"]:
        click.echo(f"  {node['name']:10} {node['address']:15} {node['role']:10} {node['state']}")
    click.echo(f"  ssh: ssh -F {status['ssh_config']} NODE   (or: kiln testbed ssh NODE)")


@testbed.command(context_settings={"ignore_unknown_options": True})
@name_option
@click.argument("node")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def ssh(name: str, node: str, command: tuple[str, ...]) -> None:
    """Open a shell on NODE, or run COMMAND there (strict host keys)."""
    tb = _testbed(name)
    if node not in [n.name for n in tb.recorded_nodes()]:
        click.echo(f"error: no node {node!r} in testbed {name}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    argv = tb.ssh_command(node, list(command))
    os.execvp(argv[0], argv)


@testbed.command()
@name_option
@click.option("--wipe", is_flag=True, help="also remove the cached base image and apt cache")
def down(name: str, wipe: bool) -> None:
    """Stop every node and remove everything `up` made."""
    from kiln.testbed.host import TestbedError

    tb = _testbed(name)
    try:
        tb.down(wipe=wipe, inventory_dir=testbed_inventory(name))
    except TestbedError as exc:
        _fail(exc)
    click.echo(f"testbed {name} is down" + (" and its caches wiped" if wipe else ""), err=True)


@testbed.command()
@name_option
@click.argument("node")
@click.argument("fault", type=click.Choice(("power-loss", CPU_SLOW) + FAULTS))
@click.option("--gpu", default=0, show_default=True, help="which simulated GPU (faults on one GPU)")
@click.option("--at-next-boot", is_flag=True, help="the fault appears when the node next boots (after a patch)")
@click.option("--persistent", is_flag=True, help="a GPU reset or a reboot does not clear it (default: they do, "
              "as on real hardware)")
@click.option("--cpu-percent", type=click.IntRange(1, 100), default=None,
              help="cpu-slow: the share of one CPU the node keeps (default 10; 25 is a quarter)")
def inject(name: str, node: str, fault: str, gpu: int, at_next_boot: bool, persistent: bool,
           cpu_percent: int | None) -> None:
    """Break NODE on purpose (simulated GPUs/HCAs, or unmount /scratch) so checks and drains can be shown;
    power-loss: the node and every process in it gone at once, its disk kept (kiln testbed start NODE);
    cpu-slow: every process of the node held to a tenth of one CPU (--cpu-percent; the host's cpu cgroup)
    until clear.
    A fault is transient unless --persistent: the repair that clears it on real hardware (a GPU reset or
    a reboot) clears it here."""
    from kiln.testbed.host import TestbedError
    try:
        if fault == "power-loss":
            _testbed(name).power_loss(node)
        else:
            if cpu_percent is not None and fault != CPU_SLOW:
                raise TestbedError(f"--cpu-percent is cpu-slow's, not {fault}'s")
            _testbed(name).inject(node, fault, gpu, at_boot=at_next_boot, persistent=persistent,
                                  cpu_percent=cpu_percent)
    except TestbedError as exc:
        _fail(exc)
    click.echo(f"{node}: {fault} {'set for the next boot' if at_next_boot else 'injected'}")


@testbed.command()
@name_option
@click.argument("node")
def stop(name: str, node: str) -> None:
    """Shut NODE down cleanly; its disk stays (kiln testbed start NODE, or up, boots it again)."""
    from kiln.testbed.host import TestbedError
    try:
        _testbed(name).stop(node)
    except TestbedError as exc:
        _fail(exc)
    click.echo(f"{node}: stopped")


@testbed.command()
@name_option
@click.argument("node")
@json_option
def start(name: str, node: str, as_json: bool) -> None:
    """Boot NODE again from its own disk."""
    from kiln.testbed.host import TestbedError
    try:
        status = _testbed(name).start(node)
    except TestbedError as exc:
        _fail(exc)
    _print_status(status, as_json)


@testbed.command()
@name_option
@click.argument("node")
def clear(name: str, node: str) -> None:
    """Undo every fault injected on NODE."""
    from kiln.testbed.host import TestbedError
    try:
        _testbed(name).clear(node)
    except TestbedError as exc:
        _fail(exc)
    click.echo(f"{node}: faults cleared")
