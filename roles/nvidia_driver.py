"""The nvidia_driver role: the NVIDIA driver at its exact pin, held, on every GPU node.

Defaults, in one place (settings: kiln/inventory/schema.py; pins: kiln/versions.py; package names
per source and OS: roles/nvidia_packages.py):

+ Packages from ``kiln_nvidia_source`` (cuda, ubuntu or debian) at the ``nvidia_driver`` pin, held
  (``apt-mark hold`` / ``dnf versionlock``). On apt systems an apt preference of priority 1001 keeps
  every package of exactly that version at it, so neither the security archive nor a plain
  ``apt-get upgrade`` moves a dependency nobody named. ``kiln_nvidia_driver_extra_packages`` are
  installed at the pin too.
+ ``kiln_nvidia_kernel_modules``: open, proprietary (DKMS both), or none (nvidia-smi, NVML and
  nvidia-persistenced only: the module comes with the node image or the container's host).
+ Kernel guard: the install fails before anything is installed when it would install or upgrade a
  kernel that ``kiln_versions.kernel`` does not pin (the package manager's own dry run says).
+ nouveau blacklisted in /etc/modprobe.d/kiln-nouveau.conf; the initramfs is rebuilt when that file
  changes (where the node has an initramfs tool).
+ nvidia-persistenced enabled, and started where the nvidia module is loaded; a drop-in skips it (a
  condition, not a failure) where the driver is not loaded. slurmd is ordered after it (slurm role).
+ nvidia-peermem loaded at boot (/etc/modules-load.d) where the fabric is InfiniBand or RoCE.
+ "reboot required" is reported (``notices``) when the loaded nvidia module is not the pinned
  version, or nouveau is loaded: kiln never reboots a node in a deploy; ``kiln patch`` does.
+ Rocky 9 / CUDA repository: the branch's dnf module stream (550-open, 550-dkms) is enabled through
  /etc/dnf/modules.d, so it is a managed file like any other.
"""

from __future__ import annotations

from pyinfra.operations import server

from kiln.versions import upstream
from roles import nvidia_packages as pkgs
from roles.context import NodeContext, when_changed
from roles.operations import (DAEMON_RELOAD, fetched_packages, managed_directory, module_loaded, pinned_packages,
                              service_running)

NOUVEAU = "blacklist nouveau\noptions nouveau modeset=0\n"
PERSISTENCED_DROPIN = "/etc/systemd/system/nvidia-persistenced.service.d"


def modules(ctx: NodeContext) -> str:
    return ctx.node.setting("nvidia_kernel_modules")


def rdma(ctx: NodeContext) -> bool:
    return ctx.node.gpudirect_rdma


def repositories(ctx: NodeContext) -> None:
    """The NVIDIA repository of ``kiln_nvidia_source`` (once per node, whichever role asks first)."""
    if "nvidia_repo" in ctx.marks or ctx.cluster.setting("nvidia_source") != "cuda":
        return
    base = ctx.cluster.setting("nvidia_repo_url")
    if ctx.platform.uses_apt:
        # The key first: apt refuses to refresh a source whose signed-by keyring is missing.
        ctx.watch_path(pkgs.CUDA_KEYRING)
        pinned_packages(name="nvidia: curl for the repository key", ctx=ctx,
                        packages={"curl": None, "ca-certificates": None})
        fetched_packages(name="nvidia: CUDA repository key (cuda-keyring)", ctx=ctx, marker=pkgs.CUDA_KEYRING,
                         urls={"cuda-keyring": f"{pkgs.cuda_repo_url(base, ctx.platform)}/cuda-keyring_1.1-1_all.deb"})
        path, content = pkgs.cuda_apt_source(base, ctx.platform)
        ctx.mark("nvidia_repo", ctx.put(path, content, mode="644", name="nvidia: CUDA repository"))
    else:
        path, content = pkgs.cuda_dnf_repo(base, ctx.platform)
        ctx.mark("nvidia_repo", ctx.put(path, content, mode="644", name="nvidia: CUDA repository"))


def install(ctx: NodeContext) -> None:
    cluster, platform = ctx.cluster, ctx.platform
    pin, source = cluster.versions["nvidia_driver"], cluster.setting("nvidia_source")
    repositories(ctx)
    if platform.uses_apt:
        ctx.put("/etc/apt/preferences.d/kiln-nvidia-driver", pkgs.apt_preference(pin), mode="644",
                name=f"nvidia_driver: apt keeps the driver set at {pin}")
    elif source == "cuda" and modules(ctx) != "none":
        name, _, stream = pkgs.dnf_module_stream(pin, modules(ctx)).partition(":")
        ctx.put(f"/etc/dnf/modules.d/{name}.module",
                f"[{name}]\nname={name}\nstream={stream}\nprofiles=\nstate=enabled\n", mode="644",
                name=f"nvidia_driver: dnf module stream {name}:{stream}")
    ctx.watch_path(PERSISTENCED_DROPIN)
    managed_directory(name="nvidia_driver: nvidia-persistenced drop-in directory", ctx=ctx,
                      path=PERSISTENCED_DROPIN, mode="755", user="root", group="root")
    ctx.mark("persistenced_unit", ctx.put(
        f"{PERSISTENCED_DROPIN}/kiln.conf",
        "# Written by kiln: without a loaded driver the daemon is skipped, not failed.\n"
        "[Unit]\nConditionPathIsDirectory=/proc/driver/nvidia\n", mode="644",
        name="nvidia_driver: nvidia-persistenced only where the driver is loaded"))
    # before the packages: their scripts start the daemon, which must then be skipped, not failed
    server.shell(commands=[DAEMON_RELOAD], name="nvidia_driver: reload systemd (if the persistenced drop-in changed)",
                          _if=when_changed(*ctx.marks["persistenced_unit"]))
    packages = pkgs.driver(source, platform, pin, modules(ctx))
    packages |= {p: pin for p in cluster.setting("nvidia_driver_extra_packages")}
    pinned_packages(name=f"nvidia_driver: {upstream(pin)} ({modules(ctx)} modules), held", ctx=ctx,
                    packages=packages, guard_kernel=cluster.versions.get("kernel") or "")
    blacklist = ctx.put("/etc/modprobe.d/kiln-nouveau.conf", NOUVEAU, mode="644",
                        name="nvidia_driver: nouveau blacklisted")
    tool = platform.initramfs_update.split()[0]
    server.shell(name="nvidia_driver: rebuild the initramfs (if the blacklist changed)", _if=when_changed(blacklist),
                 commands=[f"if command -v {tool} >/dev/null; then {platform.initramfs_update}; "
                           f"else echo 'no {tool} on this node (a container or an image without initramfs)'; fi"])
    if rdma(ctx):
        ctx.put("/etc/modules-load.d/kiln-nvidia-peermem.conf", "nvidia_peermem\n", mode="644",
                name="nvidia_driver: nvidia_peermem loaded at boot (GPUDirect RDMA)")
    for module in ("nvidia", "nouveau", "nvidia_peermem"):
        ctx.watch_module(module)


def configure(ctx: NodeContext) -> None:
    service_running(name="nvidia_driver: nvidia-persistenced enabled (running where the driver is loaded)",
                    ctx=ctx, unit=ctx.watch_unit("nvidia-persistenced"), start=lambda snap: "nvidia" in snap.modules)
    if rdma(ctx):
        module_loaded(name="nvidia_driver: nvidia_peermem loaded (where the driver is)", ctx=ctx,
                      module="nvidia_peermem", requires="nvidia")


def notices(ctx: NodeContext) -> list[str]:
    """Why this node needs a reboot for its driver, read from the snapshot taken before the run."""
    snap = ctx.snapshot
    if snap is None or modules(ctx) == "none":
        return []
    want, loaded = upstream(ctx.cluster.versions["nvidia_driver"]), snap.modules.get("nvidia")
    reasons = []
    if loaded is None:
        reasons.append(f"reboot required: driver {want} installed, no nvidia module loaded")
    elif loaded != want:
        reasons.append(f"reboot required: nvidia module {loaded} loaded, driver {want} installed")
    if "nouveau" in snap.modules:
        reasons.append("reboot required: nouveau is loaded (now blacklisted)")
    return reasons
