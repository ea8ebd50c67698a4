"""The opt-in GPU load checks (bf16 GEMM burn, single-node all_reduce_perf) pass on good output and
FAIL on the fault each targets. No GPU here: the node answers from recorded nccl-tests output and burn
results in the burn program's own format; real runs belong on a GPU machine (see the issue notes)."""

from __future__ import annotations

import json

import pytest

from checks import gpu_load
from checks.node import Node, Result
from checks.verdict import CheckError
from tests.conftest import REPO

NCCL = (REPO / "tests" / "recorded" / "captured" / "nccl-tests" /
        "gcm-test_check_nccl.py.sample_single_success_output.txt").read_text()
GPU = {"count": 8, "burn_seconds": 5, "bf16_tflops": 989, "burn_min_percent": 70, "nccl_busbw_gbps": 100}


def node(answer: Result) -> Node:
    return Node("gpu01", lambda command: answer)


def burn(rates) -> Result:
    return Result(0, json.dumps({"gpus": [{"gpu": i, "name": "NVIDIA H100 80GB HBM3", "tflops": r}
                                          for i, r in enumerate(rates)]}) + "\n")


def test_burn_passes_at_the_expected_rate():
    (v,) = gpu_load.check_burn(node(burn([720] * 8)), GPU)
    assert v.severity == "ok" and "GPU 7 720" in v.message


def test_burn_fails_a_slow_gpu_and_names_it():
    (v,) = gpu_load.check_burn(node(burn([720] * 7 + [400])), GPU)
    assert v.severity == "fail" and v.id == "GPU_BURN" and "GPU 7 reached 400" in v.message and "40%" in v.message


def test_burn_fails_when_a_gpu_is_missing_or_torch_is_absent():
    (v,) = gpu_load.check_burn(node(burn([720] * 7)), GPU)
    assert v.severity == "fail" and "7 GPU(s)" in v.message
    (v,) = gpu_load.check_burn(node(Result(0, '{"error": "PyTorch is not installed for python3 on this node"}\n')), GPU)
    assert v.severity == "fail" and "PyTorch is not installed" in v.message


@pytest.mark.parametrize("text", ["", '{"gpus": [{"gpu": 0, "tfl', '{"gpus": [{"gpu": 0}]}'])
def test_burn_output_cut_short_is_an_error_not_a_pass(text):
    with pytest.raises(CheckError):
        gpu_load.parse_burn(text)


def test_burn_without_an_expected_rate_warns_with_the_figures():
    (v,) = gpu_load.check_burn(node(burn([700] * 8)), dict(GPU, bf16_tflops=None))
    assert v.severity == "warn" and "GPU 0 700" in v.message


def test_the_burn_program_runs_and_reports_when_torch_is_missing():
    """The real burn program, run here by python3 (no PyTorch, no GPU): its own error, parsed."""
    import subprocess
    out = subprocess.run(["/bin/sh", "-c", gpu_load.burn_command(1)], capture_output=True, text=True, timeout=60)
    with pytest.raises(CheckError, match="PyTorch|CUDA"):
        gpu_load.parse_burn(out.stdout)


def test_nccl_passes_on_recorded_output_and_fails_below_the_threshold():
    (v,) = gpu_load.check_nccl(node(Result(0, NCCL)), GPU)
    assert v.severity == "ok", v.message
    (v,) = gpu_load.check_nccl(node(Result(0, NCCL)), dict(GPU, nccl_busbw_gbps=10_000))
    assert v.severity == "fail" and v.id == "GPU_NCCL_ALLREDUCE" and "below 10000" in v.message


def test_nccl_fails_on_wrong_values_and_on_a_crash():
    lines = NCCL.splitlines()
    row = next(i for i, line in enumerate(lines) if line.strip().startswith("8388608") or
               (line.strip()[:1].isdigit() and len(line.split()) >= 12))
    fields = lines[row].split()
    fields[-1] = "3"
    lines[row] = "  ".join(fields)
    (v,) = gpu_load.check_nccl(node(Result(0, "\n".join(lines))), GPU)
    assert v.severity == "fail" and "wrong value" in v.message
    (v,) = gpu_load.check_nccl(node(Result(127, "", "all_reduce_perf: not found")), GPU)
    assert v.severity == "fail" and "exited 127" in v.message


def test_load_checks_are_off_unless_the_inventory_asks():
    assert gpu_load.run(node(Result(0, "")), {"count": 8, "burn_seconds": 0, "nccl_busbw_gbps": 0}) == []
