"""What an image is made of, and its content address.

An image is built for one node type (a sub-group of ``compute``) or one inventory group: the roles of
its hosts, their install stages only. Its recipe is everything that decides the image's content: the
base (OS, bootstrap recipe), the role list, and the install stage planned against an empty node:
every operation's name and commands, and every file it writes with owner, mode and checksum. The
hash of that recipe names the image, so an unchanged recipe is found in the store and not rebuilt,
and a change to a pin, a template or a role's code that changes what lands in the image gives a new
name. Values of the inventory that only the configure stage reads (hosts, teams, partitions, secrets)
are not in it: one compute image serves any cluster size.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import roles
from kiln.deploy import plan
from kiln.image import base as image_base
from kiln.inventory.formats import TOKEN
from kiln.inventory.model import Cluster, Secrets
from roles.platform import PLATFORMS
from roles.snapshot import NodeSnapshot

RECIPE_VERSION = "3"  # the builder's own steps (mounts, cleaning, outputs): bump when they change

# An image build never reads the cluster's secrets: the install stages get none.
NO_SECRETS = Secrets(munge_key=b"", dbd_password="")


class RecipeError(ValueError):
    """The inventory cannot give an image for the asked target (the message names it and the choices)."""


@dataclass(frozen=True)
class ImageRecipe:
    cluster: str
    target: str                 # node type or group name
    host: str                   # the host whose install stage is planned and run
    os: str
    roles: tuple[str, ...]
    base: str                   # the base's own recipe hash
    steps: tuple[tuple[str, tuple[str, ...]], ...]   # (operation, commands) of the install stage
    files: tuple[dict, ...] = field(default=())       # path, mode, user, group, sha256, role

    @property
    def digest(self) -> str:
        text = json.dumps({"v": RECIPE_VERSION, "os": self.os, "base": self.base, "roles": self.roles,
                           "steps": self.steps, "files": self.files}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    @property
    def name(self) -> str:
        return f"{self.cluster}-{self.target}-{self.digest[:12]}"


def targets(cluster: Cluster) -> dict[str, tuple[str, ...]]:
    """Every image target the inventory offers: its node types, then its kiln groups."""
    out = {n.name: n.hosts for n in cluster.node_types.values()}
    for group, hosts in cluster.groups.items():
        if group not in out and hosts and group != "ungrouped" and group != "all":
            out[group] = hosts
    return out


def select(cluster: Cluster, node_type: str | None = None, group: str | None = None) -> list[str]:
    """The targets to build: the named node type or group, or every node type when neither is given."""
    offered = targets(cluster)
    if node_type is not None:
        if node_type not in cluster.node_types:
            raise RecipeError(f"--node-type {node_type}: not a node type of this inventory; it has "
                              f"{', '.join(cluster.node_types) or '(none)'}")
        return [node_type]
    if group is not None:
        if group not in offered:
            raise RecipeError(f"--group {group}: no such group with hosts; the inventory has {', '.join(offered)}")
        return [group]
    if not cluster.node_types:
        raise RecipeError(f"the inventory has no node type (a sub-group of compute); name a group with --group: "
                          f"{', '.join(offered)}")
    return list(cluster.node_types)


def base_hash(os: str) -> str:
    if os in image_base.LIVE:
        return image_base.recipe_hash(os)
    return hashlib.sha256("\n".join(image_base.bootstrap_commands(os, "ROOT")).encode()).hexdigest()[:12]


def recipe(cluster: Cluster, target: str) -> ImageRecipe:
    if not TOKEN.match(target):
        # the target names the image, and the image is a directory of the store: a group name such as
        # 'gpu/../../etc' (Ansible keeps it, with a warning) must never become a path
        raise RecipeError(f"group {target!r}: an image target must be a plain name (letters, digits, '_', '.', '-')")
    hosts = targets(cluster).get(target)
    if not hosts:
        raise RecipeError(f"{target}: not a node type or group with hosts")
    first = cluster.hosts[hosts[0]]
    names = tuple(roles.for_host(first.roles))
    for other in hosts[1:]:
        h = cluster.hosts[other]
        if tuple(roles.for_host(h.roles)) != names or h.os != first.os:
            raise RecipeError(f"{target}: hosts {first.name} and {other} need different images (roles "
                              f"{', '.join(names)} on {first.os} against {', '.join(roles.for_host(h.roles))} on "
                              f"{h.os}); build per node type (--node-type)")
    if first.os not in image_base.BASES:
        raise RecipeError(f"{target}: kiln builds no image for {first.os}")
    steps, ctx = plan.plan_host(cluster, first.name, PLATFORMS[first.os], NodeSnapshot(), NO_SECRETS,
                                stages=("install",))
    files = tuple({"path": f.path, "mode": f.mode, "user": f.user, "group": f.group,
                   "sha256": hashlib.sha256(f.content).hexdigest(), "operation": f.name}
                  for f in ctx.files)
    return ImageRecipe(cluster.name, target, first.name, first.os, names, base_hash(first.os),
                       tuple((name, tuple(commands)) for name, commands in steps), files)
