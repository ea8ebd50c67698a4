"""Which packages and repositories make up the NVIDIA stack, per package source and OS: pure functions.

The roles (nvidia_driver, cuda, nccl, dcgm, fabricmanager) ask here for names and versions; nothing
here reads a node. Sources (``kiln_nvidia_source``):

+ ``cuda``: NVIDIA's CUDA repository (or a mirror of it at ``kiln_nvidia_repo_url``) for Debian 12,
  Ubuntu 22.04/24.04 (``nvidia-driver-550``-style names) and Rocky 9 (dnf module stream per branch).
+ ``ubuntu``: Ubuntu's own ``-server`` driver branch packages (``nvidia-driver-550-server``).
+ ``debian``: Debian's non-free archive (``nvidia-driver``, ``nvidia-smi``; no NCCL, DCGM, fabric manager).

Every package that belongs to the driver is installed at the pin and held; on apt systems an apt
preference of priority 1001 pins every package of that exact version too, so a dependency nobody named
(``libnvidia-ml1``) cannot be pulled to a newer version by the security archive or a plain upgrade.
"""

from __future__ import annotations

from roles.platform import Platform
from kiln.versions import upstream

CUDA_KEYRING = "/usr/share/keyrings/cuda-archive-keyring.gpg"
CUDA_KEY_RPM = "D42D0685.pub"  # NVIDIA's signing key for the rhel9 repository


def branch(pin: str) -> str:
    """The driver branch of a driver pin: ``550.163.01-0ubuntu1`` -> ``550``."""
    return upstream(pin).split(".")[0]


def cuda_dist(platform: Platform) -> str:
    """The CUDA repository's name for the OS: ubuntu2204, ubuntu2404, debian12, rhel9."""
    return "rhel9" if platform.os == "rocky9" else platform.os


def cuda_repo_url(base: str, platform: Platform) -> str:
    return f"{base.rstrip('/')}/{cuda_dist(platform)}/x86_64"


def cuda_apt_source(base: str, platform: Platform) -> tuple[str, str]:
    """(path, content) of the apt source for the CUDA repository. The path is the one NVIDIA's
    cuda-keyring package writes, so the keyring package's own list never points past a mirror."""
    dist = cuda_dist(platform)
    return (f"/etc/apt/sources.list.d/cuda-{dist}-x86_64.list",
            f"# Written by kiln (kiln_nvidia_repo_url)\ndeb [signed-by={CUDA_KEYRING}] "
            f"{cuda_repo_url(base, platform)}/ /\n")


def cuda_dnf_repo(base: str, platform: Platform) -> tuple[str, str]:
    url = cuda_repo_url(base, platform)
    return ("/etc/yum.repos.d/cuda-rhel9.repo",
            f"# Written by kiln (kiln_nvidia_repo_url)\n[cuda-rhel9-x86_64]\nname=cuda-rhel9-x86_64\n"
            f"baseurl={url}\nenabled=1\ngpgcheck=1\ngpgkey={url}/{CUDA_KEY_RPM}\n")


def apt_preference(pin: str) -> str:
    """An apt preference that makes every NVIDIA package of exactly the driver's version win (1001)."""
    return (f"# Written by kiln: the driver set stays at {pin}; kiln patch moves it.\n"
            f"Package: *nvidia* libcuda* libnv*\nPin: version {pin}\nPin-Priority: 1001\n")


def driver(source: str, platform: Platform, pin: str, modules: str) -> dict[str, str | None]:
    """Driver packages: name -> version (None: any version, not held). ``modules`` is open,
    proprietary or none (only nvidia-smi, NVML and nvidia-persistenced)."""
    b, kernel = branch(pin), modules != "none"
    if platform.family == "redhat":
        packages = {"nvidia-driver-cuda": pin, "nvidia-driver-cuda-libs": pin, "nvidia-persistenced": pin}
        if kernel:
            packages["nvidia-driver"] = pin
            packages["kmod-nvidia-open-dkms" if modules == "open" else "kmod-nvidia-latest-dkms"] = pin
        return packages
    if source == "debian" or (source == "cuda" and platform.distro_id == "debian"):
        packages = {"nvidia-smi": pin}
        if kernel:
            packages["nvidia-driver"] = pin
            packages["nvidia-open-kernel-dkms" if modules == "open" else "nvidia-kernel-dkms"] = pin
        # Debian builds nvidia-persistenced from its own source, at its own version.
        packages["nvidia-persistenced"] = pin if source == "cuda" else None
        return packages
    suffix = "-server" if source == "ubuntu" else ""
    packages = {f"nvidia-utils-{b}{suffix}": pin, f"nvidia-compute-utils-{b}{suffix}": pin,
                f"libnvidia-compute-{b}{suffix}": pin}
    if kernel:
        flavour = "-open" if modules == "open" else ""
        packages[f"nvidia-driver-{b}{suffix}{flavour}"] = pin
        packages[f"nvidia-dkms-{b}{suffix}{flavour}"] = pin
    return packages


def dnf_module_stream(pin: str, modules: str) -> str:
    """Rocky 9 / CUDA repository: the driver branch is a dnf module stream (550-open, 550-dkms)."""
    return f"nvidia-driver:{branch(pin)}-{'open' if modules == 'open' else 'dkms'}"


def cuda_toolkit(source: str, platform: Platform, pin: str) -> dict[str, str]:
    if source != "cuda":
        return {"nvidia-cuda-toolkit": pin}
    major, minor = upstream(pin).split(".")[:2]
    return {f"cuda-toolkit-{major}-{minor}": pin}


def cuda_suffix(cuda_pin: str) -> str:
    """NVIDIA builds NCCL per CUDA version: ``+cuda12.4``."""
    return "+cuda" + ".".join(upstream(cuda_pin).split(".")[:2])


def nccl(source: str, platform: Platform, pin: str, cuda_pin: str) -> dict[str, str]:
    version = pin + cuda_suffix(cuda_pin) if source == "cuda" else pin
    if platform.family == "redhat":
        return {"libnccl": version, "libnccl-devel": version}
    return {"libnccl2": version, "libnccl-dev": version}


def dcgm(platform: Platform, pin: str, cuda_pin: str) -> dict[str, str]:
    """DCGM 3 is one package; DCGM 4 is split per CUDA major version."""
    if int(upstream(pin).split(".")[0]) >= 4:
        cuda_major = upstream(cuda_pin).split(".")[0] if cuda_pin else "12"
        return {"datacenter-gpu-manager-4-core": pin, f"datacenter-gpu-manager-4-cuda{cuda_major}": pin}
    return {"datacenter-gpu-manager": pin}


def fabricmanager(source: str, platform: Platform, pin: str) -> dict[str, str]:
    if platform.family == "redhat":
        return {"nvidia-fabric-manager": pin}
    if source == "cuda" and platform.distro_id == "debian":
        return {"nvidia-fabricmanager": pin}
    return {f"nvidia-fabricmanager-{branch(pin)}": pin}
