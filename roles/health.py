"""The health role: kiln's node-local checks on compute nodes, run by slurmd as its HealthCheckProgram.

Defaults:

+ the ``checks`` package (pure Python: the standard library and ClusterShell, python3-clustershell from
  the OS, for Slurm's host lists) copied to /usr/local/lib/kiln/checks/, the runner as
  /usr/local/sbin/kiln-node-check (the node's own python3 >= 3.9, no kiln install).
+ /etc/kiln/node-checks.json: what the inventory says this node must have (kiln/check/expectations.py),
  the same expectations ``kiln check`` uses remotely.
+ slurm.conf runs it every ``kiln_health_check_interval`` seconds (``kiln_slurm_health_check``); a fail
  drains the node with reason ``kiln: <ID> <message>``, a pass resumes only nodes kiln drained.
+ metrics in ``kiln_check_textfile_dir``/kiln.prom for node_exporter's textfile collector.
+ optional, the same checks as Slurm's Prolog (``kiln_slurm_check_prolog``: a failing node is drained
  and the job requeued elsewhere) and Epilog (``kiln_slurm_check_epilog``: drained after the job), through
  /usr/local/sbin/kiln-node-check-prolog and -epilog (Slurm runs a program, not a command line).
+ slurmd's health runs go through /usr/local/sbin/kiln-node-check-health (``--wait 0``: one Slurm starts
  while the last still checks does nothing); ``kiln-node-check`` run by a person or kiln waits up to 60 s.
+ Slurm runs these on nodes that may hold jobs, so they never put load on the GPUs: no GEMM burn, no
  all_reduce_perf, no DCGM diagnostic (those run with ``kiln check`` and after ``kiln patch`` reboots), and
  no storage throughput test (the shared filesystem's load).
"""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

from checks.version import FILE as VERSION_FILE
from checks.version import package_files, version_line
from kiln import __version__
from kiln.check.expectations import node_expectations
from roles.context import NodeContext
from roles.operations import managed_directory, pinned_packages

CHECKS = Path(str(files("checks")))  # the node-side check files, wherever kiln is installed
LIB = "/usr/local/lib/kiln"
CLUSTERSHELL = "python3-clustershell"  # the host-list reader's library (Debian, Ubuntu universe, EPEL 9)
RUNNER = """#!/usr/bin/python3
# kiln's node-local checks (written by kiln's health role); see /usr/local/lib/kiln/checks/node_local.py
import sys
sys.path.insert(0, "/usr/local/lib/kiln")
from checks.node_local import main
sys.exit(main())
"""
HOOK = """#!/bin/sh
# Slurm's {mode} (kiln's health role): kiln's node-local checks; see kiln-node-check --help
exec /usr/local/sbin/kiln-node-check --mode {mode}{wait}
"""


def check_files() -> dict[str, bytes]:
    """Relative path under /usr/local/lib/kiln -> content, for every file of the checks package."""
    return package_files(CHECKS)


def install(ctx: NodeContext) -> None:
    if not ctx.platform.uses_apt:  # EL: python3-clustershell is EPEL's (the slurm role, later, needs it too)
        pinned_packages(name="health: EPEL", ctx=ctx, packages={"epel-release": None})
    pinned_packages(name="health: ClusterShell (Slurm's host lists)", ctx=ctx, packages={CLUSTERSHELL: None})
    for directory in (LIB, f"{LIB}/checks", f"{LIB}/checks/parsers", "/etc/kiln"):
        ctx.watch_path(directory)
        managed_directory(name=f"health: {directory}", ctx=ctx, path=directory, user="root", group="root", mode="755")
    files = check_files()
    for rel, content in files.items():
        ctx.put(f"{LIB}/{rel}", content, mode="644", name=f"health: {rel}")
    ctx.put(f"{LIB}/checks/{VERSION_FILE}", version_line(__version__, files) + "\n", mode="644",
            name="health: the host programs' version")
    ctx.put("/usr/local/sbin/kiln-node-check", RUNNER, mode="755", name="health: kiln-node-check")
    for mode in ("health", "prolog", "epilog"):  # Slurm starts a health run even while the last one checks:
        wait = " --wait 0" if mode == "health" else ""  # that second run checks nothing (a person's waits)
        ctx.put(f"/usr/local/sbin/kiln-node-check-{mode}", HOOK.format(mode=mode, wait=wait), mode="755",
                name=f"health: kiln-node-check-{mode}")


def install_package(ctx: NodeContext) -> None:
    """The checks package under /usr/local/lib/kiln, once per node: every host program kiln runs (the node
    checks, kiln-remediate, the Slurm collector, the job summary) imports its shared readers from it."""
    if not any(f.path == f"{LIB}/checks/__init__.py" for f in ctx.files):
        install(ctx)


def launcher(module: str, what: str) -> str:
    """A program in /usr/local/sbin that runs ``checks.<module>``'s main from the installed package."""
    return (f"#!/usr/bin/python3\n# {what} (kiln); see {LIB}/checks/{module}.py\nimport sys\n"
            f"sys.path.insert(0, {LIB!r})\nfrom checks.{module} import main\nsys.exit(main())\n")


def configure(ctx: NodeContext) -> None:
    """The node's own expectations (never in an image); nothing to start: slurmd runs the program
    (slurm.conf HealthCheckProgram)."""
    expect = node_expectations(ctx.cluster, ctx.node)
    # Slurm runs these every few minutes and around jobs, on nodes that may hold jobs: never GPU load
    # (a DCGM diagnostic takes the GPUs for a minute or more).
    expect["gpu"].update(burn_seconds=0, nccl_busbw_gbps=0, dcgm_level=0)
    expect["storage_throughput_mib"] = 0  # nor load on the filesystem every node shares
    expect["zones"] = {}  # the firewall's probes are kiln check's (each dropped one waits out a timeout)
    ctx.put("/etc/kiln/node-checks.json", json.dumps(expect, indent=1, sort_keys=True) + "\n", mode="644",
            name="health: node expectations")

