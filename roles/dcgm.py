"""The dcgm role: NVIDIA DCGM (nv-hostengine) and, when pinned, dcgm-exporter.

Defaults, in one place:

+ ``dcgm`` pin: DCGM 3 (``datacenter-gpu-manager``) or DCGM 4 (``datacenter-gpu-manager-4-core`` and
  ``-cuda<major>`` for the ``cuda`` pin's major version), held; from NVIDIA's repository only.
+ ``nvidia-dcgm`` (nv-hostengine) enabled, running where the nvidia module is loaded.
+ ``dcgm_exporter`` pin: ``datacenter-gpu-manager-exporter`` and its ``nvidia-dcgm-exporter`` service
  (metrics on :9400); "" leaves it out.
+ The gpu check suite runs ``dcgmi diag`` at ``kiln_check_dcgm_level``.
"""

from __future__ import annotations

from kiln.versions import upstream
from roles import nvidia_packages as pkgs
from roles.context import NodeContext
from roles.nvidia_driver import repositories
from roles.operations import pinned_packages, service_running


def _loaded(snap) -> bool:
    return "nvidia" in snap.modules


def install(ctx: NodeContext) -> None:
    pin, exporter = ctx.cluster.versions.get("dcgm") or "", ctx.cluster.versions.get("dcgm_exporter") or ""
    if not pin:
        return
    repositories(ctx)
    packages = pkgs.dcgm(ctx.platform, pin, ctx.cluster.versions.get("cuda") or "")
    if exporter:
        packages["datacenter-gpu-manager-exporter"] = exporter
    pinned_packages(name=f"dcgm: {upstream(pin)}{', exporter ' + exporter if exporter else ''}, held", ctx=ctx,
                    packages=packages)


def configure(ctx: NodeContext) -> None:
    if not ctx.cluster.versions.get("dcgm"):
        return
    service_running(name="dcgm: nv-hostengine enabled (running where the driver is loaded)", ctx=ctx,
                    unit=ctx.watch_unit("nvidia-dcgm"), start=_loaded)
    if ctx.cluster.versions.get("dcgm_exporter"):
        service_running(name="dcgm: dcgm-exporter enabled (running where the driver is loaded)", ctx=ctx,
                        unit=ctx.watch_unit("nvidia-dcgm-exporter"), start=_loaded)
