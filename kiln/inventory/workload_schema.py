"""The workload check's settings (``kiln_check_workload``, checks/workload.py): where PyTorch is on the
compute nodes, the probe's size, and how much slower than the cluster's median a node or link may be."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from kiln.inventory.formats import AbsolutePath
from kiln.inventory.strict import Strict


class WorkloadCheck(Strict):
    """``kiln check --suite workload``: a training step on each compute node and an all-reduce across each
    pair of a ring of them (PyTorch: NCCL on GPUs, Gloo on CPUs), each against the cluster's median."""

    python: AbsolutePath = Field("/usr/bin/python3", description="the interpreter on the compute nodes that "
                                 "imports PyTorch (e.g. a virtual environment's bin/python)")
    pythonpath: AbsolutePath | None = Field(None, description="a directory put on PYTHONPATH for it (PyTorch "
                                            "installed with pip --target on shared storage); none: its own")
    steps: int = Field(20, ge=3, le=10_000, description="timed training steps (and all-reduces) per probe; "
                       "their mean counts")
    hidden: int = Field(1024, ge=16, le=65_536, description="the probe model's width (a 3-layer perceptron, as "
                        "the training example's): larger for GPUs, e.g. 8192")
    batch: int = Field(256, ge=1, le=1_048_576, description="the probe's batch size")
    threads: int = Field(0, ge=0, le=1024, description="PyTorch's CPU threads on a node without a GPU; 0: its "
                         "default (one per core)")
    allreduce_mib: int = Field(64, ge=1, le=65_536, description="the size of each all-reduce between two nodes")
    slow_factor: Annotated[float, Field(ge=1.05, le=100)] = Field(1.5, description="a node whose step takes "
                                                                 "longer than this times the median, or a pair "
                                                                 "whose bandwidth is this many times below it, "
                                                                 "fails")
    port: int = Field(29517, ge=1024, le=65_535, description="TCP port of the all-reduce's rendezvous on the "
                      "pair's first node")
    rounds: int = Field(1, ge=1, le=10, description="probes of each node and pair, taken in turn; each one's "
                        "best counts, so load from elsewhere (another tenant's burst) is not taken for a slow node")
    confirm: int = Field(2, ge=0, le=10, description="probes again, one at a time, of a node or pair whose best "
                         "figure would fail, before it is named (the best still counts): a sound node caught by "
                         "a burst of load is then not drained, a slow one is probed a few seconds more; 0: "
                         "named at once")
    at_once: int = Field(64, ge=1, le=4096, description="nodes probed (and pairs measured) at once; 1 where "
                         "nodes share CPUs (the testbed's containers)")
    timeout_seconds: int = Field(300, ge=10, le=3600, description="a probe still running after this fails")
