"""The inventory's storage settings: what a node mounts, what a lab storage server serves, and what each
parallel filesystem's client needs (documented once here, as the rest in kiln/inventory/schema.py)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from kiln.inventory.formats import (Address, ExportClient, MountOptions, MountPoint, MountSource, Token, Url, ascii_digits,
                                    _text)
from kiln.inventory.strict import Strict as _Strict

STORAGE_TYPES = ("nfs", "lustre", "beegfs", "gpfs", "weka", "cephfs", "glusterfs", "sshfs", "bind", "tmpfs")
# An LNet network: a network type with an optional number and the interfaces it uses, e.g. o2ib0(ib0),
# tcp0(eth0), o2ib1(ib0,ib1)
LNET_NETWORK = re.compile(r"^(?:o2ib|tcp|kfi|gni|ptl4)\d{0,3}\([A-Za-z0-9_.:-]{1,15}(?:,[A-Za-z0-9_.:-]{1,15})*\)$", re.ASCII)
# A directory under a mount that holds one directory per team (``.``: the mount's root itself holds them)
TEAM_DIRECTORY = re.compile(r"^(?:\.|[a-z][a-z0-9_-]{0,31})$", re.ASCII)
TeamDirectory = _text("team directory", TEAM_DIRECTORY, "a lower-case name such as projects or scratch (a "
                      "letter first, then letters, digits, '_', '-'), or . for the mount's root")
# Mounts whose contents live only on one node: a team directory there would be lost at the next boot
LOCAL_TYPES = ("tmpfs",)
LNetNetwork = _text("LNet network", LNET_NETWORK, "a network type (o2ib, tcp, kfi), an optional number and its "
                    "interfaces in parentheses, e.g. o2ib0(ib0) or tcp0(eth0)")


class StorageMount(_Strict):
    """A filesystem every node of the group must have mounted."""

    path: MountPoint = Field(description="absolute, normalised mount point, e.g. /home; never a system "
                             "directory such as /etc or /var")
    type: str = Field(description=f"one of {', '.join(STORAGE_TYPES)}")
    source: MountSource = Field(description="what is mounted, e.g. nfs01:/export/home")
    options: MountOptions = Field("defaults", description="mount options, comma separated, no spaces")
    warn_percent: int = Field(80, ge=1, le=100, description="fullness that warns")
    fail_percent: int = Field(95, ge=1, le=100, description="fullness that fails; above warn_percent")
    min_throughput_mbps: int = Field(0, ge=0, le=1_000_000, description="opt-in STORAGE_THROUGHPUT (kiln check, "
                                     "never Slurm's health check): write and read MB/s the node must reach; 0: off")
    backup_servers: list[Address] = Field([], description="glusterfs only: servers the client fetches the "
                                          "volume from when the source's server is down")
    team_directories: list[TeamDirectory] = Field([], max_length=16, description="directories under the mount "
                                                  "that hold one directory per team, e.g. [projects, scratch]: "
                                                  "PATH/projects/TEAM, root-owned, the team's group, mode 2770 "
                                                  "(setgid: files keep the team's group; no access for others); "
                                                  "'.' puts them at PATH/TEAM. Every team needs a group (a gid, or "
                                                  "directory: true). A network filesystem's are made from the "
                                                  "first host of the inventory "
                                                  "that mounts it (its root must not be squashed there)")

    def team_paths(self, teams) -> list[tuple[str, str]]:
        """(directory, team name) of every team directory this mount holds, for ``teams`` with a group (a gid
        or the directory's)."""
        return [(self.team_parent(d) + "/" + t.name, t.name) for d in self.team_directories for t in teams if t.has_group]

    def team_parent(self, directory: str) -> str:
        """Where ``directory`` (one of team_directories) puts the teams' directories."""
        return self.path if directory == "." else self.path + "/" + directory

    @model_validator(mode="after")
    def _warn_below_fail(self) -> "StorageMount":
        if self.warn_percent >= self.fail_percent:
            raise ValueError(f"warn_percent {self.warn_percent} must be below fail_percent {self.fail_percent}")
        return self

    @field_validator("type")
    @classmethod
    def _known_type(cls, v: str) -> str:
        if v not in STORAGE_TYPES:
            raise ValueError(f"unknown storage type {v!r}: use one of {', '.join(STORAGE_TYPES)}")
        return v

    @model_validator(mode="after")
    def _type_settings(self) -> "StorageMount":
        if self.team_directories and self.type in LOCAL_TYPES:
            raise ValueError(f"{self.path}: team_directories on a {self.type} mount would be lost at every boot: "
                             "put them on a shared filesystem")
        if len(set(self.team_directories)) != len(self.team_directories):
            raise ValueError(f"{self.path}: team_directories lists a directory twice")
        if self.backup_servers and self.type != "glusterfs":
            raise ValueError(f"{self.path}: backup_servers is for glusterfs mounts, this one is {self.type}")
        if self.type == "nfs":
            nfs_options_problem = check_nfs_options(self.options)
            if nfs_options_problem:
                raise ValueError(f"{self.path}: {nfs_options_problem}")
        return self


NFS_VERSIONS = ("3", "4", "4.0", "4.1", "4.2")
# NFS security flavours (nfs(5), exports(5)): krb5* need kiln's KDC (kiln/inventory/kerberos.py)
NFS_SECURITY = ("sys", "krb5", "krb5i", "krb5p")


def nfs_security(options: str) -> list[str]:
    """The security flavours of NFS ``options`` (``sec=krb5p:krb5i``: an export may list several), or ["sys"]."""
    for option in options.split(","):
        key, _, value = option.partition("=")
        if key == "sec":
            return value.split(":")
    return ["sys"]


def gives_security(options: str) -> bool:
    """Whether NFS ``options`` name their flavour (without sec=, an NFSv4 client takes what the server offers)."""
    return any(o.partition("=")[0] == "sec" for o in options.split(","))


def uses_kerberos(options: str) -> bool:
    """Whether NFS ``options`` ask for Kerberos (sec=krb5, krb5i or krb5p)."""
    return any(f.startswith("krb5") for f in nfs_security(options))


def check_nfs_security(options: str, several: bool) -> str:
    """What is wrong with the ``sec=`` of NFS ``options`` (an export's may list several flavours, a mount's one)."""
    if not gives_security(options):
        return ""
    given = nfs_security(options)
    unknown = [f for f in given if f not in NFS_SECURITY]
    if unknown:
        return f"sec={':'.join(given)}: {unknown[0]!r} is not a security flavour kiln serves: use {', '.join(NFS_SECURITY)}"
    if len(given) > 1 and not several:
        return f"sec={':'.join(given)}: a mount uses one security flavour"
    return ""


def check_nfs_options(options: str) -> str:
    """What is wrong with an NFS mount's options for a GPU cluster, or "" (see StorageMount)."""
    values = dict(o.partition("=")[::2] for o in options.split(","))
    if "soft" in values or "softerr" in values:
        return ("soft NFS mounts return I/O errors to running jobs when the server is slow for a moment "
                "(a checkpoint written half): use hard (the default) and let kiln check catch a dead server")
    security = check_nfs_security(options, several=False)
    if security:
        return security
    for key in ("vers", "nfsvers"):
        if key in values and values[key] not in NFS_VERSIONS:
            return f"{key}={values[key]} is not an NFS version: use one of {', '.join(NFS_VERSIONS)}"
    for key, low, high in (("timeo", 1, 6000), ("retrans", 0, 100), ("rsize", 1024, 16777216),
                           ("wsize", 1024, 16777216), ("actimeo", 0, 3600)):
        if key in values and not (ascii_digits(values[key]) and low <= int(values[key]) <= high):
            return f"{key}={values[key]} must be a whole number from {low} to {high}"
    return ""


class NfsExport(_Strict):
    """A directory a storage server exports over NFS (the storage_server role; labs and testbeds)."""

    path: MountPoint = Field(description="the exported directory on the server, made if missing")
    clients: list[ExportClient] = Field(min_length=1, description="who may mount it, e.g. 10.0.0.0/24")
    options: MountOptions = Field("rw,sync,no_subtree_check", description="exports(5) options for every client")
    mode: Annotated[str, Field(pattern=r"^[0-7]?[0-7]{3}$")] = Field("755", description="the directory's mode")

    @field_validator("options")
    @classmethod
    def _security(cls, options: str) -> str:
        problem = check_nfs_security(options, several=True)
        if problem:
            raise ValueError(problem)
        return options


def brick_parent(brick: str) -> str:
    """The directory holding a GlusterFS brick: the storage_server role closes it to all but root."""
    return brick.rstrip("/").rsplit("/", 1)[0] or "/"


class GlusterVolume(_Strict):
    """A GlusterFS volume of one brick on its storage server (labs and testbeds: no replication)."""

    name: Token = Field(description="the volume's name, what clients mount as SERVER:/NAME")
    brick: MountPoint = Field(description="the brick directory on the server, made if missing; its parent is made "
                              "root's only (0700), so it must be a directory of its own, e.g. /srv/gluster/NAME")
    quota_soft_timeout: int = Field(60, ge=0, le=1800, description="team quotas only: seconds a brick trusts its "
                                    "count of a directory's use while under 80% of the limit (gluster's soft-timeout; "
                                    "a write within it may pass the limit by what lands meanwhile; 0: counted at "
                                    "every write, slower)")
    quota_hard_timeout: int = Field(5, ge=0, le=60, description="team quotas only: the same above 80% of the limit "
                                    "(gluster's hard-timeout)")

    @field_validator("brick")
    @classmethod
    def _own_parent(cls, brick: str) -> str:
        parent = brick_parent(brick)
        if parent.count("/") < 2:
            raise ValueError(f"{brick}: kiln closes a brick's parent directory to all but root (0700), and {parent} "
                             f"is / or a directory of its first level: put the brick in a directory of its own, "
                             f"e.g. {parent.rstrip('/')}/gluster/{brick.rstrip('/').rsplit('/', 1)[-1]}")
        return brick



APT_SUITE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./-]{0,63}$|^\./$", re.ASCII)
AptSuite = _text("apt suite", APT_SUITE, "a suite (e.g. bookworm) or ./ for a flat repository")


class PackageRepository(_Strict):
    """A vendor's package repository: an apt source or a dnf .repo, always with signature checks (a key
    from ``key_url``, or one the nodes already trust; never ``trusted=yes`` or ``gpgcheck=0``)."""

    url: Url = Field(description="the repository's base URL (apt: before the suite; dnf: the baseurl)")
    key_url: Url | Literal[""] = Field("", description="the signing key (ASCII-armoured); \"\": one the nodes "
                                       "already trust")
    suite: AptSuite = Field("./", description="apt only: the suite, e.g. bookworm, or ./ for a flat repository")
    components: list[Token] = Field([], description="apt only: components after the suite, e.g. [non-free]")


class Lustre(_Strict):
    """The Lustre client (``kiln_lustre``): packages at the ``lustre`` pin and LNet for every node that
    mounts a ``lustre`` filesystem."""

    repository: PackageRepository | None = Field(None, description="the Lustre client packages' repository "
                                                 "(e.g. Whamcloud's for the release and OS); none: the nodes' own "
                                                 "sources have them")
    lnet_networks: list[LNetNetwork] = Field(min_length=1, description="LNet networks in order of preference, "
                                             "e.g. [o2ib0(ib0)] or [tcp0(eth0)]")
    modules: Literal["dkms", "kmod"] | None = Field(None, description="how the kernel modules come: dkms (built "
                                                    "on the node) or kmod (prebuilt for the pinned kernel); "
                                                    "default dkms on Debian and Ubuntu, kmod on Rocky")


class BeeGFS(_Strict):
    """The BeeGFS client (``kiln_beegfs``): packages at the ``beegfs`` pin, its management host, and the
    connection authentication secret (``beegfs-connauth`` in the secrets directory, never in the inventory)."""

    repository: PackageRepository | None = Field(None, description="the BeeGFS packages' repository for the "
                                                 "release and OS; none: the nodes' own sources have them")
    management_host: Address = Field(description="sysMgmtdHost: the BeeGFS management service's host")
    connauth: bool = Field(True, description="use connection authentication (connAuthFile from the secrets "
                           "directory's beegfs-connauth)")


class Ceph(_Strict):
    """The CephFS client (``kiln_ceph``): /etc/ceph/ceph.conf and the client's keyring (the secrets
    directory's ``ceph.client.<client_name>.keyring``, never in the inventory)."""

    monitors: list[Address] = Field(min_length=1, description="the Ceph monitors (mon_host)")
    fsid: Annotated[str, Field(pattern=r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")] | None = \
        Field(None, description="the Ceph cluster's fsid, when known")
    client_name: Token = Field("kiln", description="the CephX user the nodes mount as (client.<name>)")
    client: Literal["fuse", "kernel"] = Field("fuse", description="ceph-fuse, or the kernel's ceph client")
