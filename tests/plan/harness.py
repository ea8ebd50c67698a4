"""Prepare kiln's roles for one host of a cluster against recorded facts, without any connection,
and list the commands each operation would run (the way pyinfra tests its own operations: facts in,
commands out)."""

from __future__ import annotations

import re
from copy import deepcopy
from dataclasses import replace
from hashlib import sha1

from pyinfra.api.host import Host as PyinfraHost

from kiln.deploy import plan
from kiln.inventory.model import Cluster, Secrets
from kiln.tls import ClusterTls, HostCertificate, new_ca, new_host_certificate
from roles.context import NodeContext
from roles.platform import PLATFORMS
from roles.snapshot import FileState, NodeSnapshot

class EveryHost(dict):
    """One certificate for whichever host a plan asks about (plans show paths, not contents)."""

    def __missing__(self, name: str) -> HostCertificate:
        return self["*"]


PLAN_CA = new_ca("plan")
SECRETS = Secrets(munge_key=b"k" * 1024, dbd_password="plan-test-password",
                  site={"beegfs-connauth": b"plan-test-connauth\n",
                        "ceph.client.hpc.keyring": b"[client.hpc]\n\tkey = plan-test-key\n"},
                  tls=ClusterTls(PLAN_CA[0], EveryHost({"*": new_host_certificate(*PLAN_CA, "plan", ["10.0.0.1"], 365)})))


def _no_connection_facts(self, cls, *args, **kwargs):
    """Facts other than the snapshot: what a fresh node answers (files absent, slurmdbd down)."""
    default = getattr(cls, "default", None)
    return default() if callable(default) else None


def plan_host(cluster: Cluster, name: str, os: str, snapshot: NodeSnapshot, monkeypatch,
              in_container: bool = False, with_context: bool = False, secrets: Secrets | None = None):
    monkeypatch.setattr(PyinfraHost, "get_fact", _no_connection_facts)
    node = replace(cluster.hosts[name], os=os)
    cluster = replace(cluster, hosts={**cluster.hosts, name: node})
    # SECRETS read at the call: a test may put other secrets in its place (monkeypatch)
    result, ctx = plan.plan_host(cluster, name, PLATFORMS[os], snapshot, secrets or SECRETS, in_container=in_container)
    return (result, ctx) if with_context else result


def role_ops(plan: list[tuple[str, list[str]]], *prefixes: str) -> list[list]:
    """[op name, commands] of the operations whose names begin with one of ``prefixes`` (a role's: "kerberos:")."""
    return [[op, cmds] for op, cmds in plan if op.startswith(prefixes)]


def converged(plan: list[tuple[str, list[str]]], ctx: NodeContext, base: NodeSnapshot) -> NodeSnapshot:
    """``base`` after ``plan`` ran: its managed files in place, its pinned packages installed and held."""
    snap = deepcopy(base)
    for f in ctx.files:
        snap.files[f.path] = FileState("regular file", f.mode, f.user, f.group, sha1(f.content).hexdigest())
    for _, commands in plan:
        for command in commands:
            if "apt-get install -y" in command:
                for word in command.split():
                    name, sep, version = word.partition("=")
                    if sep and not name.startswith("-"):
                        snap.packages[name] = version
            elif command.startswith("dnf install -y"):
                for word in command.split()[4:]:
                    match = _RPM.match(word)
                    name, version = (match["name"], match["version"]) if match else (word, "0")
                    snap.packages[name] = version
            elif command.startswith("apt-mark hold "):
                snap.held |= set(command.split()[2:])
            elif command.startswith("dnf -q versionlock add "):
                snap.held |= {(_RPM.match(w) or {"name": w})["name"] for w in command.split()[4:]}
    return snap


_RPM = re.compile(r"^(?P<name>.+?)-(?P<version>\d[^-]*-[^-]+)$")


def assert_reviewed(name: str, actual) -> None:
    """``actual`` equals tests/plan/expected/<name>.json, the reviewed op list; with KILN_UPDATE_PLANS set it
    is written there first (a deliberate change is reviewed by reading the diff)."""
    import json
    import os
    from pathlib import Path
    path = Path(__file__).parent / "expected" / f"{name}.json"
    if os.environ.get("KILN_UPDATE_PLANS"):
        path.write_text(json.dumps(actual, indent=1) + "\n")
    assert actual == json.loads(path.read_text())
