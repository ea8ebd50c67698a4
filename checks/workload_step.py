"""kiln's workload probe: a training step and an all-reduce as the cluster's jobs run them, timed on a node.

``kiln check --suite workload`` (kiln/check/workload.py) sends this file to each compute node and runs it
with the inventory's Python (``kiln_check_workload``: its interpreter and PYTHONPATH, which must import
PyTorch). It needs the standard library and PyTorch only.

    step       the training example's kind of step (docs/examples/ddp-training): forward, backward and an
               SGD update of a multi-layer perceptron, ``--hidden`` wide, on a fixed batch; on the node's
               first GPU where PyTorch sees one, else on its CPUs (``--threads``: 0 leaves PyTorch's own)
    allreduce  one rank of a two-node all-reduce of ``--mib`` MiB through torch.distributed (NCCL on GPUs,
               Gloo on CPUs); rank 0 serves the rendezvous at ``--address:--port``

It prints one line, ``kiln-workload {JSON}`` (checks/parsers/workload.py reads it): the mean seconds of the
timed steps or all-reduces (their wall time over their count, so a CPU or GPU held back in bursts, as a
cgroup's quota or a power cap does, counts whole where a median of short steps would step over it; the
median beside it), the device, and on the all-reduce its bus bandwidth in GB/s (as
nccl-tests counts it: for two ranks the bytes over the time), or ``{"error": ...}`` saying why it could not.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time

MARK = "kiln-workload"


def emit(result: dict) -> int:
    print(f"{MARK} {json.dumps(result, sort_keys=True)}", flush=True)
    return 0


def arguments(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="kiln-workload", description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("step", "allreduce"))
    ap.add_argument("--steps", type=int, default=20, help="timed steps (or all-reduces)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed ones first")
    ap.add_argument("--hidden", type=int, default=1024, help="the model's width (and its input's)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--threads", type=int, default=0, help="PyTorch's CPU threads; 0: its default")
    ap.add_argument("--rank", type=int, choices=(0, 1), default=0)
    ap.add_argument("--address", default="", help="rank 0's address, where the rendezvous is served")
    ap.add_argument("--port", type=int, default=29517)
    ap.add_argument("--mib", type=int, default=64, help="the all-reduce's size")
    ap.add_argument("--timeout", type=int, default=120, help="seconds to wait for the peer")
    return ap.parse_args(argv)


def device_of(torch) -> tuple[object, str]:
    if torch.cuda.is_available():
        return torch.device("cuda", 0), torch.cuda.get_device_name(0)
    return torch.device("cpu"), f"cpu ({torch.get_num_threads()} threads)"


def timed(torch, device, once, warmup: int, count: int) -> list[float]:
    """Seconds each of ``count`` calls of ``once`` took (after ``warmup`` untimed), GPU work included."""
    for _ in range(warmup):
        once()
    seconds = []
    for _ in range(count):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        once()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds.append(time.perf_counter() - start)
    return seconds


def step(torch, args: argparse.Namespace) -> dict:
    device, name = device_of(torch)
    torch.manual_seed(1234)
    h = args.hidden
    model = torch.nn.Sequential(torch.nn.Linear(h, h), torch.nn.Tanh(), torch.nn.Linear(h, h), torch.nn.Tanh(),
                                torch.nn.Linear(h, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(args.batch, h, device=device), torch.randn(args.batch, 1, device=device)
    loss_fn = torch.nn.MSELoss()

    def once() -> None:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    seconds = timed(torch, device, once, args.warmup, args.steps)
    return {"mode": "step", "device": name, "steps": len(seconds), "seconds": statistics.fmean(seconds),
            "median": statistics.median(seconds)}


def allreduce(torch, args: argparse.Namespace) -> dict:
    import torch.distributed as dist
    device, name = device_of(torch)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"tcp://{args.address}:{args.port}", rank=args.rank,
                            world_size=2, timeout=datetime.timedelta(seconds=args.timeout))
    try:
        data = torch.ones(args.mib * 2**20 // 4, dtype=torch.float32, device=device)
        seconds = timed(torch, device, lambda: dist.all_reduce(data), args.warmup, args.steps)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    mean = statistics.fmean(seconds)
    size = args.mib * 2**20
    # nccl-tests' bus bandwidth: algorithm bandwidth (bytes / time) x 2(n-1)/n, which is 1 for two ranks
    return {"mode": "allreduce", "device": name, "backend": backend, "mib": args.mib, "steps": len(seconds),
            "seconds": mean, "median": statistics.median(seconds), "busbw_gbs": size / mean / 1e9}


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    try:
        import torch
    except ImportError as e:
        return emit({"error": f"PyTorch does not import with {sys.executable} ({e}): set "
                              "kiln_check_workload's python and pythonpath to an interpreter that has it"})
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        return emit(step(torch, args) if args.mode == "step" else allreduce(torch, args))
    except Exception as e:  # the peer never came, out of memory, a CUDA error: said, not a traceback
        return emit({"error": f"{args.mode} failed: {type(e).__name__}: {str(e).strip().splitlines()[0][:300]}"})


if __name__ == "__main__":
    sys.exit(main())
