"""The training example (docs/examples/ddp-training): its checkpoint store on its own, then the job itself,
two Gloo ranks on this machine as srun would start them: killed without warning after a checkpoint, or told
to checkpoint by SIGUSR1, it continues from there and ends with weights bit for bit those of a run that was
never interrupted."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.ports import free_port
from tests.torch_env import EXAMPLE, torch_path


def _load_checkpoints():
    spec = importlib.util.spec_from_file_location("ddp_checkpoints", EXAMPLE / "checkpoints.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ck = _load_checkpoints()


def test_checkpoints_keep_the_newest_two_and_read_back_what_was_written(tmp_path):
    for step in (10, 20, 30):
        ck.write(tmp_path, step, f"state {step}".encode())
    assert ck.steps(tmp_path) == [30, 20]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt-000000020.json", "ckpt-000000020.pt", "ckpt-000000030.json", "ckpt-000000030.pt"]
    assert ck.newest_good(tmp_path) == (30, b"state 30")
    assert json.loads((tmp_path / "ckpt-000000030.json").read_text())["bytes"] == len(b"state 30")


@pytest.mark.parametrize("spoil", ["flipped byte", "truncated", "payload gone", "manifest of another step",
                                   "manifest not JSON"])
def test_a_newest_checkpoint_that_does_not_verify_is_skipped_for_the_one_before(tmp_path, spoil):
    ck.write(tmp_path, 10, b"good state")
    ck.write(tmp_path, 20, b"newer state")
    data, manifest = tmp_path / "ckpt-000000020.pt", tmp_path / "ckpt-000000020.json"
    if spoil == "flipped byte":
        data.write_bytes(b"newer statf")
    elif spoil == "truncated":
        data.write_bytes(b"newer")
    elif spoil == "payload gone":
        data.unlink()
    elif spoil == "manifest of another step":
        manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "step": 10}))
    else:
        manifest.write_text("{")
    said = []
    assert ck.newest_good(tmp_path, say=said.append) == (10, b"good state")
    assert len(said) == 1 and "step 20" in said[0], said
    with pytest.raises(ck.CorruptCheckpoint):
        ck.read(tmp_path, 20)


def test_a_write_cut_short_leaves_the_last_whole_checkpoint_and_its_leftovers_go_at_the_next(tmp_path):
    ck.write(tmp_path, 10, b"state 10")
    (tmp_path / "ckpt-000000020.pt").write_bytes(b"half")        # died before its manifest
    (tmp_path / ".ckpt-000000030.pt.99999.tmp").write_bytes(b"h")  # died while writing the payload
    assert ck.newest_good(tmp_path) == (10, b"state 10")
    ck.write(tmp_path, 30, b"state 30")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt-000000010.json", "ckpt-000000010.pt", "ckpt-000000030.json", "ckpt-000000030.pt"]
    assert ck.newest_good(tmp_path / "none") is None



def _start(directory: Path, steps: int, log: Path, step_seconds: float = 0.02) -> list[subprocess.Popen]:
    env = {**os.environ, "PYTHONPATH": str(torch_path()), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "SLURM_NTASKS": "2"}
    env.pop("SLURM_JOB_ID", None)
    out = open(log, "a")
    ranks = [subprocess.Popen([sys.executable, str(EXAMPLE / "train.py"), "--checkpoint-dir", str(directory),
                               "--steps", str(steps), "--checkpoint-every", "10", "--log-every", "1",
                               "--step-seconds", str(step_seconds)],
                              env={**env, "SLURM_PROCID": str(rank)}, stdout=out, stderr=subprocess.STDOUT)
             for rank in (0, 1)]
    for r in ranks:
        r.log = log
    return ranks


def _wait(ranks: list[subprocess.Popen], timeout: float = 120) -> list[int]:
    try:
        return [r.wait(timeout=timeout) for r in ranks]
    except subprocess.TimeoutExpired:
        log = ranks[0].log
        raise AssertionError(f"the ranks did not end within {timeout} s; {log}:\n{log.read_text()[-3000:]}") from None
    finally:
        for r in ranks:
            r.kill()  # none outlives its test


def _digest(log: Path) -> str:
    found = re.findall(r"done: \d+ steps; weights sha256 ([0-9a-f]{64})", log.read_text())
    assert len(found) == 1, log.read_text()[-3000:]
    return found[0]


def _until(log: Path, pattern: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not re.search(pattern, log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, f"no {pattern!r} in {log}:\n{log.read_text()[-3000:]}"
        time.sleep(0.05)


def _interrupt(directory: Path, log: Path, pattern: str, sig: int, told: tuple[int, ...] = (0, 1)) -> list[int]:
    """A run stopped by ``sig`` to the ranks ``told`` once ``pattern`` is in its output; the ranks' exit codes.
    Its steps are slower (a sleep: the weights are the same), so a loaded machine that sees the pattern late
    still signals the run before it gets past the next checkpoint."""
    ranks = _start(directory, 40, log, step_seconds=0.1)
    _until(log, pattern)
    for rank in told:
        ranks[rank].send_signal(sig)
    return _wait(ranks)


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory) -> str:
    where = tmp_path_factory.mktemp("undisturbed")
    assert _wait(_start(where / "ckpt", 40, where / "log")) == [0, 0]
    return _digest(where / "log")


def test_killed_without_warning_it_resumes_from_its_last_checkpoint_with_bit_equal_weights(tmp_path, undisturbed):
    log = tmp_path / "log"
    _interrupt(tmp_path / "ckpt", log, r"step 25 loss", signal.SIGKILL)  # a power loss: nothing the job can act on
    assert ck.steps(tmp_path / "ckpt")[0] in (20, 30)
    resumed_at = ck.steps(tmp_path / "ckpt")[0]
    assert _wait(_start(tmp_path / "ckpt", 40, log)) == [0, 0]
    assert f"continuing from step {resumed_at}" in log.read_text()
    assert _digest(log) == undisturbed


def test_told_by_usr1_every_rank_saves_at_the_same_step_exits_75_and_the_next_run_ends_bit_equal(tmp_path, undisturbed):
    log = tmp_path / "log"
    # one rank told: both stop at the step they agree on
    assert _interrupt(tmp_path / "ckpt", log, r"step 13 loss", signal.SIGUSR1, told=(1,)) == [75, 75]
    saved = re.findall(r"signal: checkpointed at step (\d+)", log.read_text())
    assert len(saved) == 1 and ck.steps(tmp_path / "ckpt")[0] == int(saved[0]) > 13
    assert _wait(_start(tmp_path / "ckpt", 40, log)) == [0, 0]
    assert f"continuing from step {saved[0]}" in log.read_text()
    assert _digest(log) == undisturbed


def test_a_newest_checkpoint_spoiled_on_disk_costs_only_the_steps_since_the_one_before(tmp_path, undisturbed):
    log = tmp_path / "log"
    _interrupt(tmp_path / "ckpt", log, r"checkpoint at step 20", signal.SIGKILL)
    newest = ck.steps(tmp_path / "ckpt")[0]
    data = tmp_path / "ckpt" / f"ckpt-{newest:09d}.pt"
    spoiled = bytearray(data.read_bytes())
    spoiled[len(spoiled) // 2] ^= 0xFF  # one byte of the payload, as a disk that lost a write would
    data.write_bytes(bytes(spoiled))
    assert _wait(_start(tmp_path / "ckpt", 40, log)) == [0, 0]
    text = log.read_text()
    assert f"checkpoint of step {newest} skipped" in text and f"continuing from step {newest - 10}" in text
    assert _digest(log) == undisturbed
