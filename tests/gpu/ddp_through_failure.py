"""The training example (docs/examples/ddp-training) on this machine's GPUs, NCCL between them: one run left
alone, one killed without warning (SIGKILL to every rank) after its second checkpoint and started again.
Prints where the second run continued from, whether both ended, and whether their final weights are equal
(bit for bit only where the GPU kernels are deterministic; the example asks PyTorch for deterministic
algorithms and warns where it cannot). Standard library only; PyTorch with CUDA for ``python3``.

    python3 tests/gpu/ddp_through_failure.py --gpus 8 --out /tmp/kiln-gpu/ddp

Exit 0 when the killed run continued from its last checkpoint and completed; 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from tests.ports import free_port  # noqa: E402  (below the ephemeral range: no rank connects to itself)

EXAMPLE = REPO / "docs" / "examples" / "ddp-training"
STEPS, EVERY = 200, 20


def start(gpus: int, checkpoint_dir: Path, log: Path) -> list[subprocess.Popen]:
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "SLURM_NTASKS": str(gpus)}
    out = open(log, "a")
    return [subprocess.Popen([sys.executable, str(EXAMPLE / "train.py"), "--checkpoint-dir", str(checkpoint_dir),
                              "--steps", str(STEPS), "--checkpoint-every", str(EVERY), "--log-every", "1"],
                             env={**env, "SLURM_PROCID": str(r), "SLURM_LOCALID": str(r)}, stdout=out,
                             stderr=subprocess.STDOUT) for r in range(gpus)]


def wait(ranks: list[subprocess.Popen], timeout: float = 600) -> list[int | None]:
    deadline = time.monotonic() + timeout
    for r in ranks:
        try:
            r.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            r.kill()
    return [r.returncode for r in ranks]


def digest(log: Path) -> str | None:
    found = re.findall(r"weights sha256 ([0-9a-f]{64})", log.read_text())
    return found[-1] if found else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("/tmp/kiln-gpu/ddp"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    steady, failing = args.out / "steady.log", args.out / "failing.log"
    for path in (steady, failing):
        path.unlink(missing_ok=True)
    started = time.monotonic()
    codes = wait(start(args.gpus, args.out / "steady", steady))
    print(f"undisturbed: exit {codes}, {time.monotonic() - started:.1f} s, weights {digest(steady)}")
    ranks = start(args.gpus, args.out / "failing", failing)
    deadline = time.monotonic() + 600
    while not re.search(rf"step {2 * EVERY + 5} loss", failing.read_text()):
        if time.monotonic() > deadline or any(r.poll() is not None for r in ranks):
            print("the second run never passed its second checkpoint:\n" + failing.read_text()[-2000:])
            wait(ranks, 1)
            return 1
        time.sleep(0.05)
    for r in ranks:
        r.send_signal(signal.SIGKILL)
    wait(ranks)
    codes = wait(start(args.gpus, args.out / "failing", failing))
    resumed = re.findall(r"continuing from step (\d+)", failing.read_text())
    print(f"killed after step {2 * EVERY + 5}, started again: exit {codes}, continued from step "
          f"{resumed[-1] if resumed else 'none (step 0)'}, weights {digest(failing)}")
    equal = digest(steady) is not None and digest(steady) == digest(failing)
    print(f"final weights {'equal, bit for bit' if equal else 'differ (GPU kernels not deterministic here)'}")
    return 0 if resumed and int(resumed[-1]) >= 2 * EVERY and codes == [0] * args.gpus and digest(failing) else 1


if __name__ == "__main__":
    sys.exit(main())
