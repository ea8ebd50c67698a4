"""Prepare kiln's roles for one host of a cluster against recorded facts, without any connection,
and list the commands each operation would run (the way pyinfra tests its own operations: facts in,
commands out)."""

from __future__ import annotations

from dataclasses import replace

from pyinfra.api import Config, Inventory, State
from pyinfra.api.host import Host as PyinfraHost
from pyinfra.context import ctx_config, ctx_host, ctx_inventory, ctx_state

import roles
from kiln.deploy import plan
from kiln.inventory.model import Cluster, Secrets
from roles.context import NodeContext
from roles.platform import PLATFORMS
from roles.snapshot import NodeSnapshot

SECRETS = Secrets(munge_key=b"k" * 1024, dbd_password="plan-test-password")


def _no_connection_facts(self, cls, *args, **kwargs):
    """Facts other than the snapshot: what a fresh node answers (files absent, slurmdbd down)."""
    default = getattr(cls, "default", None)
    return default() if callable(default) else None


def plan_host(cluster: Cluster, name: str, os: str, snapshot: NodeSnapshot, monkeypatch,
              in_container: bool = False) -> list[tuple[str, list[str]]]:
    monkeypatch.setattr(PyinfraHost, "get_fact", _no_connection_facts)
    inventory = Inventory(([(name, {})], {}))
    state = State(inventory, Config(), check_for_changes=False)
    host = inventory.get_host(name)
    ctx = NodeContext(cluster, replace(cluster.hosts[name], os=os), PLATFORMS[os], SECRETS, in_container)
    with ctx_state.use(state), ctx_inventory.use(inventory), ctx_config.use(state.config.copy()), ctx_host.use(host):
        roles.prepare(ctx, roles.for_host(cluster.hosts[name].roles))
        ctx.snapshot = snapshot
        return plan.evaluate(state, host, commands=True)
