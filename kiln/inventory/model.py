"""The typed cluster model every other part of kiln reads: built only by ``validate``, never by hand."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kiln.inventory.schema import Fabric, Partition, StorageMount, Team
from kiln.inventory.storage_schema import uses_kerberos
from kiln.tls import ClusterTls

CONTROLLER = "slurm_controller"
DBD = "slurm_dbd"
LOGIN = "login"
COMPUTE = "compute"
STORAGE = "storage_servers"
MONITORING = "monitoring"
DEFAULT_PARTITION = "all"  # the one partition of every compute host, where the inventory names none
# Hosts in none of these groups (Kubernetes masters of a mixed inventory, say) get no roles: kiln
# lists them as ignored and never connects to them.
KILN_GROUPS = (CONTROLLER, DBD, LOGIN, COMPUTE, STORAGE, MONITORING)


@dataclass(frozen=True)
class Host:
    name: str
    groups: tuple[str, ...]
    address: str
    connection: dict[str, Any]
    os: str
    node_type: str | None
    cpus: int | None
    sockets: int | None
    cores_per_socket: int | None
    threads_per_core: int | None
    memory_mb: int | None
    gpu_count: int
    gpu_model: str | None
    nvswitch: bool
    features: tuple[str, ...]
    fabric: Fabric
    storage_mounts: tuple[StorageMount, ...]
    sysctls: dict[str, Any]
    vars: dict[str, Any] = field(repr=False, compare=False)
    settings: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    monitored: bool = False  # the inventory has a monitoring group: this host runs node_exporter

    def setting(self, name: str) -> Any:
        """A node setting by its name without the ``kiln_`` prefix (default applied)."""
        return self.settings["kiln_" + name]

    def in_group(self, group: str) -> bool:
        return group in self.groups

    @property
    def gpudirect_rdma(self) -> bool:
        """GPUDirect RDMA (nvidia_peermem) is set up and expected: an InfiniBand or RoCE fabric and
        NVIDIA kernel modules kiln installs (``kiln_nvidia_kernel_modules`` not ``none``)."""
        return self.fabric.type in ("infiniband", "roce") and self.setting("nvidia_kernel_modules") != "none"

    @property
    def is_compute(self) -> bool:
        return COMPUTE in self.groups

    @property
    def roles(self) -> set[str]:
        """The roles ``kiln deploy`` runs on this host, chosen from its groups and facts."""
        roles = {"base", "audit", "firewall"}  # audit and firewall also remove kiln's rules where they are off
        if set(self.groups) & {CONTROLLER, DBD, LOGIN, COMPUTE}:
            roles.add("slurm")
        if COMPUTE in self.groups:
            roles.add("health")
        if self.fabric.type in ("infiniband", "roce", "rxe") or self.settings.get("kiln_opensm"):
            roles.add("rdma")
        if self.storage_mounts:
            roles.add("storage")
        if STORAGE in self.groups:
            roles.add("storage_server")
        if self.settings.get("kiln_encrypted_volumes") or CONTROLLER in self.groups:
            roles.add("disk_encryption")  # a controller serves tang where any host has encrypted volumes
        if CONTROLLER in self.groups or any(uses_kerberos(e.options) for e in self.settings.get("kiln_storage_nfs_exports") or []) \
                or any(m.type == "nfs" and uses_kerberos(m.options) for m in self.storage_mounts):
            roles.add("kerberos")  # the first controller runs the KDC where any NFS export or mount uses Kerberos
        if self.gpu_count:
            roles |= {"nvidia_driver", "cuda", "nccl", "dcgm", "containers"}
        if LOGIN in self.groups:
            roles.add("containers")  # srun needs pyxis where jobs are submitted
        if self.nvswitch:
            roles.add("fabricmanager")
        if self.monitored:
            roles.add("monitoring")  # node_exporter everywhere; Prometheus, Alertmanager in the monitoring group
            roles.add("logs")  # the journal to the log host (or, with kiln_log_shipping off, its removal)
        if set(self.groups) & {CONTROLLER, COMPUTE}:
            roles.add("remediation")  # kiln-remediate's service, key and node program (or their removal)
        return roles


@dataclass(frozen=True)
class NodeType:
    """A sub-group of ``compute`` whose hosts share hardware facts (e.g. gpu_h100)."""

    name: str
    hosts: tuple[str, ...]
    cpus: int | None
    memory_mb: int | None
    gpu_count: int
    gpu_model: str | None


@dataclass(frozen=True)
class Cluster:
    name: str
    path: Path
    hosts: dict[str, Host]
    groups: dict[str, tuple[str, ...]]
    node_types: dict[str, NodeType]
    partitions: tuple[Partition, ...]
    teams: tuple[Team, ...]
    versions: dict[str, str]
    slurm_ha: bool
    secrets_dir: Path
    health_check_interval: int
    topology: dict[str, list[str]]
    ignored: tuple[str, ...] = ()  # hosts of the inventory in no kiln group
    settings: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def setting(self, name: str) -> Any:
        """A cluster-wide setting by its name without the ``kiln_`` prefix (default applied)."""
        return self.settings["kiln_" + name]

    @property
    def monitored(self) -> bool:
        """The inventory has a monitoring group: every host runs node_exporter and is scraped."""
        return bool(self.groups.get(MONITORING))

    def group(self, name: str) -> list[Host]:
        return [self.hosts[h] for h in self.groups.get(name, ())]

    @property
    def controllers(self) -> list[Host]:
        return self.group(CONTROLLER)

    @property
    def compute(self) -> list[Host]:
        return self.group(COMPUTE)

    @property
    def user_logins(self) -> list[Host]:
        """Where the teams' users log in: the login hosts, or the controllers where there are none."""
        return self.group(LOGIN) or self.controllers

    def partition_hosts(self) -> dict[str, list[Host]]:
        """Each Slurm partition's compute hosts, in the order slurm.conf lists them: the inventory's
        partitions (their groups' compute hosts, each once), or one partition ``all`` of every compute
        host where it names none."""
        if not self.partitions:
            return {DEFAULT_PARTITION: self.compute}
        compute = {h.name for h in self.compute}
        out: dict[str, list[Host]] = {}
        for part in self.partitions:
            names: list[str] = []
            for group in part.groups:
                names += [h for h in self.groups.get(group, ()) if h in compute and h not in names]
            out[part.name] = [self.hosts[h] for h in names]
        return out

    def summary(self) -> dict[str, Any]:
        return {
            "cluster": self.name,
            "hosts": len(self.hosts),
            "groups": {g: len(h) for g, h in sorted(self.groups.items()) if h or g != "ungrouped"},
            "node_types": {
                n.name: {"hosts": len(n.hosts), "gpus_per_node": n.gpu_count, "gpu_model": n.gpu_model}
                for n in self.node_types.values()
            },
            "gpus_total": sum(h.gpu_count for h in self.compute),
            "versions": dict(sorted(self.versions.items())),
            "partitions": [p.name for p in self.partitions],
            "teams": {t.name: t.shares for t in self.teams},
            "ignored": list(self.ignored),
        }


@dataclass(frozen=True)
class Secrets:
    """The cluster's generated secrets (see kiln/secrets.py); never printed."""

    munge_key: bytes
    dbd_password: str
    # secrets the site provides, by file name in the secrets directory (kiln/secrets.py ``site_secrets``)
    site: dict[str, bytes] = field(default_factory=dict, compare=False)
    # the password Prometheus, Alertmanager and the exporters ask for (HTTP basic auth, user "kiln")
    monitoring_password: str = ""
    # kiln-remediate's SSH key (OpenSSH private key), only where remediation is enabled
    remediation_key: bytes = b""
    # the cluster's CA and each host's certificate (kiln/tls.py), where the monitoring listeners serve TLS
    tls: ClusterTls | None = field(default=None, compare=False)
    # tang's keys and the encrypted volumes' recovery passphrases (kiln/disk_keys.py), where any host has one
    disks: Any = field(default=None, compare=False)
    # the passwords of kiln's Kerberos realm (kiln/kerberos_keys.py), where an NFS export or mount uses Kerberos
    kerberos: Any = field(default=None, compare=False)

    def __repr__(self) -> str:
        return "Secrets(<masked>)"

    def mask(self, text: str) -> str:
        hidden = [*(self.disks.hidden() if self.disks is not None else []),
                  *(self.kerberos.hidden() if self.kerberos is not None else [])]
        for secret in (self.dbd_password, self.monitoring_password, self.remediation_key.decode(errors="replace"),
                       *hidden):
            text = text.replace(secret, "********") if secret else text
        return text
