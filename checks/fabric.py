"""Fabric suite (InfiniBand or RoCE): HCA count, port state and physical link, rate, link layer, link
flaps; optional point-to-point bandwidth (``ib_write_bw``) run by the remote runner between two nodes.

Expectations (``expect["fabric"]``): type (infiniband | roce | rxe), hca_count, rate_gbps, hcas, kernel_log.
"""

from __future__ import annotations

from checks.node import Node
from checks.parsers.infiniband import parse_ib_write_bw, parse_ibstat
from checks.parsers.kernel_log import DEFAULT_COMMAND, count_link_flaps
from checks.verdict import CheckError, Verdict, fail, ok, warn, with_passes

LAYER = {"infiniband": "InfiniBand", "roce": "Ethernet", "rxe": "Ethernet"}  # rxe: soft-RoCE
FLAPS_WARN = 5


def commands(expect: dict) -> list[str]:
    """What ``run`` asks the node (for the remote runner to fetch at once)."""
    fabric = expect.get("fabric") or {}
    return ["ibstat", fabric.get("kernel_log") or DEFAULT_COMMAND] if fabric.get("type") in LAYER else []


def run(node: Node, expect: dict) -> list[Verdict]:
    fabric = expect.get("fabric") or {}
    kind = fabric.get("type")
    if kind not in LAYER:
        return []
    out = node.run("ibstat")
    if out.rc != 0 and not out.stdout.strip():
        return [fail("FABRIC_IBSTAT", f"ibstat exited {out.rc}: {(out.stderr or 'no output').strip()[:160]}: "
                     "is rdma-core / the HCA driver loaded?")]
    try:
        adapters = parse_ibstat(out.stdout)
    except CheckError as e:
        return [fail("FABRIC_IBSTAT_UNREADABLE", str(e))]
    wanted = fabric.get("hcas") or []
    if wanted:
        adapters = {n: a for n, a in adapters.items() if n in wanted}
        missing = [h for h in wanted if h not in adapters]
    else:
        missing = []
    verdicts = []
    count = fabric.get("hca_count", 0)
    if len(adapters) != count or missing:
        verdicts.append(fail("FABRIC_HCA_COUNT", f"{len(adapters)} HCAs, the inventory says {count}"
                             + (f" (missing {', '.join(missing)})" if missing else "") + ": check the HCA and its driver"))
    rate = fabric.get("rate_gbps")
    for name, adapter in sorted(adapters.items()):
        for port in adapter.ports.values():
            where = f"{name} port {port.number}"
            if not port.active:
                verdicts.append(fail("FABRIC_PORT_DOWN", f"{where}: state {port.state}, physical {port.physical_state}: "
                                     "check the cable and switch port (ibstat, ibportstate)"))
            elif port.link_up is False:
                verdicts.append(fail("FABRIC_PORT_LINK", f"{where}: physical state {port.physical_state}"))
            if rate and port.active and port.rate is not None and port.rate < rate:
                verdicts.append(fail("FABRIC_RATE", f"{where}: {port.rate:g} Gb/s, expected {rate}: a degraded "
                                     "cable or port; reseat or replace"))
            if port.link_layer and port.link_layer != LAYER[kind]:
                verdicts.append(fail("FABRIC_LINK_LAYER", f"{where}: link layer {port.link_layer}, the inventory "
                                     f"says {kind} ({LAYER[kind]})"))
    flaps = count_link_flaps(node.run(fabric.get("kernel_log") or DEFAULT_COMMAND).stdout)  # 24 h
    noisy = {d: n for d, n in flaps.items() if n >= FLAPS_WARN}
    if noisy:
        verdicts.append(warn("FABRIC_LINK_FLAPS", ", ".join(f"{d}: {n} link losses in 24 h" for d, n in noisy.items())
                             + ": check cables and switch ports"))
    return with_passes(verdicts, ["FABRIC_HCA_COUNT", "FABRIC_PORT_DOWN", "FABRIC_PORT_LINK", "FABRIC_RATE",
                                  "FABRIC_LINK_LAYER", "FABRIC_LINK_FLAPS"], f"{len(adapters)} HCAs")


def bandwidth_verdict(output: str, threshold_gbps: float, pair: str) -> Verdict:
    """Verdict on an ``ib_write_bw`` client run between two nodes (``pair``: "a -> b via mlx5_0")."""
    try:
        results = parse_ib_write_bw(output)
    except CheckError as e:
        return fail("FABRIC_BANDWIDTH", f"{pair}: {e}")
    best = max(results.values())
    figure = f"{best:.1f}" if best >= 10 else f"{best:.3g}"  # a slow link's figure is not rounded to 0.0
    return ok("FABRIC_BANDWIDTH", f"{pair}: {figure} Gb/s") if best >= threshold_gbps else \
        fail("FABRIC_BANDWIDTH", f"{pair}: {figure} Gb/s, below {threshold_gbps:g}: check the path")
