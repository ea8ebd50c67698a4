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
