"""Opt-in GPU load checks of the gpu suite: a short bf16 GEMM burn per GPU and a single-node
nccl-tests all_reduce_perf. They put real load on the GPUs for seconds, so the inventory turns them
on (``kiln_check_gpu_burn_seconds``, ``kiln_check_nccl_busbw_gbps``); they never run in Slurm's
HealthCheckProgram, whose runs must stay short.

Expectations (``expect["gpu"]``): count, burn_seconds, bf16_tflops (the model's dense bf16 rate),
burn_min_percent, nccl_busbw_gbps.
"""

from __future__ import annotations

import json

from checks.node import Node
from checks.parsers.nccl import parse_nccl_tests
from checks.verdict import CheckError, Verdict, fail, ok, warn

NCCL_TESTS = "/opt/nccl-tests/build/all_reduce_perf"

# Runs on the node with its python3 and PyTorch: one GPU at a time, N seconds of 8192^3 bf16 GEMMs.
BURN = r'''
import json, sys, time
seconds, n = float(sys.argv[1]), 8192
try:
    import torch
except ImportError:
    print(json.dumps({"error": "PyTorch is not installed for python3 on this node"})); sys.exit(0)
if not torch.cuda.is_available():
    print(json.dumps({"error": "PyTorch sees no CUDA device"})); sys.exit(0)
out = []
for i in range(torch.cuda.device_count()):
    dev = torch.device("cuda", i)
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize(dev)
    iters, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(10):
            a @ b
        torch.cuda.synchronize(dev)
        iters += 10
    elapsed = time.perf_counter() - start
    out.append({"gpu": i, "name": torch.cuda.get_device_name(dev), "tflops": 2 * n ** 3 * iters / elapsed / 1e12})
print(json.dumps({"gpus": out}))
'''


def burn_command(seconds: int) -> str:
    return f"python3 - {int(seconds)} <<'KILN_BURN'\n{BURN}\nKILN_BURN"


def parse_burn(text: str) -> list[tuple[int, float]]:
    """(gpu index, TFLOP/s) per GPU from the burn's one JSON line; CheckError on anything else."""
    lines = [line for line in text.splitlines() if line.strip().startswith("{")]
    if not lines:
        raise CheckError("the GEMM burn printed no result")
    try:
        data = json.loads(lines[-1])
    except json.JSONDecodeError as e:
        raise CheckError(f"the GEMM burn's result is cut short or malformed ({e.msg})") from None
    if "error" in data:
        raise CheckError(str(data["error"]))
    try:
        return [(int(g["gpu"]), float(g["tflops"])) for g in data["gpus"]]
    except (KeyError, TypeError, ValueError):
        raise CheckError("the GEMM burn's result has no per-GPU rates") from None


def check_burn(node: Node, gpu: dict) -> list[Verdict]:
    out = node.run(burn_command(gpu["burn_seconds"]))
    try:
        rates = parse_burn(out.stdout)
    except CheckError as e:
        return [fail("GPU_BURN", f"bf16 GEMM burn could not run: {e} (exit {out.rc}); install PyTorch on the "
                                 "node or set kiln_check_gpu_burn_seconds: 0")]
    if len(rates) != gpu.get("count", len(rates)):
        return [fail("GPU_BURN", f"the burn reached {len(rates)} GPU(s), the node should have {gpu['count']}")]
    expected, floor = gpu.get("bf16_tflops"), gpu.get("burn_min_percent", 70)
    shown = ", ".join(f"GPU {i} {r:.0f}" for i, r in rates)
    if not expected:
        return [warn("GPU_BURN", f"bf16 TFLOP/s: {shown}; set kiln_gpu_bf16_tflops to judge them")]
    slow = [(i, r) for i, r in rates if r < expected * floor / 100]
    if slow:
        return [fail("GPU_BURN", "; ".join(f"GPU {i} reached {r:.0f} bf16 TFLOP/s, {100 * r / expected:.0f}% of "
                                           f"the expected {expected:g}" for i, r in slow)
                     + f" (floor {floor}%): drain it and look for throttling, power caps or a bad GPU")]
    return [ok("GPU_BURN", f"bf16 TFLOP/s (expected {expected:g}): {shown}")]


def nccl_command(gpus: int) -> str:
    return f"{NCCL_TESTS} -b 8M -e 1G -f 2 -g {int(gpus)} -c 1"


def check_nccl(node: Node, gpu: dict) -> list[Verdict]:
    out = node.run(nccl_command(gpu["count"]))
    try:
        result = parse_nccl_tests(out.stdout)
    except CheckError as e:
        return [fail("GPU_NCCL_ALLREDUCE", f"all_reduce_perf exited {out.rc}: {e} "
                                           "(nccl-tests is built by the nccl role into /opt/nccl-tests)")]
    if result.wrong:
        return [fail("GPU_NCCL_ALLREDUCE", f"all_reduce_perf found {result.wrong} wrong value(s): data corrupted "
                                           "between GPUs; drain the node")]
    threshold = gpu["nccl_busbw_gbps"]
    size, busbw, _ = max(result.rows)
    message = f"all_reduce bus bandwidth {busbw:.1f} GB/s at {size >> 20} MiB"
    if busbw < threshold:
        return [fail("GPU_NCCL_ALLREDUCE", f"{message}, below {threshold} GB/s: check NVLink and the fabric manager")]
    return [ok("GPU_NCCL_ALLREDUCE", f"{message} (threshold {threshold})")]


def commands(gpu: dict) -> list[str]:
    """What ``run`` asks the node (for the remote runner to fetch at once)."""
    return ([burn_command(gpu["burn_seconds"])] if gpu.get("burn_seconds") else []) + \
        ([nccl_command(gpu["count"])] if gpu.get("nccl_busbw_gbps") else [])


def run(node: Node, gpu: dict) -> list[Verdict]:
    verdicts: list[Verdict] = []
    if gpu.get("burn_seconds"):
        verdicts += check_burn(node, gpu)
    if gpu.get("nccl_busbw_gbps"):
        verdicts += check_nccl(node, gpu)
    return verdicts
