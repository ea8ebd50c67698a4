"""The rdma role: the node's RDMA fabric as ``kiln_fabric`` describes it (the same description the fabric
checks and /etc/nccl.conf read).

Defaults, in one place:

+ stack ``inbox``: the distribution's rdma-core, verbs providers and utilities, infiniband-diags and
  perftest (``ib_write_bw``, which the fabric check's bandwidth ring runs), not held. Stack ``doca`` or
  ``mlnx_ofed``: NVIDIA's ``doca-ofed`` or ``mlnx-ofed-all`` at the ``ofed`` pin from
  ``kiln_ofed_repository``, held (they carry the same tools, and mlnx_qos).
+ kernel modules loaded at every boot (/etc/modules-load.d/kiln-rdma.conf) and now: ib_umad and rdma_ucm
  (the verbs and management interfaces), ib_ipoib with IPoIB, rdma_rxe on an rxe fabric. The HCA's own
  driver (mlx5_ib) is loaded by udev.
+ IPoIB (``kiln_fabric.ipoib``, each node's ``kiln_ipoib_address``), in the OS's own network configuration:
  systemd-networkd on Debian (/etc/systemd/network/60-kiln-ipoib.network), netplan on Ubuntu
  (/etc/netplan/60-kiln-ipoib.yaml, 0600), NetworkManager on Rocky (kiln-ipoib.nmconnection, 0600);
  applied when it changed. Mode datagram unless connected is asked; MTU the mode's own unless given.
+ RoCE (``kiln_fabric.roce``): the lossless settings sites set (DSCP trust, PFC on one priority, ECN) with
  NVIDIA's ``mlnx_qos`` at every boot (kiln-roce-qos.service): only with an OFED stack, which has the tool
  (validation refuses them on inbox). ``traffic_class`` and ``gid_index`` go to /etc/nccl.conf.
+ rxe (soft-RoCE, labs and testbeds): ``rxe0`` on ``rxe_netdev`` at every boot (kiln-rxe.service), and
  again whenever a deploy finds it gone.
+ opensm on hosts with ``kiln_opensm``: for InfiniBand fabrics whose switches run no subnet manager.
+ memlock: the base role makes it unlimited for slurmd and its jobs; the system suite checks it.
+ In a container (the nspawn testbed) the kernel parts are skipped: every file is written, no module is
  loaded, no unit started (said in the operation's name).
"""

from __future__ import annotations

import ipaddress

from pyinfra.operations import server

from kiln.shell import quote
from roles.context import NodeContext, when_changed
from roles.operations import DAEMON_RELOAD, pinned_packages, service_running
from roles.repositories import vendor_repository

INBOX = {"debian": ["rdma-core", "ibverbs-providers", "ibverbs-utils", "infiniband-diags", "perftest"],
         "redhat": ["rdma-core", "libibverbs", "libibverbs-utils", "infiniband-diags", "perftest"]}
OFED = {"doca": "doca-ofed", "mlnx_ofed": "mlnx-ofed-all"}
MODULES_LOAD = "/etc/modules-load.d/kiln-rdma.conf"
RXE_UNIT = "/etc/systemd/system/kiln-rxe.service"
QOS_UNIT = "/etc/systemd/system/kiln-roce-qos.service"
RXE_DEVICE = "rxe0"
SKIPPED = " (skipped in a container: no kernel of its own)"


def modules(fabric) -> list[str]:
    wanted = ["ib_umad", "rdma_ucm"] if fabric.type in ("infiniband", "roce", "rxe") else []
    if fabric.ipoib is not None:
        wanted.append("ib_ipoib")
    if fabric.type == "rxe":
        wanted.append("rdma_rxe")
    return wanted


def packages(ctx: NodeContext) -> dict[str, str | None]:
    fabric = ctx.node.fabric
    wanted: dict[str, str | None] = {}
    if fabric.type in ("infiniband", "roce", "rxe"):
        if fabric.stack == "inbox":
            wanted.update({name: None for name in INBOX[ctx.platform.family]})
        else:
            wanted[OFED[fabric.stack]] = ctx.cluster.versions["ofed"]
    if ctx.node.setting("opensm"):
        wanted["opensm"] = None
    return wanted


def install(ctx: NodeContext) -> None:
    fabric = ctx.node.fabric
    if fabric.stack != "inbox" and fabric.type in ("infiniband", "roce"):
        vendor_repository(ctx, "ofed", ctx.cluster.setting("ofed_repository"))
    wanted = packages(ctx)
    if wanted:
        held = ", held" if any(wanted.values()) else ""
        pinned_packages(name=f"rdma: {fabric.stack} RDMA stack{held}", ctx=ctx, packages=wanted)


def configure(ctx: NodeContext) -> None:
    fabric = ctx.node.fabric
    loaded = modules(fabric)
    if loaded:
        ctx.put(MODULES_LOAD, "# Written by kiln (rdma role): loaded at every boot\n" + "\n".join(loaded) + "\n",
                mode="644", name="rdma: kernel modules at boot")
        for module in loaded:
            ctx.watch_module(module)
        missing = lambda snap, m=tuple(loaded): [x for x in m if x not in snap.modules]  # noqa: E731
        server.shell(name="rdma: kernel modules loaded now" + (SKIPPED if ctx.in_container else ""),
                     commands=[f"modprobe -a {' '.join(quote(m) for m in loaded)}"],
                     _if=lambda: not ctx.in_container and bool(missing(ctx.snapshot)))
    if fabric.ipoib is not None:
        _ipoib(ctx, fabric.ipoib)
    if fabric.roce is not None:
        _roce_qos(ctx, fabric.roce)
    if fabric.type == "rxe":
        _rxe(ctx, fabric.rxe_netdev)
    if ctx.node.setting("opensm"):
        if ctx.in_container:
            return
        service_running(name="rdma: opensm (subnet manager) enabled and running", ctx=ctx,
                        unit=ctx.watch_unit("opensm"))


def _unit(ctx: NodeContext, path: str, content: str, name: str, restart_if_missing: str | None = None) -> None:
    """A oneshot unit of kiln's, enabled and started; started again when it changed, or when
    ``restart_if_missing`` (a path it makes) is gone."""
    written = ctx.put(path, content, mode="644", name=f"rdma: {name} unit")
    if ctx.in_container:
        return
    unit = ctx.watch_unit(path.rsplit("/", 1)[1])
    server.shell(name=f"rdma: reload systemd (if the {name} unit changed)", commands=[DAEMON_RELOAD],
                 _if=when_changed(written))
    if restart_if_missing:
        ctx.watch_path(restart_if_missing)
    server.shell(name=f"rdma: {name} (re)started (if its unit changed or {restart_if_missing or 'it'} is gone)",
                 commands=[f"systemctl restart {unit}"],
                 _if=lambda: ctx.snapshot.unit(unit).active == "active" and (
                     when_changed(written)() or (restart_if_missing is not None
                                                 and restart_if_missing not in ctx.snapshot.files)))
    service_running(name=f"rdma: {name} enabled and running", ctx=ctx, unit=unit)


def rxe_unit(netdev: str) -> str:
    device = RXE_DEVICE
    return ("# Written by kiln (rdma role): soft-RoCE on " + netdev + "\n"
            "[Unit]\nDescription=kiln soft-RoCE device " + device + " on " + netdev + "\n"
            f"BindsTo=sys-subsystem-net-devices-{netdev}.device\nAfter=sys-subsystem-net-devices-{netdev}.device\n\n"
            "[Service]\nType=oneshot\nRemainAfterExit=yes\n"
            "ExecStart=/sbin/modprobe rdma_rxe\n"
            f"ExecStart=/bin/sh -c 'rdma link show {device}/1 >/dev/null 2>&1 || "
            f"rdma link add {device} type rxe netdev {netdev}'\n"
            f"ExecStop=-/bin/sh -c 'rdma link delete {device}'\n\n"
            "[Install]\nWantedBy=multi-user.target\n")


def _rxe(ctx: NodeContext, netdev: str) -> None:
    _unit(ctx, RXE_UNIT, rxe_unit(netdev), f"soft-RoCE {RXE_DEVICE} on {netdev}",
          restart_if_missing=f"/sys/class/infiniband/{RXE_DEVICE}")


def qos_commands(roce) -> list[str]:
    """mlnx_qos (and the ECN switches in sysfs) for each RoCE interface."""
    commands = []
    for interface in roce.interfaces:
        words = ["mlnx_qos", "-i", interface]
        if roce.dscp_trust:
            words += ["--trust", "dscp"]
        if roce.pfc_priority is not None:
            words += ["--pfc", ",".join("1" if p == roce.pfc_priority else "0" for p in range(8))]
        if len(words) > 3:
            commands.append(" ".join(words))
        if roce.ecn:
            for side in ("roce_np", "roce_rp"):
                commands.append(f"/bin/sh -c 'for f in /sys/class/net/{interface}/ecn/{side}/enable/*; do echo 1 > $f; "
                                "done'")
    return commands


def _roce_qos(ctx: NodeContext, roce) -> None:
    commands = qos_commands(roce)
    if not commands:
        return
    content = ("# Written by kiln (rdma role): lossless RoCE settings, applied at every boot\n"
               "[Unit]\nDescription=kiln RoCE QoS (DSCP trust, PFC, ECN)\nAfter=network-pre.target\n\n"
               "[Service]\nType=oneshot\nRemainAfterExit=yes\n" + "".join(f"ExecStart={c}\n" for c in commands)
               + "\n[Install]\nWantedBy=multi-user.target\n")
    _unit(ctx, QOS_UNIT, content, "RoCE QoS")


# --- IPoIB, in each OS's own network configuration ---------------------------------------------------------

def ipoib_address(ctx: NodeContext, ipoib) -> str:
    prefix = ipaddress.ip_network(ipoib.subnet).prefixlen
    return f"{ctx.node.setting('ipoib_address')}/{prefix}"


def networkd_file(ipoib, address: str) -> str:
    lines = ["# Written by kiln (rdma role) from kiln_fabric.ipoib", "[Match]", f"Name={ipoib.interface}", "",
             "[Network]", f"Address={address}", "", "[IPoIB]", f"Mode={ipoib.mode}"]
    if ipoib.mtu:
        lines += ["", "[Link]", f"MTUBytes={ipoib.mtu}"]
    return "\n".join(lines) + "\n"


def netplan_file(ipoib, address: str) -> str:
    lines = ["# Written by kiln (rdma role) from kiln_fabric.ipoib", "network:", "  version: 2", "  ethernets:",
             f"    {ipoib.interface}:", f"      addresses: [\"{address}\"]", f"      infiniband-mode: {ipoib.mode}"]
    if ipoib.mtu:
        lines.append(f"      mtu: {ipoib.mtu}")
    return "\n".join(lines) + "\n"


def nm_keyfile(ipoib, address: str) -> str:
    lines = ["# Written by kiln (rdma role) from kiln_fabric.ipoib", "[connection]", "id=kiln-ipoib",
             "type=infiniband", f"interface-name={ipoib.interface}", "", "[infiniband]",
             f"transport-mode={ipoib.mode}"]
    if ipoib.mtu:
        lines.append(f"mtu={ipoib.mtu}")
    lines += ["", "[ipv4]", "method=manual", f"address1={address}", "", "[ipv6]", "method=disabled"]
    return "\n".join(lines) + "\n"


def _ipoib(ctx: NodeContext, ipoib) -> None:
    address = ipoib_address(ctx, ipoib)
    if ctx.platform.distro_id == "ubuntu":
        path, content, mode, apply = "/etc/netplan/60-kiln-ipoib.yaml", netplan_file(ipoib, address), "600", \
            ["netplan apply"]
    elif ctx.platform.family == "redhat":
        path, content, mode, apply = ("/etc/NetworkManager/system-connections/kiln-ipoib.nmconnection",
                                      nm_keyfile(ipoib, address), "600",
                                      ["nmcli connection reload", "nmcli connection up kiln-ipoib"])
    else:
        path, content, mode, apply = ("/etc/systemd/network/60-kiln-ipoib.network", networkd_file(ipoib, address),
                                      "644", ["systemctl enable --now systemd-networkd", "networkctl reload",
                                              f"networkctl reconfigure {quote(ipoib.interface)}"])
    written = ctx.put(path, content, mode=mode, name=f"rdma: IPoIB {ipoib.interface} {address}")
    server.shell(name="rdma: IPoIB configuration applied (if it changed)" + (SKIPPED if ctx.in_container else ""),
                 commands=apply, _if=lambda: not ctx.in_container and when_changed(written)())
