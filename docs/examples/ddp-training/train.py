#!/usr/bin/env python3
"""A data-parallel training job that survives node failures: PyTorch DistributedDataParallel across the
tasks of a Slurm job (one per GPU, or one per node where there are none), NCCL on GPUs and Gloo on CPUs.

Started by ``srun`` from train.sbatch. Every ``--checkpoint-every`` steps rank 0 saves the model and the
optimizer to shared storage (checkpoints.py: atomic, verified when read, the last two kept) and writes the
time into the job's comment, where ``kiln usage`` reads how much work a failure cost. When the job starts
again (Slurm requeued it: its node died, it was preempted, ``kiln patch`` moved it) every rank loads the
newest good checkpoint and goes on from there. On SIGUSR1 (``kiln patch --notify USR1``, or Slurm's own
warning before the time limit) the ranks agree on the step, rank 0 saves, and all exit 75 (train.sbatch then
waits to be requeued).

The model and data are small and synthetic (fixed seed), so a run is reproducible bit for bit: the batch
of step N is drawn from the seed and N alone, whatever the run that draws it, and CPU runs are
deterministic. Replace ``make_model`` and ``batch_of`` with your own (see README.md).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import io
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checkpoints  # noqa: E402  (beside this file)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

CHECKPOINTED_ON_SIGNAL = 75  # EX_TEMPFAIL: saved and stopped, not done; train.sbatch waits to be requeued
SAMPLES, FEATURES, GLOBAL_BATCH = 8192, 32, 64


def arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint-dir", type=Path, required=True, help="on shared storage; one job per directory")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--checkpoint-every", type=int, default=50, help="steps between periodic checkpoints")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--step-seconds", type=float, default=0.0,
                    help="extra seconds per step (the example's model is tiny: this stands in for real work)")
    ap.add_argument("--log-every", type=int, default=10, help="rank 0 prints every this many steps")
    ap.add_argument("--final", type=Path, help="where rank 0 writes the final weights (default: in --checkpoint-dir)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds a collective may wait for a peer")
    return ap.parse_args()


def say(message: str) -> None:
    print(f"kiln-train {time.time():.3f} {message}", flush=True)


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(FEATURES, 64), nn.Tanh(), nn.Linear(64, 1))


def dataset(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    w = torch.randn(FEATURES, 1, generator=g)
    return x, torch.tanh(x @ w) + 0.1 * torch.randn(SAMPLES, 1, generator=g)


def batch_of(step: int, seed: int, rank: int, world: int) -> torch.Tensor:
    """This rank's sample indices for ``step``: the same whichever run of the job draws them."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    return torch.randperm(SAMPLES, generator=g)[:GLOBAL_BATCH][rank::world]


def weights_digest(model: nn.Module) -> str:
    """SHA-256 over every parameter's name and raw bytes: equal only for bit-identical weights."""
    h = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        h.update(name.encode())
        h.update(bytes(tensor.detach().cpu().contiguous().view(torch.uint8).flatten().tolist()))
    return h.hexdigest()


def note_saved_in_comment() -> None:
    """The checkpoint's time in the job's comment (kept in accounting): kiln usage counts only the work
    after it as lost when this run ends by a failure."""
    job = os.environ.get("SLURM_JOB_ID")
    if job:
        subprocess.run(["scontrol", "update", f"jobid={job}", f"comment=kiln:checkpoint kiln:saved={int(time.time())}"],
                       capture_output=True, timeout=30, check=False)


def main() -> int:
    args = arguments()
    rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
    local = int(os.environ.get("SLURM_LOCALID", "0"))
    os.environ.setdefault("RANK", str(rank))
    os.environ.setdefault("WORLD_SIZE", str(world))
    gpu = torch.cuda.is_available()
    device = torch.device("cuda", local) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(1)  # one thread: the same sums in the same order on every run
    torch.use_deterministic_algorithms(True, warn_only=gpu)
    dist.init_process_group("nccl" if gpu else "gloo", init_method="env://", rank=rank, world_size=world,
                            timeout=timedelta(seconds=args.timeout))
    code = train(args, rank, world, local, device, gpu)
    # train's DistributedDataParallel went with its frame (gc.collect: and any cycle it was in) before the group
    # is destroyed. Its reducer holds the group; were the reducer the group's last holder, the group would be
    # destroyed with the GIL held while Gloo's worker thread, still freeing the last collective's tensors,
    # waits for the GIL: the rank would never exit (seen once in 70 runs on a loaded machine), and its job
    # would hold its nodes until the time limit. Destroyed here, the group is let go without the GIL.
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()
    return code


def train(args: argparse.Namespace, rank: int, world: int, local: int, device: torch.device, gpu: bool) -> int:
    """The steps from the newest good checkpoint to ``args.steps``: 0 when done, CHECKPOINTED_ON_SIGNAL when
    told to stop."""
    signalled = []
    signal.signal(signal.SIGUSR1, lambda *_: signalled.append(True))

    torch.manual_seed(args.seed)
    model = make_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    start = 0
    if rank == 0:
        found = checkpoints.newest_good(args.checkpoint_dir, say=say)
        start = found[0] if found else 0
    chosen = torch.tensor([start], device=device)
    dist.broadcast(chosen, 0)  # every rank loads the one rank 0 verified
    start = int(chosen.item())
    if start:
        state = torch.load(io.BytesIO(checkpoints.read(args.checkpoint_dir, start)), map_location=device,
                           weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    run = os.environ.get("SLURM_RESTART_COUNT", "0")
    if rank == 0:
        say(f"run {run} on {socket.gethostname()}, {world} ranks ({'nccl' if gpu else 'gloo'}): "
            + (f"continuing from step {start}" if start else "starting at step 0"))
    ddp = DistributedDataParallel(model, device_ids=[local] if gpu else None)
    x, y = (t.to(device) for t in dataset(args.seed))
    loss_fn = nn.MSELoss()

    def save(step: int) -> None:
        if rank == 0:
            buffer = io.BytesIO()
            torch.save({"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()}, buffer)
            checkpoints.write(args.checkpoint_dir, step, buffer.getvalue())
            note_saved_in_comment()
            say(f"checkpoint at step {step}")

    step = start
    while step < args.steps:
        idx = batch_of(step, args.seed, rank, world).to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x[idx]), y[idx])
        loss.backward()
        optimizer.step()
        step += 1
        if args.step_seconds:
            time.sleep(args.step_seconds)
        if rank == 0 and step % args.log_every == 0:
            say(f"step {step} loss {loss.item():.6f}")
        told = torch.tensor([1 if signalled else 0], device=device)
        dist.all_reduce(told, op=dist.ReduceOp.MAX)  # a signal seen by any rank stops all at the same step
        if told.item():
            save(step)
            if rank == 0:
                say(f"signal: checkpointed at step {step}; exiting to be requeued")
            return CHECKPOINTED_ON_SIGNAL
        if step % args.checkpoint_every == 0 and step < args.steps:
            save(step)
    save(step)
    if rank == 0:
        final = args.final or args.checkpoint_dir / "final.pt"
        buffer = io.BytesIO()
        torch.save(model.state_dict(), buffer)
        checkpoints.write_atomically(final, buffer.getvalue())
        say(f"done: {step} steps; weights sha256 {weights_digest(model)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
