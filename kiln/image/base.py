"""The base root filesystem an image starts from, per OS: what is bootstrapped before any role runs.

Debian and Ubuntu: ``debootstrap`` (minbase plus what a node needs to boot and be reached: systemd,
openssh-server, python3 for kiln's checks). Rocky 9: ``dnf --installroot`` with the same set. Debian 12
and Debian 13 are built live on these machines (``ensure_base``: cached, keyed by the recipe); the
others are plans (``bootstrap_commands``), reviewed in tests/plan.

A base is an image like any other: the image build copies it and runs roles' install stages into the
copy (kiln/image/build.py), and the testbed boots it, bare or as an image built from it
(kiln/testbed). Neither of those is imported here.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kiln.image.commands import run_step
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
    release: str       # suite (bookworm, trixie, jammy, noble) or releasever (9)
    mirror: str
    name: str = ""     # as people say it: "Debian 12"
    # Debian: the suites a node's apt reads beside the release (updates, backports; security apart)
    suites: tuple[str, ...] = ()

    @property
    def packages(self) -> tuple[str, ...]:
        return DEB_PACKAGES if self.tool == "debootstrap" else RPM_PACKAGES


DEBIAN = "http://deb.debian.org/debian"
BASES = {
    "debian12": BaseRecipe("debian12", "debootstrap", "bookworm", DEBIAN, "Debian 12", ("bookworm-updates",)),
    # Debian 13: backports too, where Debian publishes its newer NVIDIA driver builds (NotAutomatic:
    # nothing comes from there unless a pin asks for its version)
    "debian13": BaseRecipe("debian13", "debootstrap", "trixie", DEBIAN, "Debian 13",
                           ("trixie-updates", "trixie-backports")),
    "ubuntu2204": BaseRecipe("ubuntu2204", "debootstrap", "jammy", "http://archive.ubuntu.com/ubuntu", "Ubuntu 22.04"),
    "ubuntu2404": BaseRecipe("ubuntu2404", "debootstrap", "noble", "http://archive.ubuntu.com/ubuntu", "Ubuntu 24.04"),
    "rocky9": BaseRecipe("rocky9", "dnf", "9", "https://dl.rockylinux.org/pub/rocky/9", "Rocky Linux 9"),
}

LIVE = ("debian12", "debian13")  # bases kiln builds on these machines; the others are planned


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


# --- the live bases (Debian) ---

CACHE = Path("/var/cache/kiln/bases")
RECIPE_VERSION = "5"  # 5: no testbed shortcut (container cgroup unit, masked network-online wait)

APT_RETRIES = 'Acquire::Retries "5";\nAcquire::http::Timeout "30";\nAPT::Install-Recommends "false";\n'


def apt_sources(os: str) -> str:
    """deb822 sources of a Debian base: the release and its suites, and security. contrib and non-free
    too: Debian's NVIDIA driver packages depend on glx-alternative-nvidia, which lives in contrib."""
    base = BASES[os]
    parts = "Components: main contrib non-free non-free-firmware\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    return (f"Types: deb\nURIs: {base.mirror}\nSuites: {' '.join((base.release, *base.suites))}\n{parts}\n"
            f"Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: {base.release}-security\n{parts}")


def recipe_hash(os: str) -> str:
    base = BASES[os]
    text = "\n".join([RECIPE_VERSION, os, base.release, base.mirror, *base.packages,
                      apt_sources(os), APT_RETRIES])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def base_dir(os: str) -> Path:
    return CACHE / f"{os}-{recipe_hash(os)}"


def ensure_base(os: str, progress: Callable[[str], None]) -> Path:
    """The base rootfs of ``os``, built with debootstrap if missing. Returns its path. The build goes
    to a temporary directory renamed into place only when complete, so a killed build never leaves a
    half base behind; a base of an older recipe of the same OS is removed."""
    if os not in LIVE:
        raise ValueError(f"kiln builds the {os} base as a plan only; live bases: {', '.join(LIVE)}")
    final = base_dir(os)
    rootfs = final / "rootfs"
    if (final / "complete").exists():
        return rootfs
    CACHE.mkdir(parents=True, exist_ok=True)
    # One build of an OS's base at a time (two testbeds, or a testbed and an image build, coming up at
    # once): the second waits for the first's lock and then finds the base complete.
    with open(CACHE / f"{os}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"waiting for another build of the {BASES[os].name} base to finish")
            fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "complete").exists():
            return rootfs
        return _build(os, final, progress)


def _build(os: str, final: Path, progress: Callable[[str], None]) -> Path:
    for stale in CACHE.glob(f"{os}-*.tmp"):
        shutil.rmtree(stale, ignore_errors=True)  # a build killed half-way
    tmp = CACHE / f"{final.name}.tmp"
    started = time.monotonic()
    progress(f"building the {BASES[os].name} base with debootstrap (once; cached in {final})")
    run_step(["sh", "-c", bootstrap_commands(os, str(tmp / "rootfs"))[0]], f"debootstrap {os}", 900,
             BaseBuildError)
    _customize(os, tmp / "rootfs")
    (tmp / "complete").write_text(f"{recipe_hash(os)}\n")
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    for old in CACHE.glob(f"{os}-*"):
        if old != final and not old.name.endswith(".tmp"):
            shutil.rmtree(old, ignore_errors=True)  # an older recipe
    progress(f"{BASES[os].name} base built in {time.monotonic() - started:.0f} s")
    return final / "rootfs"


class BaseBuildError(Exception):
    """A base could not be built (debootstrap or the chroot's systemctl failed); nothing is left half-made."""


def _customize(os: str, root: Path) -> None:
    for key in (root / "etc" / "ssh").glob("ssh_host_*"):
        key.unlink()  # each machine gets its own host keys
    (root / "etc" / "machine-id").write_text("")
    # A base is what production images are built from: nothing only the testbed's container nodes need
    # (the testbed adds that to a node's own disk when it boots one, kiln/testbed/node_files.py), and
    # systemd-networkd-wait-online left as Debian ships it, so network-online.target (NFS mounts, slurmd)
    # waits for the node's network.
    run_step(["chroot", str(root), "systemctl", "enable", "systemd-networkd"], "enable systemd-networkd", 120,
             BaseBuildError)
    (root / "etc" / "apt" / "sources.list").write_text("")
    (root / "etc" / "apt" / "sources.list.d" / "debian.sources").write_text(apt_sources(os))
    (root / "etc" / "apt" / "apt.conf.d" / "80kiln-retries").write_text(APT_RETRIES)
