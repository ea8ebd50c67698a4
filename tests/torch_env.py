"""PyTorch for the tests of the training example (docs/examples/ddp-training), never a kiln dependency.

The CPU build is installed once per machine with pip into a directory of its own (``CACHE``), from the
package index pip is configured with; the tests then use it by PYTHONPATH, here or (copied into the
testbed's shared storage) on the testbed's nodes, whose Python (Debian 12's 3.11) is the one the build is
for. Only the CPU build is asked for (a local version, ``+cpu``): where it cannot be found, pip fails
instead of fetching a GPU build of several GB, and the tests skip saying so.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TORCH = "torch==2.13.0+cpu"
CACHE = Path("/var/cache/kiln-tests") / TORCH.replace("==", "-")
EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "ddp-training"


def torch_path() -> Path:
    """The directory that holds PyTorch (installed on first use), or a skip that says why it cannot be."""
    done = CACHE / ".kiln-complete"
    if done.exists():
        return CACHE
    try:
        CACHE.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        pytest.skip(f"PyTorch for the training example is installed under {CACHE.parent}, which cannot be made: {e}")
    with open(CACHE.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one install for the run's workers together
        if not done.exists():
            shutil.rmtree(CACHE, ignore_errors=True)
            out = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--only-binary", ":all:",
                                  "--target", str(CACHE), TORCH], capture_output=True, text=True, timeout=1800)
            if out.returncode != 0:
                shutil.rmtree(CACHE, ignore_errors=True)
                pytest.skip(f"PyTorch's CPU build ({TORCH}) could not be installed with pip, which the training "
                            f"example's tests need: {out.stderr.strip().splitlines()[-1:]}")
            done.touch()
    return CACHE


def copy_torch(dest: Path) -> Path:
    """PyTorch at ``dest`` (hard links to the installed copy where the file system allows)."""
    source = torch_path()
    if not (dest / ".kiln-complete").exists():
        shutil.rmtree(dest, ignore_errors=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if subprocess.run(["cp", "-al", str(source), str(dest)], capture_output=True).returncode != 0:
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(source, dest, symlinks=True)
    return dest
