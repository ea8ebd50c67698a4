"""The nccl role: NCCL at its pin, /etc/nccl.conf from the inventory's fabric, and nccl-tests.

Defaults, in one place:

+ ``libnccl2``/``libnccl-dev`` (``libnccl``/``libnccl-devel`` on Rocky) at the ``nccl`` pin; from
  NVIDIA's repository the version carries the CUDA suffix of the ``cuda`` pin (``2.21.5-1+cuda12.4``).
  Held. A pin of "" leaves NCCL to the containers; /etc/nccl.conf is written all the same.
+ /etc/nccl.conf (0644) on every GPU node from ``kiln_fabric``: ``NCCL_IB_HCA`` (fabric.hcas),
  ``NCCL_IB_GID_INDEX`` (RoCE), ``NCCL_SOCKET_IFNAME``, ``NCCL_TOPO_FILE`` (``kiln_nccl_topo_file``);
  ``NCCL_IB_DISABLE=1`` where the fabric is Ethernet or none.
+ nccl-tests at the ``nccl_tests`` pin, built from ``kiln_nccl_tests_url`` into
  /opt/nccl-tests-<version> with /opt/nccl-tests pointing at it (the gpu suite's opt-in
  ``all_reduce_perf`` runs /opt/nccl-tests/build/all_reduce_perf). Built only where both the CUDA
  toolkit and NCCL are pinned; a new pin builds the new version beside the old one.
"""

from __future__ import annotations

from kiln.shell import quote
from roles import nvidia_packages as pkgs
from roles.context import NodeContext, render
from roles.nvidia_driver import repositories
from roles.operations import commands_until, pinned_packages

TESTS = "/opt/nccl-tests"


def nccl_conf(ctx: NodeContext) -> str:
    return render("nvidia/nccl.conf.j2", fabric=ctx.node.fabric, topo_file=ctx.node.setting("nccl_topo_file"))


def build_commands(url: str, version: str, cuda_home: str) -> list[str]:
    target, tmp, log = (quote(f"{TESTS}-{version}{end}") for end in ("", ".tmp", ".tmp/build.log"))
    return [f"rm -rf {tmp} && mkdir -p {tmp} && curl -fsSL --retry 3 {quote(url)} "
            f"| tar -xz -C {tmp} --strip-components=1",
            f"make -C {tmp} -j$(nproc) {quote('CUDA_HOME=' + cuda_home)} NCCL_HOME=/usr > {log} 2>&1 "
            f"|| {{ tail -n 20 {log} >&2; exit 1; }}",
            f"rm -rf {target} && mv {tmp} {target} && ln -sfn {target} {TESTS}"]


def install(ctx: NodeContext) -> None:
    versions, platform = ctx.cluster.versions, ctx.platform
    pin, cuda = versions.get("nccl") or "", versions.get("cuda") or ""
    if not pin:
        return
    source = ctx.cluster.setting("nvidia_source")
    repositories(ctx)
    pinned_packages(name=f"nccl: {pin}, held", ctx=ctx, packages=pkgs.nccl(source, platform, pin, cuda))
    tests = versions.get("nccl_tests") or ""
    if not (tests and cuda):
        return
    pinned_packages(name="nccl: build tools for nccl-tests", ctx=ctx,
                    packages={"make": None, "g++": None} if platform.uses_apt else {"make": None, "gcc-c++": None})
    marker = f"{TESTS}-{tests}/build/all_reduce_perf"
    ctx.watch_path(marker)
    url = ctx.cluster.setting("nccl_tests_url").replace("{version}", tests)
    commands_until(name=f"nccl: nccl-tests {tests} built in {TESTS}", ctx=ctx, marker=marker,
                   commands=build_commands(url, tests, "/usr/local/cuda" if source == "cuda" else "/usr"))


def configure(ctx: NodeContext) -> None:
    ctx.put("/etc/nccl.conf", nccl_conf(ctx), mode="644", name="nccl: /etc/nccl.conf from the fabric")
