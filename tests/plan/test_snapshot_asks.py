"""The snapshot asks a node only about the packages, users and groups its operations registered while
they were prepared (roles/snapshot.py ``Watched``): an operation that looked up one it had not registered
would find it missing on every run and change the node every time. Here every lookup is recorded, on every
OS, on a fresh node and on a converged one (where the comparisons go deepest), and checked against the
registrations."""

from __future__ import annotations

import subprocess
from copy import deepcopy

import pytest

from roles.platform import PLATFORMS
from roles.snapshot import NodeSnapshot, Watched, parse_snapshot, snapshot_command
from tests.plan.facts import fresh
from tests.plan.harness import converged, plan_host
from tests.plan.test_roles_plan import cluster_for


class Looked(dict):
    """A dict that remembers every key asked of it."""

    def __init__(self, *args):
        super().__init__(*args)
        self.asked: set = set()

    def get(self, key, default=None):
        self.asked.add(key)
        return super().get(key, default)

    def __contains__(self, key):
        self.asked.add(key)
        return super().__contains__(key)

    def __getitem__(self, key):
        self.asked.add(key)
        return super().__getitem__(key)


def recording(snap: NodeSnapshot) -> NodeSnapshot:
    snap = deepcopy(snap)
    snap.packages, snap.users, snap.groups = Looked(snap.packages), Looked(snap.users), Looked(snap.groups)
    return snap


@pytest.mark.parametrize("os", sorted(PLATFORMS))
@pytest.mark.parametrize("host", ["ctl1", "login1", "gpu01"])
def test_every_package_user_and_group_an_operation_reads_was_registered(os, host, monkeypatch):
    cluster = cluster_for(os)
    first, ctx = plan_host(cluster, host, os, fresh(os), monkeypatch, with_context=True)
    for state in (fresh(os), converged(first, ctx, fresh(os))):
        snap = recording(state)
        _, ctx = plan_host(cluster, host, os, snap, monkeypatch, with_context=True)
        assert snap.packages.asked, "no operation read a package: the recording saw nothing"
        assert snap.packages.asked <= set(ctx.packages), snap.packages.asked - set(ctx.packages)
        assert snap.users.asked <= set(ctx.users), snap.users.asked - set(ctx.users)
        assert snap.groups.asked <= set(ctx.groups), snap.groups.asked - set(ctx.groups)


def test_the_node_is_asked_about_the_named_packages_and_accounts_only():
    """The command, run on this machine: named packages, users and groups come back (one that does not
    exist is simply absent), and nothing else does."""
    command = snapshot_command(Watched(packages=("dpkg", "kiln-no-such-package"), users=("root", "kiln-nobody"),
                                       groups=("root", "kiln-nogroup")))
    out = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, timeout=60)
    snap = parse_snapshot(out.stdout.splitlines())
    assert out.returncode == 0
    assert set(snap.packages) == {"dpkg"} and snap.packages["dpkg"]
    assert set(snap.users) == {"root"} and snap.users["root"].uid == 0
    assert set(snap.groups) == {"root"} and snap.groups["root"][0] == 0


def test_nothing_named_lists_nothing():
    """``getent passwd`` without a name would list every account: with none registered, none is asked."""
    out = subprocess.run(["/bin/sh", "-c", snapshot_command(Watched())], capture_output=True, text=True, timeout=60)
    snap = parse_snapshot(out.stdout.splitlines())
    assert (snap.packages, snap.users, snap.groups) == ({}, {}, {})
