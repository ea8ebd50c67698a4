"""Vendors' package repositories (kiln.inventory.storage_schema.PackageRepository) as apt sources or dnf
.repo files, always with signature checks: the vendor's key when the inventory gives its URL (apt: a
keyring of its own, named in ``signed-by``), else the keys the nodes already trust. Never
``trusted=yes``, never ``gpgcheck=0``."""

from __future__ import annotations

from kiln.shell import quote
from roles.context import NodeContext
from roles.operations import commands_until, pinned_packages


def keyring(name: str) -> str:
    return f"/usr/share/keyrings/kiln-{name}.gpg"


def apt_source(name: str, repo) -> str:
    signed = f"[signed-by={keyring(name)}] " if repo.key_url else ""
    words = " ".join([repo.suite, *repo.components])
    return f"# Written by kiln from the inventory's {name} repository\ndeb {signed}{repo.url} {words}\n"


def dnf_repo(name: str, repo) -> str:
    key = f"gpgkey={repo.key_url}\n" if repo.key_url else ""
    return (f"# Written by kiln from the inventory's {name} repository\n[kiln-{name}]\nname=kiln-{name}\n"
            f"baseurl={repo.url}\nenabled=1\ngpgcheck=1\nrepo_gpgcheck=0\n{key}")


def vendor_repository(ctx: NodeContext, name: str, repo) -> None:
    """The repository ``repo`` (None: the nodes' own sources have the packages) as ``kiln-<name>``."""
    if repo is None:
        return
    if ctx.platform.uses_apt:
        if repo.key_url:
            # the key first: apt refuses to refresh a source whose signed-by keyring is missing
            pinned_packages(name=f"{name}: curl and gpg for the repository key", ctx=ctx,
                            packages={"curl": None, "ca-certificates": None, "gpg": None})
            ctx.watch_path(keyring(name))
            commands_until(name=f"{name}: repository key", ctx=ctx, marker=keyring(name),
                           commands=[f"curl -fsSL --retry 3 {quote(repo.key_url)} | gpg --dearmor -o "
                                     f"{quote(keyring(name))}"])
        ctx.put(f"/etc/apt/sources.list.d/kiln-{name}.list", apt_source(name, repo), mode="644",
                name=f"{name}: package repository")
    else:
        ctx.put(f"/etc/yum.repos.d/kiln-{name}.repo", dnf_repo(name, repo), mode="644",
                name=f"{name}: package repository")
