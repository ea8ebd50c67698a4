"""`kiln drift`: per node, what differs from its image and from what kiln would make of it.

Two references, one report:

+ the image: the manifest the node carries (/etc/kiln/image-manifest.json, written by ``kiln image
  build``) or, with ``--image NAME``, the one in the image store; compared by the drift suite's own
  code (checks/drift.py): packages added, removed or at another version, holds lost, enabled units,
  the checksums of the files the image's roles manage;
+ kiln itself: ``kiln deploy --dry-run`` of every role of the node: each operation that would change
  something (a package off its pin, a hold lost, a managed file edited: with its diff, secrets
  masked). This also covers nodes not booted from an image.

A node that cannot be reached is reported as such, never as "no drift".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from checks import drift as drift_suite
from kiln.check.expectations import node_expectations
from kiln.inventory.model import Cluster, Secrets


@dataclass
class NodeDrift:
    host: str
    image: str = ""                       # the image compared with ("" when none)
    image_drift: dict = field(default_factory=dict)
    would_change: list[str] = field(default_factory=list)
    diffs: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def status(self) -> str:
        if self.error:
            return "unreachable"
        return "drift" if self.would_change or drift_suite.drifted(self.image_drift) else "no drift"

    def as_dict(self) -> dict:
        return {"host": self.host, "status": self.status, "image": self.image,
                "image_drift": {k: v for k, v in self.image_drift.items() if k != "image"},
                "would_change": self.would_change, "diffs": self.diffs, "error": self.error}


def image_drift(cluster: Cluster, names: list[str], manifest: dict | None,
                progress: Callable[[str], None]) -> dict[str, NodeDrift]:
    """The image side for every host (ssh, all at once, strict host keys as kiln check)."""
    import concurrent.futures

    from kiln.check.remote import RemoteCheck

    out = {n: NodeDrift(n) for n in names}
    hosts = [cluster.hosts[n] for n in names]
    with RemoteCheck(cluster, hosts, []) as remote:
        def one(host):
            node = remote.node(host)
            expect = node_expectations(cluster, host)
            if manifest:
                expect["drift"]["manifest"] = manifest
            probe = node.run("true")
            if probe.rc == 255:
                return host.name, None, f"ssh failed: {probe.stderr.strip()[-300:] or 'no answer'}"
            try:
                ref = drift_suite.reference(node, expect)
            except ValueError as e:
                return host.name, None, f"{drift_suite.MANIFEST} is not JSON: {e}"
            return host.name, (drift_suite.compare(ref, node, expect) if ref else None), ""
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(64, max(1, len(hosts)))) as pool:
            for name, found, error in pool.map(one, hosts):
                d = out[name]
                d.error = error
                if found:
                    d.image, d.image_drift = found["image"], found
    progress(f"compared {len(names)} node(s) with their image")
    return out


def kiln_drift(cluster: Cluster, secrets: Secrets, names: list[str], found: dict[str, NodeDrift],
               progress: Callable[[str], None]) -> None:
    """The kiln side: a dry run of every role on the reachable hosts (gevent must be patched in)."""
    from kiln.deploy.runner import Deploy
    reachable = [n for n in names if not found[n].error]
    if not reachable:
        return
    result = Deploy(cluster, secrets, reachable, None, dry_run=True, progress=progress).run()
    for r in result.hosts:
        d = found[r.name]
        if r.status in ("failed", "unreachable"):
            d.error = r.error or r.status
            continue
        d.would_change, d.diffs = list(r.changed), list(r.diffs)
