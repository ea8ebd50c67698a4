"""kiln's roles, in the order a deploy runs them on a node."""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

# Roles that exist today; a host runs those of its roles (kiln.inventory.model.Host.roles) found here.
ORDER = ("base", "storage", "health", "slurm")


def module(name: str) -> ModuleType:
    if name not in ORDER:
        raise KeyError(name)
    return import_module(f"roles.{name}")


def for_host(host_roles: set[str], wanted: list[str] | None = None) -> list[str]:
    """The roles a host runs, in order: its own (``Host.roles``) that exist, limited to ``wanted``."""
    return [r for r in ORDER if r in host_roles and (wanted is None or r in wanted)]


def prepare(ctx, names: list[str]) -> None:
    """Add the operations of ``names`` for ``ctx``'s node: every install stage, then every configure stage."""
    modules = [module(r) for r in names]
    for m in modules:
        m.install(ctx)
    for m in modules:
        m.configure(ctx)
