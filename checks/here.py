"""Run kiln's gpu suite on this machine, with the expectations given on the command line instead of an
inventory: for a GPU machine that is in no kiln inventory (yet), and to record what the real tools print
there, so real output backs the parsers and the simulators. Standard library only, like the rest of
checks/: a bare GPU machine's python3 (>= 3.9) runs it from a copy of the repository.

    python3 -m checks.here --gpus 8 --model h100 [--driver 550.163.01] [--nvswitch] [--rdma]
                           [--dcgm-level 1] [--burn 10 --bf16-tflops 989] [--nccl-busbw 300]
                           [--record DIR] [--json]

Every expectation is what the operator says the machine should have, never read from the machine
itself (a check that asks the GPU what to expect of it cannot fail). Without --driver the driver
version is reported, not judged. --record writes each command with its exit code, stdout and stderr to
DIR, one file per command. Exit 0 all passed (warnings allowed), 1 a check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

from checks.node import Node, local_node
from checks.parsers.kernel_log import DEFAULT_COMMAND
from checks.suites import run_suites


def expectations(args: argparse.Namespace) -> dict:
    return {"node": os.uname().nodename.split(".")[0],
            "gpu": {"count": args.gpus, "model": args.model, "driver": args.driver or "", "nvswitch": args.nvswitch, "nvlinks": args.nvlinks,
                    "rdma": args.rdma, "dcgm_level": args.dcgm_level, "kernel_log": args.kernel_log,
                    "burn_seconds": args.burn, "bf16_tflops": args.bf16_tflops, "burn_min_percent": 70,
                    "nccl_busbw_gbps": args.nccl_busbw}}


def recording(node: Node, directory: str) -> Node:
    """``node``, with every command's exit code and output also written to ``directory``."""
    os.makedirs(directory, exist_ok=True)
    count = [0]

    def run(command: str):
        out = node.run(command)
        count[0] += 1
        slug = re.sub(r"[^A-Za-z0-9]+", "-", command)[:60].strip("-")
        with open(os.path.join(directory, f"{count[0]:02d}-{slug}.txt"), "w") as f:
            f.write(f"$ {command}\n# exit {out.rc}\n# stdout\n{out.stdout}\n# stderr\n{out.stderr}")
        return out
    return Node(node.name, run, local=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m checks.here", description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, required=True, help="how many GPUs the machine should have")
    ap.add_argument("--model", required=True, help="part of the GPU name every GPU should have (h100, a100, ...)")
    ap.add_argument("--driver", default="", help="the driver version nvidia-smi should report")
    ap.add_argument("--nvswitch", action="store_true", help="NVSwitch machine: NVLinks and fabric manager")
    ap.add_argument("--nvlinks", type=int, default=None, help="NVLinks each GPU should list (default: the "
                    "model's count, e.g. 18 for h100/h200; 0: no NVLink check)")
    ap.add_argument("--rdma", action="store_true", help="RDMA fabric: nvidia_peermem should be loaded")
    ap.add_argument("--dcgm-level", type=int, default=0, help="dcgmi diag level to run (0: none)")
    ap.add_argument("--burn", type=int, default=0, help="seconds of bf16 GEMM per GPU (needs PyTorch; 0: none)")
    ap.add_argument("--bf16-tflops", type=float, default=0, help="dense bf16 TFLOP/s one GPU should reach")
    ap.add_argument("--nccl-busbw", type=float, default=0, help="all_reduce_perf bus bandwidth floor, GB/s (0: none)")
    ap.add_argument("--kernel-log", default=DEFAULT_COMMAND, help="command printing the kernel log (default: "
                    "journalctl -k, else dmesg)")
    ap.add_argument("--record", default=None, help="directory for every command's exit code and output")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    expect = expectations(args)
    node = local_node(expect["node"], timeout=max(120, 4 * args.burn * max(1, args.gpus)))
    if args.record:
        node = recording(node, args.record)
    start = time.monotonic()
    verdicts = run_suites(node, expect, ["gpu"])
    seconds = time.monotonic() - start
    failed = [v for v in verdicts if v.failed]
    if args.json:
        print(json.dumps({"node": expect["node"], "seconds": round(seconds, 3), "expect": expect["gpu"],
                          "verdicts": [v.as_dict() for v in verdicts]}, indent=1))
    else:
        for v in verdicts:
            print(f"{v.severity.upper():4} {v.id} {v.message}")
        print(f"{expect['node']}: {len(verdicts)} checks, {len(failed)} failed, {seconds:.2f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
