"""The fabricmanager role: NVIDIA fabric manager on NVSwitch nodes, at the driver's version, held.

Defaults, in one place:

+ Runs on hosts with ``kiln_nvswitch: true``. The ``fabricmanager`` pin must have the driver's
  upstream version (validation says so before any connection); "" leaves it out.
+ ``nvidia-fabricmanager`` enabled, and started where the nvidia module is loaded (it cannot start
  without the driver; after the reboot a new driver needs, systemd starts it).
"""

from __future__ import annotations

from kiln.versions import upstream
from roles import nvidia_packages as pkgs
from roles.context import NodeContext
from roles.nvidia_driver import repositories
from roles.operations import pinned_packages, service_running


def _pin(ctx: NodeContext) -> str:
    return ctx.cluster.versions.get("fabricmanager") or ""


def install(ctx: NodeContext) -> None:
    pin = _pin(ctx)
    if not pin:
        return
    repositories(ctx)
    pinned_packages(name=f"fabricmanager: {upstream(pin)}, held", ctx=ctx,
                    packages=pkgs.fabricmanager(ctx.cluster.setting("nvidia_source"), ctx.platform, pin))


def configure(ctx: NodeContext) -> None:
    if _pin(ctx):
        service_running(name="fabricmanager: enabled (running where the driver is loaded)", ctx=ctx,
                        unit=ctx.watch_unit("nvidia-fabricmanager"), start=lambda snap: "nvidia" in snap.modules)
