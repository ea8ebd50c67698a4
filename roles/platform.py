"""What differs between the node operating systems kiln supports: package names, paths, services.

Roles never test the OS themselves; they ask the node's ``Platform``. Debian 12 and Debian 13 run
live on the testbed; Ubuntu 22.04/24.04 and Rocky 9 are shown by op-list tests from recorded facts
(tests/plan/). An OS not listed here stops the run before any change (see ``platform_for``).

Rocky 9 takes Slurm from OpenHPC 3 (``*-ohpc`` packages, repository from the ``ohpc-release``
package) with EPEL and CRB enabled, as the OpenHPC install guide does; munge and MariaDB come from
the distribution.
"""

from __future__ import annotations

from dataclasses import dataclass, field

OPENHPC_RELEASE_RPM = "http://repos.openhpc.community/OpenHPC/3/EL_9/x86_64/ohpc-release-3-1.el9.x86_64.rpm"


@dataclass(frozen=True)
class SlurmPackages:
    """Package names per Slurm component; every one is installed at the ``slurm`` pin and held."""

    client: tuple[str, ...]
    controller: tuple[str, ...]
    dbd: tuple[str, ...]
    compute: tuple[str, ...]
    pam_adopt: tuple[str, ...]


@dataclass(frozen=True)
class Platform:
    os: str                      # the inventory's kiln_os value
    family: str                  # "debian" or "redhat"
    distro_id: str               # /etc/os-release ID
    major_version: int           # /etc/os-release VERSION_ID (major)
    slurm: SlurmPackages
    munge_package: str = "munge"
    mariadb_packages: tuple[str, ...] = ("mariadb-server",)
    mariadb_service: str = "mariadb"
    mariadb_conf: str = "/etc/mysql/mariadb.conf.d/90-kiln.cnf"  # read after the package's own files
    chrony_package: str = "chrony"
    chrony_service: str = "chrony"
    chrony_conf: str = "/etc/chrony/chrony.conf"
    nologin: str = "/usr/sbin/nologin"
    slurm_conf_dir: str = "/etc/slurm"
    pam_sshd: str = "/etc/pam.d/sshd"
    # The first line of sshd's account stack that may end it early or hands it to another file (Debian's
    # common-account, Rocky's password-auth, a site's own `sufficient` module): kiln's `required` account
    # lines go before it. With SSSD on, common-account starts with `account sufficient pam_localuser.so`,
    # and a line after it is never reached by a local user.
    pam_account_anchor: str = (r"^[[:space:]]*(@include[[:space:]]+common-account|"
                               r"-?account[[:space:]]+(include|substack|sufficient|\[))")
    ssh_service: str = "ssh"
    # PAM files sshd's session stack includes, and the command that takes pam_systemd out of each (it
    # would move an ssh session out of the job's cgroup that pam_slurm_adopt put it in)
    pam_systemd_off: tuple[tuple[str, str], ...] = (
        ("/etc/pam.d/common-session", "DEBIAN_FRONTEND=noninteractive pam-auth-update --disable systemd"),)
    initramfs_update: str = "update-initramfs -u"
    # Release packages that add repositories a role needs (Rocky: EPEL, OpenHPC): name -> where from.
    repo_packages: tuple[tuple[str, str], ...] = field(default=())

    @property
    def uses_apt(self) -> bool:
        return self.family == "debian"


_DEB_SLURM = SlurmPackages(
    client=("slurm-client",), controller=("slurmctld",), dbd=("slurmdbd",), compute=("slurmd",),
    pam_adopt=("libpam-slurm-adopt",))

PLATFORMS: dict[str, Platform] = {
    "debian12": Platform("debian12", "debian", "debian", 12, _DEB_SLURM),
    # Debian 13: systemd 257 on the unified cgroup hierarchy only, Slurm 24.11, kernel 6.12
    "debian13": Platform("debian13", "debian", "debian", 13, _DEB_SLURM),
    "ubuntu2204": Platform("ubuntu2204", "debian", "ubuntu", 22, _DEB_SLURM),
    "ubuntu2404": Platform("ubuntu2404", "debian", "ubuntu", 24, _DEB_SLURM),
    "rocky9": Platform(
        "rocky9", "redhat", "rocky", 9,
        SlurmPackages(client=("slurm-ohpc",), controller=("slurm-slurmctld-ohpc",),
                      dbd=("slurm-slurmdbd-ohpc",), compute=("slurm-slurmd-ohpc",),
                      pam_adopt=("slurm-pam_slurm-ohpc",)),
        mariadb_conf="/etc/my.cnf.d/90-kiln.cnf",
        chrony_service="chronyd", chrony_conf="/etc/chrony.conf", nologin="/sbin/nologin", initramfs_update="dracut -f",
        ssh_service="sshd",
        # authselect writes these files: a site that runs `authselect apply-changes` must use a custom
        # profile without pam_systemd, or this deploy puts it back the next time
        pam_systemd_off=tuple((f, f"sed -i -E 's/^(-?session[[:space:]]+[^#]*pam_systemd[.]so)/#\\1/' {f}")
                              for f in ("/etc/pam.d/password-auth", "/etc/pam.d/system-auth")),
        repo_packages=(("epel-release", "epel-release"), ("ohpc-release", OPENHPC_RELEASE_RPM)),
    ),
}


class UnsupportedPlatform(Exception):
    """The node runs an OS kiln has no platform for, or not the one the inventory says."""


def platform_for(inventory_os: str, distro: dict | None) -> Platform:
    """The platform for a node, checked against what the node itself reports (pyinfra's
    ``server.LinuxDistribution`` fact). Raises ``UnsupportedPlatform`` with a message that says
    what to change; called before any operation is added, so nothing on the node changes."""
    platform = PLATFORMS.get(inventory_os)
    if platform is None:
        raise UnsupportedPlatform(f"kiln_os {inventory_os!r} is not supported: use one of {', '.join(PLATFORMS)}")
    if not distro:
        raise UnsupportedPlatform("could not read /etc/os-release on the node")
    release = distro.get("release_meta") or {}
    node_id = (release.get("ID") or "").lower()
    node_version = str(release.get("VERSION_ID") or distro.get("major") or "")
    node_major = node_version.split(".")[0]
    if node_id != platform.distro_id or node_major != str(platform.major_version):
        pretty = release.get("PRETTY_NAME") or f"{node_id} {node_version}".strip() or "an unknown OS"
        matches = [p.os for p in PLATFORMS.values()
                   if p.distro_id == node_id and str(p.major_version) == node_major]
        hint = (f"set kiln_os: {matches[0]} for this host" if matches
                else f"kiln supports {', '.join(PLATFORMS)}; this OS is not one of them")
        raise UnsupportedPlatform(f"the inventory says kiln_os {inventory_os!r} but the node runs {pretty}: {hint}")
    return platform
