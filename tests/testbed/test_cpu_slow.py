"""A node made truly slow (#45): ``kiln testbed inject NODE cpu-slow`` holds every process of the node to a
tenth of one CPU through the host's cpu cgroup (kiln/testbed/cpu_limit.py), no simulator. The same work
takes several times as long there, in an SSH session and in a Slurm job step started after the fault (slurmd
forks it), while another node is unaffected; ``kiln testbed clear`` gives the CPU back."""

from __future__ import annotations

from tests.testbed.slurm_helpers import kiln, ok

# a fixed amount of work, single-threaded: its wall time in seconds
WORK = "python3 -c 'import time; s = time.perf_counter(); sum(range(20_000_000)); print(round(time.perf_counter() - s, 3))'"


def _seconds(tb, node: str, via_slurm: bool = False) -> float:
    if via_slurm:
        return float(ok(tb, tb.controller, f"srun -w {node} -n1 {WORK}", timeout=300))
    return float(ok(tb, node, WORK, timeout=300))


def test_a_node_made_slow_takes_several_times_as_long_in_a_session_and_a_job_and_is_whole_again_once_cleared(slurm):
    tb = slurm
    slow, other = tb.computes[-1], tb.computes[-2]
    before = min(_seconds(tb, slow) for _ in range(2))
    out = kiln("testbed", "inject", "--name", tb.name, slow, "cpu-slow")
    assert out.returncode == 0, out.stderr
    try:
        held, in_job = _seconds(tb, slow), _seconds(tb, slow, via_slurm=True)
        beside = _seconds(tb, other)
    finally:
        out = kiln("testbed", "clear", "--name", tb.name, slow)
        assert out.returncode == 0, out.stderr
    after = min(_seconds(tb, slow) for _ in range(2))
    print(f"{slow}: {before:.2f} s before, {held:.2f} s made slow ({in_job:.2f} s in a job step), {after:.2f} s "
          f"once cleared; {other} beside it {beside:.2f} s")
    assert held >= 3 * before and in_job >= 3 * before, (before, held, in_job)
    assert beside < held / 2 and after < held / 2, (beside, after, held)
