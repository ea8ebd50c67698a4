"""kiln's roles under the plain ``pyinfra`` command (deploy/site.py and deploy/inventory.py).

``kiln deploy`` is the supported way: it checks every node's OS before any change, takes the node
snapshots in parallel, reconfigures Slurm once every node has its files, and reports per host. This
module gives operators who drive pyinfra themselves the same roles, from the same inventory
(``$KILN_INVENTORY``, default inventory/testbed), with pyinfra's own output.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
from functools import lru_cache
from pathlib import Path

import pyinfra.api.operation  # noqa: F401 (the module; pyinfra.api's attribute of that name is the decorator)
from pyinfra.api.util import get_operation_order_from_stack as _line_numbers

from pyinfra.facts.server import LinuxDistribution
from pyinfra.operations import server

import roles
from kiln.inventory import load_cluster
from kiln.inventory.location import default_inventory
from kiln.inventory.model import Cluster, Secrets
from kiln.secrets import load_or_create
from roles.context import NodeContext, changed_any
from roles.facts import IsContainer
from roles.platform import platform_for

_contexts: dict[str, NodeContext] = {}
_PACKAGES = tuple(str(Path(m.__file__).resolve().parent) + "/" for m in (roles,))


def _order_with_files(state) -> list[int]:
    """pyinfra's operation order (the line numbers of the call stack from the deploy file) with the
    files of kiln's roles on that stack appended as one number. pyinfra hashes the line numbers alone,
    so two operations at equal line numbers of different role modules would share a hash; where one
    host runs only one of them, the hosts' orders disagree and pyinfra finds a cycle."""
    order = _line_numbers(state)
    files = "|".join(f"{frame.filename}:{frame.lineno}" for frame in inspect.stack(0)
                     if frame.filename.startswith(_PACKAGES))
    return order + [int(hashlib.sha1(files.encode()).hexdigest()[:12], 16)]


sys.modules["pyinfra.api.operation"].get_operation_order_from_stack = _order_with_files


def inventory_path() -> Path:
    return default_inventory()


@lru_cache(maxsize=1)
def cluster_and_secrets() -> tuple[Cluster, Secrets]:
    cluster = load_cluster(inventory_path())
    return cluster, load_or_create(cluster)


def pyinfra_groups() -> dict[str, list[tuple[str, dict]]]:
    """The inventory's groups as pyinfra inventory lists: ``{group: [(host, connection data)]}``."""
    cluster, _ = cluster_and_secrets()
    return {group: [(name, dict(cluster.hosts[name].connection)) for name in members]
            for group, members in cluster.groups.items() if members and group not in ("all", "ungrouped")}


def converge(host, role_names: list[str] | None = None) -> NodeContext:
    """Prepare the roles of ``host`` (pyinfra's current host), as ``kiln deploy`` would."""
    cluster, secrets = cluster_and_secrets()
    node = cluster.hosts[host.name]
    platform = platform_for(node.os, host.get_fact(LinuxDistribution))
    ctx = NodeContext(cluster, node, platform, secrets, host.get_fact(IsContainer))
    _contexts[host.name] = ctx
    wanted = roles.for_host(node.roles, role_names)
    roles.prepare(ctx, wanted)
    if "slurm" in wanted and node.in_group("slurm_controller"):
        # pyinfra runs each operation on every host before the next: this one runs after every
        # host of the run has written its slurm.conf.
        server.shell(name="slurm: scontrol reconfigure (slurm.conf changed)", commands=["scontrol reconfigure"],
                     _if=lambda: any(changed_any(*c.marks.get("slurm_conf", [])) for c in _contexts.values())
                     and not changed_any(*ctx.marks.get("slurmctld_started", [])))
    return ctx
