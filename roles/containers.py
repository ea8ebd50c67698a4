"""The containers role: containers in Slurm jobs with nvidia-container-toolkit, enroot and pyxis.

Defaults, in one place (each part off while its pin is ""):

+ ``nvidia_container_toolkit``: NVIDIA's libnvidia-container repository (``kiln_nvidia_container_repo_url``)
  and the toolkit packages at the pin, held; GPU nodes only.
+ ``enroot``: enroot and enroot+caps release packages from ``kiln_enroot_url`` at the pin, held;
  GPU nodes and login nodes.
+ ``pyxis``: built from ``kiln_pyxis_url`` against the node's Slurm headers into
  /usr/local/lib/slurm/spank_pyxis.so; /etc/slurm/plugstack.conf includes
  /etc/slurm/plugstack.conf.d/*.conf, where pyxis.conf loads it (``srun --container-image``). A
  changed plugstack file restarts slurmd on compute nodes (slurm role).
"""

from __future__ import annotations

from kiln.shell import quote
from roles.context import NodeContext
from roles.operations import commands_until, fetched_packages, managed_directory, pinned_packages

TOOLKIT_KEYRING = "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"
TOOLKIT_PACKAGES = ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
                    "libnvidia-container1")
PYXIS = "/usr/local/lib/slurm/spank_pyxis.so"


def install(ctx: NodeContext) -> None:
    versions = ctx.cluster.versions
    if ctx.node.gpu_count and versions.get("nvidia_container_toolkit"):
        _toolkit(ctx, versions["nvidia_container_toolkit"])
    if versions.get("enroot"):
        _enroot(ctx, versions["enroot"])
    if versions.get("pyxis"):
        _pyxis(ctx, versions["pyxis"], versions["slurm"])


def _toolkit(ctx: NodeContext, pin: str) -> None:
    url = ctx.cluster.setting("nvidia_container_repo_url").rstrip("/")
    if ctx.platform.uses_apt:
        ctx.watch_path(TOOLKIT_KEYRING)
        commands_until(name="containers: nvidia-container-toolkit repository key", ctx=ctx, marker=TOOLKIT_KEYRING,
                       commands=[f"curl -fsSL --retry 3 {quote(url + '/gpgkey')} | gpg --dearmor -o "
                                 f"{TOOLKIT_KEYRING}"])
        ctx.put("/etc/apt/sources.list.d/nvidia-container-toolkit.list",
                f"# Written by kiln\ndeb [signed-by={TOOLKIT_KEYRING}] {url}/deb/$(ARCH) /\n", mode="644",
                name="containers: nvidia-container-toolkit repository")
    else:
        ctx.put("/etc/yum.repos.d/nvidia-container-toolkit.repo",
                f"# Written by kiln\n[nvidia-container-toolkit]\nname=nvidia-container-toolkit\n"
                f"baseurl={url}/rpm/$basearch\nenabled=1\ngpgcheck=1\ngpgkey={url}/gpgkey\n", mode="644",
                name="containers: nvidia-container-toolkit repository")
    pinned_packages(name=f"containers: nvidia-container-toolkit {pin}, held", ctx=ctx,
                    packages={p: pin for p in TOOLKIT_PACKAGES})


def _enroot(ctx: NodeContext, version: str) -> None:
    base = ctx.cluster.setting("enroot_url").replace("{version}", version).rstrip("/")
    if ctx.platform.uses_apt:
        urls = {n: f"{base}/{n}_{version}-1_amd64.deb" for n in ("enroot", "enroot+caps")}
    else:
        urls = {n: f"{base}/{n}-{version}-1.el8.x86_64.rpm" for n in ("enroot", "enroot+caps")}
    fetched_packages(name=f"containers: enroot {version}, held", ctx=ctx, urls=urls, version=f"{version}-1")


def _pyxis(ctx: NodeContext, version: str, slurm: str) -> None:
    platform = ctx.platform
    dev = {"libslurm-dev": slurm, "make": None, "gcc": None} if platform.uses_apt else \
        {"slurm-devel-ohpc": slurm, "make": None, "gcc": None}
    pinned_packages(name="containers: Slurm headers for pyxis", ctx=ctx, packages=dev)
    marker = f"/usr/local/lib/slurm/.pyxis-{version}"
    ctx.watch_path(marker)
    url = ctx.cluster.setting("pyxis_url").replace("{version}", version)
    src, log = quote(f"/usr/local/src/pyxis-{version}"), quote(f"/usr/local/src/pyxis-{version}/build.log")
    commands_until(name=f"containers: pyxis {version} built", ctx=ctx, marker=marker, commands=[
        f"rm -rf {src} && mkdir -p {src} && curl -fsSL --retry 3 {quote(url)} | tar -xz -C {src} "
        "--strip-components=1",
        f"make -C {src} > {log} 2>&1 && make -C {src} install prefix=/usr/local >> {log} 2>&1 "
        f"|| {{ tail -n 20 {log} >&2; exit 1; }}",
        f"test -f {PYXIS} && touch {quote(marker)}"])
    conf = platform.slurm_conf_dir
    ctx.watch_path(f"{conf}/plugstack.conf.d")
    managed_directory(name="containers: plugstack.conf.d", ctx=ctx, path=f"{conf}/plugstack.conf.d", mode="755",
                      user="root", group="root")
    ctx.mark("node_conf", ctx.put(f"{conf}/plugstack.conf", f"include {conf}/plugstack.conf.d/*.conf\n",
                                  mode="644", name="containers: plugstack.conf"))
    ctx.mark("node_conf", ctx.put(f"{conf}/plugstack.conf.d/pyxis.conf", f"required {PYXIS}\n", mode="644",
                                  name="containers: pyxis loaded by Slurm"))


def configure(ctx: NodeContext) -> None:
    pass
