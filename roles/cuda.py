"""The cuda role: the CUDA toolkit (compilers, headers, libraries) at the ``cuda`` pin, held.

Defaults, in one place:

+ From ``kiln_nvidia_source``: ``cuda-toolkit-X-Y`` (NVIDIA's repository, in /usr/local/cuda, with
  /etc/profile.d/kiln-cuda.sh putting its bin/ on PATH) or the archive's ``nvidia-cuda-toolkit``.
+ A pin of "" leaves the toolkit out (CUDA comes inside the teams' containers).
+ The kernel guard applies, as for the driver.
"""

from __future__ import annotations

from kiln.versions import upstream
from roles import nvidia_packages as pkgs
from roles.context import NodeContext
from roles.nvidia_driver import repositories
from roles.operations import pinned_packages

PROFILE = "export PATH=/usr/local/cuda/bin:$PATH\n"


def install(ctx: NodeContext) -> None:
    pin = ctx.cluster.versions.get("cuda") or ""
    if not pin:
        return
    source = ctx.cluster.setting("nvidia_source")
    repositories(ctx)
    pinned_packages(name=f"cuda: toolkit {upstream(pin)}, held", ctx=ctx,
                    packages=pkgs.cuda_toolkit(source, ctx.platform, pin),
                    guard_kernel=ctx.cluster.versions.get("kernel") or "")
    if source == "cuda":
        ctx.put("/etc/profile.d/kiln-cuda.sh", "# Written by kiln\n" + PROFILE, mode="644",
                name="cuda: /usr/local/cuda/bin on PATH")


def configure(ctx: NodeContext) -> None:
    pass
