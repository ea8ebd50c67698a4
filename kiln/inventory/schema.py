"""Every inventory setting kiln reads: name, type, default and meaning, documented once here.

kiln's own settings all start with ``kiln_``. A variable with that prefix that is not listed here is
an error (with a "did you mean"); every other variable belongs to some other tool and is left alone.
The connection variables ``ansible_host``, ``ansible_user``, ``ansible_port``,
``ansible_ssh_private_key_file`` and ``ansible_become`` are read as Ansible defines them.

Cluster-wide settings (``scope="cluster"``) must have one value for the whole inventory: put them in
``group_vars/all/``. Node settings (``scope="host"``) may differ per group or host; Ansible's
precedence applies (host over child group over parent group over all).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, Strict, field_validator, model_validator

from kiln.inventory.formats import (AbsolutePath, QuotaSize, Address, Command, FilePath, IfName, IfNameList, NameGlob, PackageName,
                                    PosixName, QosName, SlurmTime, SysctlKey, SysctlValue, Token, Url, Version, check_address,
                                    check_path, check_user)
from kiln.inventory.directory_schema import Directory
from kiln.inventory.encryption_schema import EncryptedVolume
from kiln.inventory.firewall_schema import Firewall
from kiln.inventory.monitoring_schema import Alerting, AlertThresholds, Receiver, Smtp
from kiln.inventory.privacy_schema import (DEFAULT_PRIVATE_DATA, AccountingRetention, JobTmp, LoginUserLimits, Operators,
                                          PrivateDataKind)
from kiln.inventory.remediation_schema import Bmc, Remediation
from kiln.inventory.workload_schema import WorkloadCheck
from kiln.inventory.storage_schema import (BeeGFS, Ceph, GlusterVolume, Lustre,  # noqa: F401
                                           NfsExport, PackageRepository, StorageMount)
from kiln.inventory.strict import Strict as _Strict

PREFIX = "kiln_"
PROBE_PREFIX = "kiln-probe-"  # a team's probe account: kiln-probe-<team> (the isolation suite's)

SUPPORTED_OS = ("debian12", "debian13", "ubuntu2204", "ubuntu2404", "rocky9")
SERVICE_ACCOUNTS = ("slurm", "munge", "systemd-journal-upload")
# the uploader of the journal to the log host (roles/logs.py) is systemd's DynamicUser, which takes a static
# account of its name when one exists: a fixed UID the firewall lets alone reach the log host
DEFAULT_SERVICE_UIDS = {"slurm": 980, "munge": 981, "systemd-journal-upload": 982}


def service_uids(given: dict[str, int]) -> dict[str, int]:
    """Every service account kiln manages with its UID: ``kiln_service_uids`` over the defaults (an inventory
    that names some keeps the others' defaults)."""
    return {**DEFAULT_SERVICE_UIDS, **given}
FABRIC_TYPES = ("infiniband", "roce", "rxe", "ethernet", "none")


class IPoIB(_Strict):
    """IP over InfiniBand on every node of the fabric; each node's address is ``kiln_ipoib_address``."""

    interface: IfName = Field("ib0", description="the IPoIB interface")
    subnet: Annotated[str, Field(description="the IPoIB network, e.g. 10.20.0.0/16; every node's address is in it")]
    mode: Literal["datagram", "connected"] = Field("datagram", description="datagram (ConnectX-4 and newer: "
                                                   "enhanced IPoIB, datagram only) or connected")
    mtu: int | None = Field(None, ge=576, le=65520, description="interface MTU; default the mode's own "
                            "(datagram 2044 or 4092 with a 4K fabric MTU, connected 65520)")

    @field_validator("subnet")
    @classmethod
    def _network(cls, v: str) -> str:
        try:
            ipaddress.ip_network(v, strict=True)
        except ValueError as e:
            raise ValueError(f"{v!r} is not a network in ADDRESS/PREFIX form: {e}") from None
        return v

    @model_validator(mode="after")
    def _mtu_fits_mode(self) -> "IPoIB":
        if self.mode == "datagram" and self.mtu is not None and self.mtu > 4092:
            raise ValueError(f"mtu {self.mtu} is above datagram mode's 4092: use connected mode or a smaller MTU")
        return self


class RoCE(_Strict):
    """Lossless RoCE settings, applied with NVIDIA's mlnx_qos where the node has it (DOCA/MLNX OFED)."""

    interfaces: list[IfName] = Field([], description="the RoCE netdevs the QoS settings apply to, e.g. [eth2, eth3]")
    traffic_class: int | None = Field(None, ge=0, le=255, description="NCCL_IB_TC: the traffic class NCCL's "
                                      "RDMA traffic carries (e.g. 106 for DSCP 26 with ECN)")
    pfc_priority: int | None = Field(None, ge=0, le=7, description="the one priority with PFC on (lossless)")
    dscp_trust: bool = Field(False, description="trust DSCP (not PCP) to classify traffic")
    ecn: bool = Field(False, description="ECN (DCQCN congestion control) on every priority's RoCE traffic")


class Fabric(_Strict):
    """The node's high-speed network: what the rdma role sets up, the fabric checks expect and
    /etc/nccl.conf says (one description, three readers)."""

    type: Literal["infiniband", "roce", "rxe", "ethernet", "none"] = Field(
        "none", description="infiniband, roce, rxe (soft-RoCE on an Ethernet netdev: labs and testbeds), "
        "ethernet (no RDMA) or none")
    stack: Literal["inbox", "doca", "mlnx_ofed"] = Field("inbox", description="the RDMA stack: the "
                                                         "distribution's rdma-core (inbox), or NVIDIA's DOCA-OFED / "
                                                         "MLNX_OFED at the ofed pin from kiln_ofed_repository")
    hca_count: int = Field(0, ge=0, le=64, description="RDMA adapters (HCAs) the node must show")
    rate_gbps: int = Field(0, ge=0, le=3200, description="expected port rate, e.g. 400 for NDR")
    hcas: list[Token] = Field([], description="HCA names for NCCL_IB_HCA, e.g. mlx5_0")
    socket_ifname: IfNameList | Literal[""] = Field("", description="NCCL_SOCKET_IFNAME (bootstrap network "
                                                    "interface)")
    gid_index: int | None = Field(None, ge=0, le=255, description="NCCL_IB_GID_INDEX, RoCE and rxe only")
    ipoib: IPoIB | None = Field(None, description="IPoIB, InfiniBand only (see IPoIB)")
    roce: RoCE | None = Field(None, description="lossless RoCE settings, RoCE only (see RoCE)")
    rxe_netdev: IfName | Literal[""] = Field("", description="rxe only: the Ethernet netdev soft-RoCE runs on "
                                             "(one rxe device, rxe0, set up at every boot)")

    @model_validator(mode="after")
    def _parts_fit_type(self) -> "Fabric":
        if self.ipoib is not None and self.type != "infiniband":
            raise ValueError(f"ipoib is for an infiniband fabric, this one is {self.type}")
        if self.roce is not None and self.type != "roce":
            raise ValueError(f"roce settings are for a roce fabric, this one is {self.type}")
        if self.gid_index is not None and self.type not in ("roce", "rxe"):
            raise ValueError(f"gid_index is for RoCE (roce or rxe), this fabric is {self.type}")
        if self.type == "rxe" and not self.rxe_netdev:
            raise ValueError("an rxe fabric needs rxe_netdev: the Ethernet interface soft-RoCE runs on")
        if self.rxe_netdev and self.type != "rxe":
            raise ValueError(f"rxe_netdev is for an rxe fabric, this one is {self.type}")
        if self.type == "rxe" and self.stack != "inbox":
            raise ValueError("soft-RoCE (rxe) comes with the distribution's rdma-core: stack must be inbox")
        return self


class TeamUser(_Strict):
    name: PosixName
    uid: int | None = Field(None, ge=1000, le=2**31 - 2, description="required for a team kiln makes local "
                            "accounts for; unset for a directory team (the directory holds the uid)")


class Team(_Strict):
    """A team becomes a Slurm account with fair-share shares, users, a GPU limit and the QoS it may use."""

    name: PosixName
    shares: int = Field(ge=1, le=1_000_000, description="fair-share shares (relative)")
    gid: int | None = Field(None, ge=1000, le=2**31 - 2)
    gpu_limit: int | None = Field(None, ge=0, le=1_000_000, description="GrpTRES gres/gpu for the whole team")
    users: list[TeamUser] = []
    qos: list[QosName] = Field([], max_length=64, description="QoS the team's jobs may ask for (kiln_qos names or "
                                "Slurm's own 'normal'); empty: kiln leaves the account's QoS as they are")
    default_qos: QosName | None = Field(None, description="the QoS of a job that names none; default: the first "
                                        "of qos")
    probe_uid: int | None = Field(None, ge=1000, le=2**31 - 2, description="uid (and gid of its own group) of the "
                                  "team's probe account kiln-probe-<team>: no shell, no password, no Slurm "
                                  "association; the isolation suite runs as it. Unset: the team is not probed")
    probe_user: PosixName | None = Field(None, description="a directory team's probe account: a user of the team's "
                                         "group in the directory, made by the site (kiln never writes the "
                                         "directory) with no password and left out of users (so no Slurm "
                                         "association); the isolation suite runs as it. Only with directory: true "
                                         "(other teams: probe_uid)")
    login_hosts: list[Token] | None = Field(None, max_length=1000, description="the login hosts its users may "
                                            "log in on over SSH (pam_access); unset: every login host; []: none "
                                            "(jobs still run on compute nodes, where pam_slurm_adopt decides)")
    quotas: dict[AbsolutePath, QuotaSize] = Field({}, max_length=64, description="a hard limit on the team's "
                                                 "directory under each team-directory parent, e.g. "
                                                 "{/gluster/projects: 500GB} (kiln/inventory/quotas.py): GlusterFS "
                                                 "volumes served by an inventory host, Lustre (a project quota) "
                                                 "and BeeGFS (a group quota) by the team's gid, NFS (a project "
                                                 "quota on the exporting inventory host's XFS or ext4)")
    directory: bool = Field(False, description="the team's group (named as the team) and its users come from "
                            "kiln_directory through SSSD: kiln makes no local account, gid and uids are the "
                            "directory's; users still lists who gets a Slurm association")

    @property
    def has_group(self) -> bool:
        """Whether the team has a Unix group of its name: a local one (gid) or the directory's."""
        return self.gid is not None or self.directory

    @model_validator(mode="after")
    def _ids_from_one_place(self) -> "Team":
        if self.directory:
            if self.gid is not None:
                raise ValueError(f"team {self.name!r} comes from the directory, which holds its gid: leave gid unset")
            if self.probe_uid is not None:
                raise ValueError(f"team {self.name!r} comes from the directory: its probe account would be a local "
                                 "account in a directory group; leave probe_uid unset")
            given = [u.name for u in self.users if u.uid is not None]
            if given:
                raise ValueError(f"team {self.name!r} comes from the directory, which holds its users' uids: leave "
                                 f"uid unset for {', '.join(given)}")
        else:
            if self.probe_user is not None:
                raise ValueError(f"team {self.name!r}: probe_user names a directory account, and the team is no "
                                 "directory team: give probe_uid (kiln makes kiln-probe-<team>)")
            missing = [u.name for u in self.users if u.uid is None]
            if missing:
                raise ValueError(f"team {self.name!r}: kiln makes its users' local accounts and needs a uid for "
                                 f"{', '.join(missing)} (or mark the team directory: true)")
        return self

    @model_validator(mode="after")
    def _probe_name_fits(self) -> "Team":
        if self.probe_uid is not None and len(PROBE_PREFIX + self.name) > 32:
            raise ValueError(f"the probe account {PROBE_PREFIX + self.name!r} would be longer than 32 characters: "
                             "shorten the team's name or leave probe_uid unset")
        return self

    def probe(self) -> TeamUser | None:
        """The team's probe account: kiln-probe-<team> (probe_uid), a directory team's probe_user (its uid
        the directory's), or None: the team is not probed."""
        if self.probe_uid is not None:
            return TeamUser(name=PROBE_PREFIX + self.name, uid=self.probe_uid)
        return None if self.probe_user is None else TeamUser(name=self.probe_user)


class Qos(_Strict):
    """A Slurm QoS (``sacctmgr add qos``): priority, wall-time and GPU limits, preemption, usage factor.

    GPU limits count ``gres/gpu`` of the jobs running in the QoS: per user (MaxTRESPerUser), per team
    (MaxTRESPerAccount) and all together (GrpTRES). A scavenger QoS is one that others preempt
    (``preempt`` on them), usually with ``usage_factor: 0`` (free for fair-share) and ``priority: 0``."""

    name: QosName
    priority: int = Field(0, ge=0, le=1_000_000, description="QoS priority (weighted by PriorityWeightQOS)")
    max_wall: SlurmTime | None = Field(None, description="longest time limit a job of this QoS may have (MaxWall)")
    max_gpus_per_user: int | None = Field(None, ge=0, le=1_000_000, description="GPUs one user may hold in it")
    max_gpus_per_team: int | None = Field(None, ge=0, le=1_000_000, description="GPUs one team may hold in it")
    max_gpus: int | None = Field(None, ge=0, le=1_000_000, description="GPUs all its jobs together may hold")
    preempt: list[QosName] = Field([], max_length=64, description="QoS whose jobs this QoS's jobs may preempt")
    preempt_mode: Literal["requeue", "cancel"] | None = Field(
        None, description="what happens to this QoS's jobs when they are preempted; default requeue (the "
        "cluster's PreemptMode when a QoS preempts)")
    grace_seconds: int = Field(0, ge=0, le=86400, description="seconds a preempted job gets after SIGTERM (GraceTime)")
    usage_factor: float = Field(1.0, ge=0, le=1000, description="how much of its use counts for fair-share and limits "
                                "(0: free, 1: as is)")


class Partition(_Strict):
    """A Slurm partition made of inventory groups."""

    name: PosixName
    groups: list[Token] = Field(min_length=1, description="inventory groups whose hosts it holds")
    default: bool = False
    max_time: SlurmTime = "INFINITE"
    priority_tier: int = Field(1, ge=0, le=65533)


@dataclass(frozen=True)
class Setting:
    """One documented kiln setting."""

    name: str
    annotation: Any
    default: Any
    scope: Literal["cluster", "host"]
    doc: str


def _s(name: str, annotation: Any, default: Any, scope: Literal["cluster", "host"], doc: str) -> Setting:
    return Setting(PREFIX + name, annotation, default, scope, doc)


_HOSTNAME = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"

SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        # --- cluster-wide ---
        _s("cluster_name", str, "kiln", "cluster", "Slurm ClusterName; lower case letters, digits, '-'"),
        _s("versions", dict[Token, Version | Literal[""]], {}, "cluster",
           "every version pin, in group_vars/all/versions.yml; names and defaults in kiln/versions.py"),
        _s("slurm_partitions", list[Partition], [], "cluster", "Slurm partitions (see Partition)"),
        _s("teams", list[Team], [], "cluster", "teams: Slurm accounts with shares, users, GPU limits, QoS"),
        _s("qos", list[Qos], [], "cluster",
           "Slurm QoS (see Qos): priority, MaxWall, GPU limits per user, per team and in all, preemption "
           "(a scavenger QoS), usage factor; QoS that are not here are left alone"),
        _s("slurm_ha", bool, False, "cluster",
           "allow more than one host in slurm_controller (SlurmctldHost backup order = group order)"),
        _s("secrets_dir", FilePath, "secrets", "cluster",
           "where kiln keeps generated secrets, relative to the inventory's parent; never in git"),
        _s("health_check_interval", Annotated[int, Field(ge=1, le=86400)], 300, "cluster",
           "seconds between node-local health checks (1 to 86400)"),
        _s("topology", dict[Token, list[Token]], {}, "cluster",
           "switch name -> hosts under it; renders topology.conf when set"),
        _s("service_uids", dict[Token, Annotated[int, Field(ge=0, le=2**31 - 2)]], DEFAULT_SERVICE_UIDS, "cluster",
           "fixed UID (and GID of the same number) of service accounts on every node; 100-999 (an account not "
           "named keeps its default)"),
        _s("ntp_servers", list[Address], [], "cluster",
           "time servers for chrony; empty keeps the distribution's pool"),
        _s("package_proxy", Url | Literal[""], "", "cluster", "HTTP proxy for apt/dnf, e.g. http://10.0.0.1:3142"),
        _s("slurm_cgroup_plugin", Literal["autodetect", "cgroup/v1", "cgroup/v2"], "autodetect", "cluster",
           "cgroup.conf CgroupPlugin; cgroup/v1 on hosts with the hybrid hierarchy (the testbed)"),
        _s("slurm_slurmd_timeout", Annotated[int, Field(ge=10, le=65533)], 300, "cluster",
           "SlurmdTimeout: seconds without an answer from slurmd before Slurm sets the node DOWN (a node that lost power)"),
        _s("slurm_requeue_delay", Annotated[int, Field(ge=5, le=3600)], 30, "cluster",
           "seconds a requeued job (its node lost, preempted, requeued by kiln patch) waits before it may start "
           "again: Slurm's AuthInfo cred_expire, also the lifetime of a job step's launch credential (Slurm's "
           "default 120); a change restarts slurmctld"),
        _s("ssh_password_login", bool, False, "cluster",
           "sshd on every node takes passwords (and keyboard-interactive); off: keys only, root by key only "
           "(/etc/ssh/sshd_config.d/00-kiln.conf, read before any other drop-in)"),
        _s("directory", Directory | None, None, "cluster",
           "the LDAP directory the teams marked directory: true come from (see Directory): SSSD on every node "
           "reads their users and groups over TLS; unset: every team's accounts are local, made by kiln"),
        _s("operators", Operators | None, None, "cluster",
           "the operators group (see Operators): its members get sudo on every node (the sudo package, "
           "/etc/sudoers.d/kiln-operators); unset: kiln installs no sudo and grants none"),
        _s("login_user_limits", LoginUserLimits | None, LoginUserLimits(), "cluster",
           "on login hosts (the controllers where there are none): CPU, memory and tasks all of one user's login "
           "sessions together may use (systemd user slices; see LoginUserLimits: 4 cores, 20% of memory, 4096 "
           "tasks; root unlimited); null: no limits"),
        _s("firewall", Firewall, Firewall(), "cluster",
           "default-deny host firewalls by role (see Firewall; roles/firewall_rules.py): SSH from admin_networks "
           "(and users' access_networks on login hosts), each Slurm, monitoring and storage port only from the hosts "
           "whose role needs it, everything between compute hosts (the jobs' own traffic); applied with a timed "
           "rollback; off by default"),
        _s("slurm_private_data", list[PrivateDataKind], DEFAULT_PRIVATE_DATA, "cluster",
           "Slurm's PrivateData (slurm.conf and slurmdbd.conf): what a user sees only of their own: accounts, "
           "jobs (squeue, sacct, scontrol show job, job scripts), usage (sreport, sshare), users; also cloud, "
           "events, nodes, partitions, reservations. root, SlurmUser and operators see all, so kiln's own "
           "tools are unchanged; [] lets every user see everything (Slurm's default)"),
        _s("slurm_job_tmp", JobTmp | None, None, "cluster",
           "a private /tmp and /dev/shm for every job, removed when it ends (see JobTmp: Slurm's job_container/tmpfs, "
           "kept below base_path); a change restarts slurmd on compute nodes; null (the default, Slurm's): jobs on a "
           "node share its /tmp and /dev/shm. Off by default: in systemd-nspawn containers Slurm 22.05 and 24.11 fail "
           "to start a job now and then with it (see JobTmp)"),
        _s("slurm_store_job_scripts", bool, True, "cluster",
           "keep each batch job's script and environment in accounting (AccountingStoreFlags=job_script,job_env): "
           "its owner and operators read them with sacct --batch-script / --env-vars; they are purged with the "
           "job (kiln_slurm_accounting_retention.jobs)"),
        _s("slurm_accounting_retention", AccountingRetention, AccountingRetention(), "cluster",
           "how long slurmdbd keeps jobs, steps, events, reservations, suspensions, transactions and usage before "
           "it purges them (see AccountingRetention; 12 months, usage 24; null keeps a kind for ever)"),
        _s("slurm_upgrade_slurmd_timeout", Annotated[int, Field(ge=10, le=65533)], 3600, "cluster",
           "SlurmdTimeout while kiln patch upgrades Slurm to a new release: raised on every Slurm host (slurm.conf, "
           "scontrol reconfigure) before the first daemon is upgraded, slurm_slurmd_timeout restored after, so a "
           "slurmd restarting into the new release is never set DOWN with its jobs"),
        _s("local_nodes", bool, False, "cluster",
           "allow nodes on this machine's loopback (127.0.0.0/8, ::1, localhost): only for a benchmark or test "
           "whose nodes are sshd's on this machine; otherwise such an address is refused"),
        _s("service_start_timeout", Annotated[int, Field(ge=10, le=7200)], 600, "cluster",
           "seconds a deploy waits for a daemon it (re)started to answer (munge, MariaDB, slurmdbd's port, "
           "slurmctld, slurmd, nfs-server, glusterd) before that host fails; slurmdbd's first start on a large "
           "database, or after an upgrade's conversion, takes minutes"),
        _s("slurm_configless", bool, False, "cluster",
           "configless Slurm: compute nodes hold no slurm.conf; slurmd fetches it and its siblings from slurmctld "
           "(--conf-server), so one compute image serves any cluster"),
        _s("slurm_constrain_devices", bool, True, "cluster",
           "cgroup ConstrainDevices: a job sees only the GPUs it was given"),
        _s("slurm_constrain_cores_memory", bool, True, "cluster",
           "cgroup ConstrainCores and ConstrainRAMSpace: a job gets only its cores and memory"),
        _s("slurm_def_mem_per_cpu", Annotated[int, Field(ge=1, le=2**31 - 1)], None, "cluster",
           "DefMemPerCPU in MiB; default: the smallest compute node's memory_mb / cpus"),
        _s("slurm_health_check", bool, True, "cluster",
           "run kiln's node-local checks as Slurm's HealthCheckProgram every health_check_interval"),
        _s("slurm_check_prolog", bool, False, "cluster",
           "also run the node-local checks as Slurm's Prolog when a job is allocated a node: a failing node "
           "is drained (kiln: reason) and the job requeued to run elsewhere, not held"),
        _s("slurm_check_epilog", bool, False, "cluster",
           "also run the node-local checks as Slurm's Epilog after each job: a failing node is drained "
           "(kiln: reason) before the next job lands there"),
        _s("check_dcgm_level", Annotated[int, Field(ge=0, le=4)], 0, "cluster",
           "dcgmi diag level the gpu suite runs (0 off; 1 takes about a minute, 3 up to 20)"),
        _s("check_kernel_log", Command | Literal[""], "", "cluster",
           "command printing the kernel log since {since} (kiln gives -24h, read once for the gpu and fabric "
           "suites; ISO timestamps let the gpu suite keep the last 2 h for Xids); empty: journalctl -k, else dmesg"),
        _s("check_memlock", bool, True, "cluster", "fail nodes where jobs cannot lock unlimited memory"),
        _s("check_ib_bandwidth_gbps", Annotated[float, Field(ge=0, le=3200)], 0, "cluster",
           "kiln check measures ib_write_bw node to node (a ring) and fails below this; 0: off"),
        _s("check_ib_bandwidth_iterations", Annotated[int, Field(ge=10, le=1_000_000)], 5000, "cluster",
           "messages ib_write_bw sends per pair of the bandwidth ring, 1 MiB each (64 KiB on soft-RoCE); 5000: "
           "about 0.2 s at 200 Gb/s"),
        _s("check_storage_timeout", Annotated[int, Field(ge=2, le=120)], 10, "cluster",
           "seconds a mount has to answer the storage check (stat, a file written, df) before it fails "
           "STORAGE_RESPONDING; a hung mount never stalls the check longer"),
        _s("check_storage_throughput_mib", Annotated[int, Field(ge=1, le=1_048_576)], 256, "cluster",
           "size of the test file STORAGE_THROUGHPUT writes and reads on mounts with a min_throughput_mbps"),
        _s("check_time_sync", bool, True, "cluster", "warn on nodes whose clock is not synchronised"),
        _s("check_textfile_dir", AbsolutePath, "/var/lib/prometheus/node-exporter", "cluster",
           "where the node-local checks write kiln.prom for node_exporter's textfile collector"),
        # --- monitoring (roles/monitoring.py; hosts in the monitoring group run Prometheus and Alertmanager) ---
        _s("remediation", Remediation, Remediation(), "cluster",
           "automatic repair of drained nodes on the controller (see Remediation): ladders per check, budgets, "
           "repeat offenders, a circuit breaker; off by default"),
        _s("monitoring_scrape_seconds", Annotated[int, Field(ge=5, le=300)], 30, "cluster",
           "Prometheus' scrape and rule evaluation interval in seconds"),
        _s("monitoring_retention_days", Annotated[int, Field(ge=1, le=3650)], 15, "cluster",
           "how long Prometheus keeps samples (--storage.tsdb.retention.time)"),
        _s("monitoring_retention_gb", Annotated[int, Field(ge=1, le=1_000_000)], 20, "cluster",
           "the most disk Prometheus' samples may take, in GB (--storage.tsdb.retention.size): the older go first"),
        _s("monitoring_receivers", list[Receiver], [], "cluster",
           "where Alertmanager sends alerts (webhooks, e-mail; see Receiver); empty: alerts stay visible in "
           "Alertmanager itself and `kiln alerts`"),
        _s("monitoring_smtp", Smtp | None, None, "cluster", "the mail relay for e-mail receivers (see Smtp)"),
        _s("monitoring_alerting", Alerting, Alerting(), "cluster", "Alertmanager's grouping and repeat times (see Alerting)"),
        _s("alert_thresholds", AlertThresholds, AlertThresholds(), "cluster",
           "the thresholds of kiln's alert rules (see AlertThresholds)"),
        _s("monitoring_tls", bool, True, "cluster",
           "every monitoring listener (node_exporter, Prometheus, Alertmanager, dcgm-exporter) serves HTTPS only, "
           "with a certificate of the cluster's CA (kept with kiln's secrets, kiln/tls.py), and every client kiln "
           "configures trusts that CA alone; off: plain HTTP (basic auth crosses the network readable)"),
        _s("slurm_tls", bool, False, "cluster",
           "Slurm's own TLS between its daemons and clients (TLSType=tls/s2n, Slurm 25.05 and later); refused at "
           "validation before 25.05, and not yet configured by kiln after: munge signs every Slurm message, and "
           "their content crosses the cluster network readable"),
        _s("tls_certificate_days", Annotated[int, Field(ge=7, le=825)], 365, "cluster",
           "how long each host's certificate of the cluster's CA is valid"),
        _s("tls_renew_days", Annotated[int, Field(ge=1, le=365)], 30, "cluster",
           "kiln deploy makes a host's certificate anew when it expires within this many days (less than "
           "kiln_tls_certificate_days)"),
        # --- the audit trail and the log host (roles/audit.py, roles/logs.py) ---
        _s("audit", bool, True, "cluster",
           "auditd with kiln's rules on every host: privilege use (sudo, su, a logged-in user's programs as root) and "
           "changes to Slurm's, munge's, kiln's, sudo's and the account files, each under a key ausearch -k finds "
           "(roles/audit.py); not run in containers, whose host audits; off: auditd stopped and kiln's rules removed"),
        _s("log_shipping", bool, True, "cluster",
           "every host's journal (logins, sudo, Slurm's daemons, the audit log where auditd runs) is sent as it is "
           "written to the log host, the first host of the monitoring group (systemd-journal-remote over HTTPS with "
           "its certificate of the cluster CA, port 19532), and only kiln's uploader may connect there (the "
           "firewall's output rule); `kiln logs` reads it. Needs kiln_monitoring_tls; off or no monitoring group: "
           "journals stay on their nodes"),
        _s("log_retention_days", Annotated[int, Field(ge=1, le=3650)], 180, "cluster",
           "the log host deletes the journal files it received once they are older than this many days (daily)"),
        _s("log_retention_gb", Annotated[int, Field(ge=1, le=1_000_000)], 50, "cluster",
           "the most disk the received journals may take on the log host, in GB: the oldest files go first (daily)"),
        _s("monitoring_dcgm_exporter_external", bool, False, "cluster",
           "GPU nodes run a dcgm-exporter on port 9400 that kiln does not install (a site's container, the "
           "testbed's stand-in): scrape it as if the dcgm_exporter pin were set"),
        # --- usage and cost (kiln usage) ---
        _s("usage_gpu_hour_prices", dict[Token, Annotated[float, Field(ge=0, le=1_000_000)]], {}, "cluster",
           "price of one GPU-hour per node type (a compute sub-group), e.g. {gpu_h100: 2.9}; written as each "
           "partition's TRESBillingWeights (PriorityFlags=MAX_TRES: a node's CPUs, or its memory, cost as much as "
           "its GPUs), so Slurm bills a job for the largest share of a node it holds, in hundredths of the "
           "currency per hour; kiln usage charges that billing and fair share counts it. The GPU node types of "
           "one partition share one price"),
        _s("usage_currency", Annotated[str, Field(pattern=r"^[A-Z]{3}$")], "USD", "cluster",
           "the currency of kiln_usage_gpu_hour_prices, as an ISO 4217 code (USD, EUR, CHF)"),
        # --- the NVIDIA stack (roles/nvidia_*.py, cuda, nccl, dcgm, fabricmanager, containers) ---
        _s("nvidia_source", Literal["cuda", "ubuntu", "debian"], "cuda", "cluster",
           "where the NVIDIA stack comes from: cuda (NVIDIA's CUDA repository, or its mirror at "
           "kiln_nvidia_repo_url), ubuntu (Ubuntu's -server driver packages) or debian (Debian non-free)"),
        _s("nvidia_repo_url", Url, "https://developer.download.nvidia.com/compute/cuda/repos", "cluster",
           "base URL of NVIDIA's CUDA repository or a site mirror of it (source cuda)"),
        _s("nvidia_driver_extra_packages", list[PackageName], [], "cluster",
           "further packages of the driver's source, installed at the driver pin and held"),
        _s("drift_ignore_packages", list[NameGlob], [], "cluster",
           "packages kiln drift and the drift suite do not report (globs, e.g. a site agent: 'crowdstrike-*')"),
        _s("drift_ignore_units", list[NameGlob], [], "cluster",
           "systemd units kiln drift and the drift suite do not report (globs, e.g. 'site-*.service')"),
        _s("nccl_tests_url", Url, "https://github.com/NVIDIA/nccl-tests/archive/refs/tags/v{version}.tar.gz",
           "cluster", "nccl-tests source tarball ({version} = the nccl_tests pin); a mirror for offline sites"),
        _s("nvidia_container_repo_url", Url, "https://nvidia.github.io/libnvidia-container/stable", "cluster",
           "nvidia-container-toolkit repository (or mirror), with deb/ and rpm/ below it"),
        _s("enroot_url", Url, "https://github.com/NVIDIA/enroot/releases/download/v{version}", "cluster",
           "where enroot's release packages are ({version} = the enroot pin)"),
        _s("pyxis_url", Url, "https://github.com/NVIDIA/pyxis/archive/refs/tags/v{version}.tar.gz", "cluster",
           "pyxis source tarball ({version} = the pyxis pin)"),
        _s("check_gpu_burn_seconds", Annotated[int, Field(ge=0, le=3600)], 0, "cluster",
           "opt-in: seconds of bf16 GEMM per GPU in the gpu suite (needs PyTorch on the node); 0: off"),
        _s("check_gpu_burn_min_percent", Annotated[int, Field(ge=1, le=100)], 70, "cluster",
           "the burn fails a GPU below this percentage of kiln_gpu_bf16_tflops"),
        # (YAML keys reach kiln as text: the node count is read from "2" as from 2)
        _s("check_nccl_cluster_busbw_gbps", dict[Annotated[int, Strict(False), Field(ge=2, le=100_000)],
                                                  Annotated[float, Field(gt=0, le=100_000)]], {}, "cluster",
           "opt-in cluster NCCL check (kiln check --nccl-cluster): node count -> the all_reduce_perf bus bandwidth "
           "floor in GB/s a job over that many nodes (or more, up to the next entry) must reach, e.g. {2: 350, 16: 300}"),
        _s("check_nccl_cluster_program", Command, "/opt/nccl-tests/build/all_reduce_perf", "cluster",
           "the all_reduce_perf the cluster NCCL check runs in each task (built with MPI for multi-node runs)"),
        _s("slurm_mpi", Token, "pmix", "cluster", "srun --mpi plugin for multi-node jobs kiln runs (pmix, pmi2, none)"),
        _s("check_workload", WorkloadCheck, WorkloadCheck(), "cluster",
           "the opt-in workload check (kiln check --suite workload; see WorkloadCheck): PyTorch on the compute "
           "nodes, the probe's size, the slow factor"),
        _s("check_nccl_busbw_gbps", Annotated[int, Field(ge=0, le=100_000)], 0, "cluster",
           "opt-in: single-node all_reduce_perf (nccl-tests) must reach this bus bandwidth in GB/s; 0: off"),
        _s("ofed_repository", PackageRepository | None, None, "cluster",
           "NVIDIA's DOCA-OFED or MLNX_OFED repository, for fabrics with stack doca or mlnx_ofed (packages at the "
           "ofed pin)"),
        _s("lustre", Lustre | None, None, "cluster", "the Lustre client, for nodes with a lustre mount (see Lustre)"),
        _s("beegfs", BeeGFS | None, None, "cluster", "the BeeGFS client, for nodes with a beegfs mount (see BeeGFS)"),
        _s("ceph", Ceph | None, None, "cluster", "the CephFS client, for nodes with a cephfs mount (see Ceph)"),
        # --- per node ---
        _s("os", Literal[SUPPORTED_OS], "debian12", "host", f"node OS: {', '.join(SUPPORTED_OS)}"),
        _s("cpus", Annotated[int, Field(ge=1, le=65536)], None, "host", "CPUs Slurm may use on the node (required on compute nodes)"),
        _s("sockets", Annotated[int, Field(ge=1, le=64)], None, "host", "CPU sockets (optional; Slurm derives it)"),
        _s("cores_per_socket", Annotated[int, Field(ge=1, le=4096)], None, "host", "cores per socket (optional)"),
        _s("threads_per_core", Annotated[int, Field(ge=1, le=16)], None, "host", "hardware threads per core (optional)"),
        _s("memory_mb", Annotated[int, Field(ge=1, le=2**40)], None, "host", "RealMemory in MiB (required on compute nodes)"),
        _s("gpu_count", Annotated[int, Field(ge=0, le=64)], 0, "host", "GPUs per node"),
        _s("gpu_model", Token, None, "host", "GPU model as Slurm GRES type, e.g. h100; required with GPUs"),
        _s("nvswitch", bool, False, "host", "node has NVSwitch (fabric manager required)"),
        _s("gpu_nvlinks", Annotated[int, Field(ge=0, le=64)], None, "host",
           "NVLinks each GPU must list (GPU_NVLINK_COUNT), e.g. for NVLink bridges; default: on NVSwitch nodes "
           "the model's count in checks/gpu.py (h100 18, a100 12, ...), elsewhere not checked; 0: none"),
        _s("gpu_nvlink_layout", Literal["listed", "bridged"], "listed", "host",
           "listed: every NVLink nvidia-smi lists is active and each GPU lists kiln_gpu_nvlinks; bridged (PCIe "
           "cards joined by NVLink bridges): slots without a bridge are inactive by design, and each GPU must have "
           "kiln_gpu_nvlinks active links"),
        _s("features", list[Token], [], "host", "Slurm node features"),
        _s("nvidia_kernel_modules", Literal["open", "proprietary", "none"], "open", "host",
           "NVIDIA kernel modules: open (Turing and newer; required from Blackwell), proprietary, or none "
           "(only nvidia-smi, NVML and persistenced: the module comes with the image or the host)"),
        _s("gpu_bf16_tflops", Annotated[float, Field(gt=0, le=100_000)], None, "host",
           "the GPU model's expected dense bf16 rate in TFLOP/s, for the opt-in burn check (e.g. 989 for H100 SXM)"),
        _s("nccl_topo_file", AbsolutePath | Literal[""], "", "host", "NCCL_TOPO_FILE for /etc/nccl.conf (a topology XML on the node)"),
        _s("fabric", Fabric, None, "host", "high-speed network (see Fabric)"),
        _s("opensm", bool, False, "host", "run a subnet manager (opensm) here: for an InfiniBand fabric whose "
           "switches run none; two such hosts give a standby"),
        _s("ipoib_address", Address | Literal[""], "", "host",
           "the node's IPoIB address (in kiln_fabric.ipoib.subnet, unique); required with ipoib"),
        _s("bmc", Bmc, None, "host", "a compute node's BMC (see Bmc): kiln-remediate power-cycles the node through it "
           "(Redfish) when it answers neither Slurm nor SSH; the password is kiln's secret bmc.password"),
        _s("storage_mounts", list[StorageMount], [], "host", "filesystems the node mounts"),
        _s("storage_nfs_exports", list[NfsExport], [], "host",
           "NFS exports of a storage server (hosts in storage_servers only; see NfsExport)"),
        _s("storage_nfs_lease_seconds", Annotated[int, Field(ge=10, le=3600)], 90, "host",
           "a storage server's nfsd lease and grace time: how long clients wait after a server restart before "
           "they may open files again"),
        _s("storage_backports_kernel", bool, False, "host",
           "a Debian 12 storage server runs Debian's bookworm-backports kernel (linux-image-amd64, 6.12; from the next "
           "boot): Debian 12's own kernel (6.1) fails every NFS request with sec=krb5p as a server (found on a VM "
           "cluster), so validation asks for this where a Debian 12 server exports krb5p; on 6.12 a GlusterFS quotad "
           "with TLS took three restarts of glusterd to serve: keep GlusterFS volumes off such a server"),
        _s("storage_gluster_volumes", list[GlusterVolume], [], "host",
           "GlusterFS volumes of a storage server (hosts in storage_servers only; see GlusterVolume)"),
        _s("storage_gluster_tls", bool, True, "cluster",
           "GlusterFS volumes an inventory host serves speak TLS on their I/O and management paths, with each "
           "host's certificate of the cluster's CA (kiln/tls.py); a volume admits only the inventory hosts that "
           "mount it (kiln/inventory/gluster.py); off: file contents cross the network readable"),
        _s("encrypted_volumes", list[EncryptedVolume], [], "host",
           "node-local disks kept encrypted (LUKS2) and mounted, unlocked at boot by clevis from the tang servers "
           "(every controller) with no person (see EncryptedVolume); not on a controller itself"),
        _s("tang_port", Annotated[int, Field(ge=1, le=65535)], 7500, "cluster",
           "the TCP port tang serves on each controller where any host has kiln_encrypted_volumes (opened in "
           "kiln's firewall to those hosts only)"),
        _s("kerberos_realm", Annotated[str, Field(pattern=r"^$|^[A-Z0-9](?:[A-Z0-9.-]{0,62}[A-Z0-9])?$")], "",
           "cluster", "the realm of kiln's KDC (on the first controller) where an NFS export or mount uses "
           "sec=krb5, krb5i or krb5p (roles/kerberos.py): capitals, digits, '.', '-'; empty: the cluster's name in "
           "capitals"),
        _s("sysctls", dict[SysctlKey, SysctlValue], {}, "host", "kernel parameters set by the base role"),
        _s("ssh_known_hosts_file", FilePath, None, "host",
           "known_hosts file for this host (strict checking is always on; relative paths from the inventory directory)"),
        _s("ssh_config_file", FilePath, None, "host",
           "ssh_config file used to reach this host (relative paths from the inventory directory); only options "
           "that say how to connect (kiln/inventory/ssh_config.py): ProxyCommand, Match exec, Include and the like "
           "are refused"),
    )
}

# Connection variables kiln reads, as Ansible names them: (pyinfra's name, the check of the value)
CONNECTION_VARS = {
    "ansible_host": ("ssh_hostname", check_address),
    "ansible_user": ("ssh_user", check_user),
    "ansible_port": ("ssh_port", int),
    "ansible_ssh_private_key_file": ("ssh_key", check_path),
    "ansible_become": ("_sudo", bool),
}

HOST_RANGE = re.compile(r"\[([^\]]*)\]", re.ASCII)
CLUSTER_NAME = re.compile(_HOSTNAME, re.ASCII)
