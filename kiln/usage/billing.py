"""What a job is charged, as Slurm itself counts it: the ``billing`` TRES, weighted from the inventory's prices.

kiln writes each partition's ``TRESBillingWeights`` from ``kiln_usage_gpu_hour_prices`` and sets
``PriorityFlags=MAX_TRES``, so Slurm bills a job for the largest share of a node it holds:

- a GPU costs the node type's price per GPU-hour;
- all of a node's CPUs cost as much as all of its GPUs, and so does all of its memory.

A one-GPU job with a few CPUs pays for one GPU; a one-GPU job that takes every CPU (``--exclusive``, or
a CPU-heavy job) pays for the whole node, whose other GPUs it keeps idle. Billing is counted in
hundredths of the currency per hour (``UNITS``), so Slurm's integer TRES keeps the cents. Slurm's fair
share (usage = billing x seconds x the QoS's UsageFactor) and kiln usage's cost then charge the same
thing: ``cost(billing, seconds)``.

Slurm weighs a partition, not a node: the GPU node types of one partition must share one price (the
inventory check refuses a partition whose node types are priced differently); where they differ in
shape, the CPU and memory weights are those of the type with the most GPUs per CPU (per GiB), so an
exclusive job pays at least its node. A job across node types of one price is charged per node: its
GPUs at that price, whichever nodes they are on. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

from checks.parsers.slurm_values import BILLING_UNITS
from kiln.inventory.model import Cluster, NodeType

UNITS = BILLING_UNITS  # billing units per currency unit: Slurm's billing TRES is an integer; cents keep the price


def gpu_price(types: Iterable[NodeType], prices: dict[str, float]) -> float | None:
    """The one price per GPU-hour of a partition's GPU node types (None: none of them is priced; the
    inventory check refuses a partition whose GPU node types are priced differently)."""
    priced = {prices[t.name] for t in types if t.gpu_count and t.name in prices}
    return max(priced) if priced else None


def weights(types: list[NodeType], prices: dict[str, float]) -> str | None:
    """``TRESBillingWeights`` of a partition holding ``types``, or None (no priced GPU node type in it:
    Slurm's default billing, and kiln charges nothing for it)."""
    price = gpu_price(types, prices)
    if price is None:
        return None
    gpu_types = [t for t in types if t.gpu_count]
    gpu = price * UNITS
    parts = []
    per_cpu = [gpu * t.gpu_count / t.cpus for t in gpu_types if t.cpus]
    if per_cpu:
        parts.append(f"CPU={_number(max(per_cpu))}")
    per_gib = [gpu * t.gpu_count * 1024 / t.memory_mb for t in gpu_types if t.memory_mb]
    if per_gib:
        parts.append(f"Mem={_number(max(per_gib))}G")
    parts.append(f"GRES/gpu={_number(gpu)}")
    return ",".join(parts)


def partition_weights(cluster: Cluster, prices: dict[str, float]) -> dict[str, str | None]:
    """Each partition's ``TRESBillingWeights`` (None: not billed by kiln) from its node types' prices."""
    out = {}
    for part, members in cluster.partition_hosts().items():
        types = {h.node_type: cluster.node_types[h.node_type] for h in members if h.node_type in cluster.node_types}
        out[part] = weights(list(types.values()), prices)
    return out


def _number(value: float) -> str:
    """A weight as Slurm reads it: a plain decimal, at most four places (no exponent)."""
    text = f"{value:.4f}".rstrip("0").rstrip(".")
    return text or "0"


def expected(gpus: int, cpus: int, memory_mb: int, node_type: NodeType, price: float) -> int:
    """The billing Slurm gives a job on nodes of one type holding ``gpus``, ``cpus`` and ``memory_mb`` (the
    largest weighted share, MAX_TRES), before Slurm drops the fraction."""
    gpu = price * UNITS
    shares = [gpus * gpu]
    if node_type.cpus:
        shares.append(cpus * gpu * node_type.gpu_count / node_type.cpus)
    if node_type.memory_mb:
        shares.append(memory_mb * gpu * node_type.gpu_count / node_type.memory_mb)
    return int(max(shares) + 1e-9)


def cost(billing: int, seconds: float) -> float:
    """The currency a job's ``billing`` TRES comes to over ``seconds``."""
    return billing * seconds / 3600 / UNITS
