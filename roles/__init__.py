"""kiln's roles, in the order a deploy runs them on a node."""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

# Roles that exist today; a host runs those of its roles (kiln.inventory.model.Host.roles) found here.
# The fabric comes up before the filesystems that may run over it (Lustre on o2ib, NFS over IPoIB); a
# storage server exports before it (or any node) mounts. The driver comes before slurm (slurmd is ordered after nvidia-persistenced); containers after slurm
# (pyxis builds against the Slurm headers, and its plugstack files restart slurmd). Monitoring comes last: its
# Slurm collector reads a running slurmctld, and a node is scraped once it serves. Logs after it: its services
# take the host's certificate the monitoring role writes. Remediation after
# everything it repairs (it restarts slurmd and checks nodes with the health role's checks). The firewall
# last: its change is confirmed over a new SSH connection right after the run (kiln/deploy/firewall_confirm.py),
# within its rollback time, and every service it lets in is configured by then.
ORDER = ("base", "rdma", "kerberos", "storage_server", "storage", "disk_encryption", "nvidia_driver", "fabricmanager", "cuda", "nccl", "dcgm", "health", "slurm",
         "containers", "monitoring", "audit", "logs", "remediation", "firewall")


def module(name: str) -> ModuleType:
    if name not in ORDER:
        raise KeyError(name)
    return import_module(f"roles.{name}")


def for_host(host_roles: set[str], wanted: list[str] | None = None) -> list[str]:
    """The roles a host runs, in order: its own (``Host.roles``) that exist, limited to ``wanted``."""
    return [r for r in ORDER if r in host_roles and (wanted is None or r in wanted)]


STAGES = ("install", "configure")


def prepare(ctx, names: list[str], stages: tuple[str, ...] = STAGES) -> None:
    """Add the operations of ``names`` for ``ctx``'s node: every install stage, then every configure
    stage (an image build runs the install stages alone, in a chroot: packages and files that hold
    nothing of the cluster's make-up and no secret)."""
    modules = [module(r) for r in names]
    for stage in STAGES:
        if stage in stages:
            for m in modules:
                getattr(m, stage)(ctx)


def notices(ctx, names: list[str]) -> list[str]:
    """What the roles found the node needs beyond this run (a reboot), read from its snapshot."""
    return [n for r in names for n in (getattr(module(r), "notices", None) or (lambda _: []))(ctx)]
