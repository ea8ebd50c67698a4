"""After a deploy changed a host's firewall: confirm the change over a new SSH connection from this
machine, as an operator would connect next. The node loaded its new rules with a timer that puts the
confirmed ones back (roles/firewall.py); a change that shuts kiln's own SSH out is never confirmed, so
the node undoes it by itself and the host is reported failed, with what to do."""

from __future__ import annotations

import tempfile
from pathlib import Path

import gevent.subprocess

from kiln.inventory.model import Host
from kiln.ssh import ssh_command
from roles.firewall import APPLY

OP = "firewall: confirm the change over a new SSH connection"


def confirm_argv(host: Host, control_dir: Path) -> list[str]:
    """ssh on a connection of its own (no ControlMaster: ssh takes an option's first value), running the
    confirmation."""
    argv = ssh_command(host, control_dir, f"{APPLY} confirm")
    return [argv[0], "-o", "ControlMaster=no", *argv[1:]]


def confirm(host: Host, seconds: int, timeout: float = 60) -> str | None:
    """None once ``host`` confirmed its new rules; else why not, for the deploy's report."""
    with tempfile.TemporaryDirectory(prefix="kiln-firewall-") as control_dir:
        try:
            out = gevent.subprocess.run(confirm_argv(host, Path(control_dir)), capture_output=True, text=True,
                                        timeout=timeout, stdin=gevent.subprocess.DEVNULL)
        except gevent.subprocess.TimeoutExpired:
            said = f"no answer within {timeout:.0f} s"
        else:
            if out.returncode == 0:
                return None
            said = (out.stderr.strip() or out.stdout.strip() or f"ssh exited {out.returncode}").splitlines()[-1][:300]
    return (f"a new SSH connection to {host.name} after its firewall changed failed ({said}): the node puts its "
            f"confirmed rules back by itself within {seconds} s of the change")


NEXT_STEP = ("make sure this machine's address is in kiln_firewall.admin_networks (and the host's SSH port is the one "
             "kiln connects to), then run kiln deploy --limit {node} again")
