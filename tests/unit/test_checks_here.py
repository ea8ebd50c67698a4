"""`python3 -m checks.here`: the gpu suite on this machine with the expectations on the command line (for
a real GPU machine outside any inventory). Shown here on the simulators: passing, failing on a fault,
judging the driver only when one is given, and recording every command's output."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.unit.test_checks import SIMULATORS
from tests.conftest import REPO


def here(tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, KILN_SIM_STATE=str(tmp_path / "state.json"), PATH=f"{SIMULATORS}:{os.environ['PATH']}")
    return subprocess.run([sys.executable, "-m", "checks.here", "--kernel-log", "kiln-sim kernel-log --since=-24h",
                           *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)


def sim(tmp_path, *args: str) -> None:
    env = dict(os.environ, KILN_SIM_STATE=str(tmp_path / "state.json"))
    subprocess.run([str(SIMULATORS / "kiln-sim"), *args], check=True, env=env)


def test_passes_on_a_healthy_machine_and_records_every_command(tmp_path):
    sim(tmp_path, "init", "--gpus", "2", "--model", "h200", "--driver", "550.163.01", "--nvlinks", "18")
    out = here(tmp_path, "--gpus", "2", "--model", "h200", "--driver", "550.163.01", "--record", str(tmp_path / "rec"),
               "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    verdicts = {v["id"]: v["severity"] for v in json.loads(out.stdout)["verdicts"]}
    assert verdicts["GPU_COUNT"] == verdicts["GPU_DRIVER_VERSION"] == verdicts["GPU_XID"] == "ok"
    recorded = sorted(p.name for p in (tmp_path / "rec").iterdir())
    assert recorded[0].startswith("01-nvidia-smi-query-gpu") and len(recorded) >= 3
    first = (tmp_path / "rec" / recorded[0]).read_text()
    assert first.startswith("$ nvidia-smi --query-gpu=") and "# exit 0" in first and "NVIDIA H200" in first


def test_fails_on_the_fault_and_on_the_wrong_expectation(tmp_path):
    sim(tmp_path, "init", "--gpus", "2", "--model", "h200", "--driver", "550.163.01", "--nvlinks", "18")
    sim(tmp_path, "inject", "xid-79", "--gpu", "1")
    out = here(tmp_path, "--gpus", "2", "--model", "h200")
    assert out.returncode == 1 and "FAIL GPU_XID_79" in out.stdout
    assert "GPU_DRIVER_VERSION" not in out.stdout  # no --driver: reported by nvidia-smi, not judged
    sim(tmp_path, "clear")
    out = here(tmp_path, "--gpus", "4", "--model", "h200")
    assert out.returncode == 1 and "FAIL GPU_COUNT 2 GPUs visible, the inventory says 4" in out.stdout
