"""The base root filesystem an image starts from, per OS: what is bootstrapped before any role runs.

Debian and Ubuntu: ``debootstrap`` (minbase plus what a node needs to boot and be reached: systemd,
openssh-server, python3 for kiln's checks). Rocky 9: ``dnf --installroot`` with the same set. Only
Debian 12 is built live on these machines (the testbed's base: kiln/testbed/base.py builds it, keyed
by its recipe); the others are plans (``bootstrap_commands``), reviewed in tests/plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.shell import command

# What every base has, by the names each family's package manager uses.
DEB_PACKAGES = ("systemd", "systemd-sysv", "dbus", "libpam-systemd", "openssh-server", "iproute2",
                "iputils-ping", "python3", "sudo", "ca-certificates", "procps", "less", "netbase", "kmod")
RPM_PACKAGES = ("systemd", "dbus", "openssh-server", "iproute", "iputils", "python3", "sudo", "ca-certificates",
                "procps-ng", "less", "kmod", "rocky-release", "dnf", "glibc-langpack-en")


@dataclass(frozen=True)
class BaseRecipe:
    os: str
    tool: str          # debootstrap | dnf
    release: str       # suite (bookworm, jammy, noble) or releasever (9)
    mirror: str

    @property
    def packages(self) -> tuple[str, ...]:
        return DEB_PACKAGES if self.tool == "debootstrap" else RPM_PACKAGES


BASES = {
    "debian12": BaseRecipe("debian12", "debootstrap", "bookworm", "http://deb.debian.org/debian"),
    "ubuntu2204": BaseRecipe("ubuntu2204", "debootstrap", "jammy", "http://archive.ubuntu.com/ubuntu"),
    "ubuntu2404": BaseRecipe("ubuntu2404", "debootstrap", "noble", "http://archive.ubuntu.com/ubuntu"),
    "rocky9": BaseRecipe("rocky9", "dnf", "9", "https://dl.rockylinux.org/pub/rocky/9"),
}

LIVE = ("debian12",)  # bases kiln builds on these machines; the others are planned


def bootstrap_commands(os: str, root: str) -> list[str]:
    """The host commands that make the base of ``os`` in directory ``root``."""
    base = BASES[os]
    if base.tool == "debootstrap":
        components = ("--components=main,universe",) if os.startswith("ubuntu") else ()
        return [command("debootstrap", "--variant=minbase", *components, f"--include={','.join(base.packages)}",
                        base.release, root, base.mirror)]
    repos = (f"--repofrompath=baseos,{base.mirror}/BaseOS/x86_64/os/",
             f"--repofrompath=appstream,{base.mirror}/AppStream/x86_64/os/")
    return [command("dnf", "-y", "--installroot", root, "--releasever", base.release, "--setopt=install_weak_deps=False",
                    "--nogpgcheck", *repos, "install", *base.packages),
            command("dnf", "-y", "--installroot", root, "clean", "all")]
