"""The health role: kiln's node-local checks on compute nodes, run by slurmd as its HealthCheckProgram.

Defaults:

+ the ``checks`` package (pure Python, standard library only) copied to /usr/local/lib/kiln/checks/,
  the runner as /usr/local/sbin/kiln-node-check (the node's own python3 >= 3.9, no kiln install).
+ /etc/kiln/node-checks.json: what the inventory says this node must have (kiln/inventory/expect.py),
  the same expectations ``kiln check`` uses remotely.
+ slurm.conf runs it every ``kiln_health_check_interval`` seconds (``kiln_slurm_health_check``); a fail
  drains the node with reason ``kiln: <ID> <message>``, a pass resumes only nodes kiln drained.
+ metrics in ``kiln_check_textfile_dir``/kiln.prom for node_exporter's textfile collector.
"""

from __future__ import annotations

import json
from pathlib import Path

from kiln.inventory.expect import node_expectations
from roles.context import NodeContext
from roles.operations import managed_directory

CHECKS = Path(__file__).resolve().parent.parent / "checks"
LIB = "/usr/local/lib/kiln"
RUNNER = """#!/usr/bin/python3
# kiln's node-local checks (written by kiln's health role); see /usr/local/lib/kiln/checks/node_local.py
import sys
sys.path.insert(0, "/usr/local/lib/kiln")
from checks.node_local import main
sys.exit(main())
"""


def check_files() -> dict[str, bytes]:
    """Relative path under /usr/local/lib/kiln -> content, for every file of the checks package."""
    return {str(p.relative_to(CHECKS.parent)): p.read_bytes()
            for p in sorted(CHECKS.rglob("*.py")) if "__pycache__" not in p.parts and not p.name.startswith("test_")}


def install(ctx: NodeContext) -> None:
    for directory in (LIB, f"{LIB}/checks", f"{LIB}/checks/parsers", "/etc/kiln"):
        ctx.watch_path(directory)
        managed_directory(name=f"health: {directory}", ctx=ctx, path=directory, user="root", group="root", mode="755")
    for rel, content in check_files().items():
        ctx.put(f"{LIB}/{rel}", content, mode="644", name=f"health: {rel}")
    ctx.put("/usr/local/sbin/kiln-node-check", RUNNER, mode="755", name="health: kiln-node-check")
    expect = node_expectations(ctx.cluster, ctx.node)
    # Slurm runs these every few minutes on nodes that may hold jobs: never the GPU load checks.
    expect["gpu"].update(burn_seconds=0, nccl_busbw_gbps=0)
    ctx.put("/etc/kiln/node-checks.json", json.dumps(expect, indent=1, sort_keys=True) + "\n", mode="644",
            name="health: node expectations")


def configure(ctx: NodeContext) -> None:
    """Nothing to start: slurmd runs the program (slurm.conf HealthCheckProgram)."""
