"""Training through a node failure, live (#45): the example PyTorch DDP job (docs/examples/ddp-training)
across two testbed nodes with Gloo; one of its nodes loses power mid-run with no warning. Slurm requeues
the job, it runs again by itself on nodes left in service, continues from its last checkpoint (not step 0)
and completes with weights bit for bit those of the same job run beside it without a failure.

PyTorch (the CPU build) is installed with pip on this machine and placed in the testbed's shared storage
(tests/torch_env.py); the nodes import it by PYTHONPATH. Printed: the time from the power loss to the job
running again and to its first step, the steps lost, and each run's goodput (useful step time over wall time)."""

from __future__ import annotations

import importlib.util
import re
import shlex
import shutil
import statistics
import time

from checks.parsers import squeue
from checks.parsers.delimited import separator
from checks.parsers.hostlist import expand_hostlist
from checks.parsers.slurm_values import env_words, epoch
from tests.testbed.conftest import NODES
from tests.testbed.slurm_helpers import ok, on, submit, wait_for
from tests.torch_env import EXAMPLE, copy_torch

SHARED = "/srv/kiln-shared"
STEPS, EVERY, STEP_SECONDS = 60, 10, 0.5
LINE = re.compile(r"^kiln-train (\d+\.\d+) (.*)$", re.M)


def _checkpoints():
    spec = importlib.util.spec_from_file_location("ddp_checkpoints", EXAMPLE / "checkpoints.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _lines(path) -> list[tuple[float, str]]:
    return [(float(t), text) for t, text in LINE.findall(path.read_text())] if path.exists() else []


def _steps(lines) -> list[tuple[float, int]]:
    return [(t, int(m.group(1))) for t, text in lines if (m := re.match(r"step (\d+) loss", text))]


def _squeue(tb, job: str) -> tuple[str, list[str]]:
    """(state, nodes) of ``job`` by squeue's one reader; ('', []) once it is gone."""
    sep, fields = separator(), ("State", "NodeList")
    jobs, _ = squeue.read_jobs(on(tb, tb.controller, shlex.join(squeue.jobs_command(sep, fields, "-j", job))).stdout,
                               sep, fields)
    return (jobs[0]["State"], expand_hostlist(jobs[0]["NodeList"])) if jobs else ("", [])


def _started(tb, job: str) -> float:
    """When Slurm first started the job (its first run's Start), read as every Slurm time is."""
    out = ok(tb, tb.controller, f"{env_words()} sacct -n -X -P -D -j {job} -o Start").split()
    return min(t for t in map(epoch, out) if t is not None)


def _goodput(lines, step_time: float, started: float) -> float:
    """Useful step time over the wall time from the job's first start to its end (PyTorch's start-up, the
    recovery and the steps done again count as waste)."""
    done = next(t for t, text in lines if text.startswith("done:"))
    return STEPS * step_time / (done - started)


def test_a_ddp_job_loses_a_node_without_warning_resumes_from_its_checkpoint_and_ends_bit_equal(slurm):
    tb = slurm
    ck = _checkpoints()
    copy_torch(tb.shared / "pytorch")
    example = tb.shared / "ddp-example"
    shutil.rmtree(example, ignore_errors=True)
    shutil.copytree(EXAMPLE, example, ignore=shutil.ignore_patterns("__pycache__"))
    runs = tb.shared / "ddp-runs"
    shutil.rmtree(runs, ignore_errors=True)
    runs.mkdir(mode=0o777)

    def start(name: str) -> str:
        env = (f"--export=ALL,PYTHONPATH={SHARED}/pytorch,EXAMPLE_DIR={SHARED}/ddp-example,"
               f"CHECKPOINT_DIR={SHARED}/ddp-runs/{name}")
        args = (f"--exclusive --nodes=2 -o {SHARED}/ddp-runs/{name}.out {env} {SHARED}/ddp-example/train.sbatch "
                f"--steps {STEPS} --checkpoint-every {EVERY} --step-seconds {STEP_SECONDS} --log-every 1")
        return submit(tb, tb.controller, args)

    steady, failing = start("steady"), start("failing")
    steady_out, failing_out = runs / "steady.out", runs / "failing.out"
    lost = None
    try:
        wait_for(lambda: any(s >= 2 * EVERY + 5 for _, s in _steps(_lines(failing_out))), timeout=300, interval=0.5,
                 what=f"the failing job {failing} past its second checkpoint:\n"
                      + (failing_out.read_text()[-2000:] if failing_out.exists() else "(no output yet)"))
        state, node_list = _squeue(tb, failing)
        assert state == "RUNNING", (state, node_list)
        assert len(node_list) == 2 and set(node_list).isdisjoint(_squeue(tb, steady)[1]), node_list
        lost = node_list[-1]
        tb.power_loss(lost)
        lost_at = time.time()
        checkpoint = ck.steps(runs / "failing")[0]      # the newest one written before the loss
        done_before = max(s for _, s in _steps(_lines(failing_out)))
        assert checkpoint >= 2 * EVERY

        again = wait_for(lambda: (s := _squeue(tb, failing))[0] == "RUNNING" and lost not in s[1] and s[1],
                         timeout=600, interval=0.5, what=f"job {failing} running again without {lost}")
        running_again = time.time() - lost_at
        resumed = wait_for(lambda: [(t, int(m.group(1))) for t, text in _lines(failing_out)
                                    if (m := re.match(r"run \d+ .*: continuing from step (\d+)", text))],
                           timeout=300, interval=0.5, what="the second run's first line")
        first_step = wait_for(lambda: [t for t, _ in _steps(_lines(failing_out)) if t > resumed[-1][0]], timeout=120,
                              interval=0.5, what="the second run's first step")[0] - lost_at
        for out in (steady_out, failing_out):
            wait_for(lambda out=out: "done:" in out.read_text(), timeout=600, interval=2,
                     what=f"{out.name} done:\n" + out.read_text()[-2000:])
    finally:
        if lost:
            tb.up(NODES, inventory_dir=tb.inventory)
            wait_for(lambda: on(tb, tb.controller, f"sinfo -h -n {lost} -o %T").stdout.strip() in ("idle", "mixed"),
                     timeout=300, interval=2, what=f"{lost} back in service")
        on(tb, tb.controller, f"scancel {steady} {failing}")

    digests = [re.findall(r"weights sha256 ([0-9a-f]{64})", out.read_text()) for out in (steady_out, failing_out)]
    assert len(digests[0]) == len(digests[1]) == 1, digests
    assert resumed[-1][1] == checkpoint > 0  # from its last checkpoint, not step 0
    assert digests[0] == digests[1], "the run that lost a node ended with other weights"
    steady_lines, failing_lines = _lines(steady_out), _lines(failing_out)
    step_time = statistics.median(b[0] - a[0] for a, b in zip(_steps(steady_lines), _steps(steady_lines)[1:]))
    print(f"\nDDP across 2 testbed nodes (Gloo), {STEPS} steps, a checkpoint every {EVERY}; {lost} lost power at "
          f"step {done_before}; last checkpoint step {checkpoint}; ran again on {','.join(again)}")
    print(f"  power loss -> running again (squeue): {running_again:6.1f} s")
    print(f"  power loss -> first step again:       {first_step:6.1f} s")
    print(f"  steps lost (done since the last checkpoint): {done_before - checkpoint}")
    print(f"  goodput (useful step time / wall time from the job's first start): undisturbed "
          f"{_goodput(steady_lines, step_time, _started(tb, steady)):.2f}, through the node loss "
          f"{_goodput(failing_lines, step_time, _started(tb, failing)):.2f} (median step {step_time:.3f} s)")
    print(f"  final weights sha256, both runs: {digests[0][0]}")
