"""The cluster NCCL check without a cluster: the srun command, every rank's prefixed output parsed, the
floor per node count, and the slow pair found by halving (a fake job)."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from checks.node import Result
from kiln.check.nccl_cluster import Measurement, find_slow, floor_for, measure_with, parse_ranks, srun_command, verdict
from kiln.testbed.simulate import SIMULATORS
from tests.conftest import REPO

CAPTURE = REPO / "tests" / "recorded" / "captured" / "nccl-tests" / "kiln-made-srun-l-prefixed.txt"


def test_srun_command_is_one_job_with_a_task_per_gpu():
    words = shlex.split(srun_command(["gpu01", "gpu02"], 8, "pmix", "/opt/nccl-tests/build/all_reduce_perf"))
    assert words[:2] == ["srun", "-l"] and "--nodelist=gpu01,gpu02" in words and "--ntasks-per-node=8" in words
    assert "--mpi=pmix" in words and "/opt/nccl-tests/build/all_reduce_perf" in words and words[-2:] == ["-g", "1"]


def test_every_ranks_table_is_parsed_and_the_lowest_counts():
    one = CAPTURE.read_text()
    slow = one.replace("0: ", "7: ").replace("# Avg bus bandwidth    : 210.99", "# Avg bus bandwidth    : 41.50")
    ranks = parse_ranks(one + slow + "3: some rank that printed no table\n")
    assert sorted(ranks) == [0, 7] and ranks[7].average_busbw == 41.5
    assert min(r.average_busbw for r in ranks.values()) == 41.5


def test_floor_for_a_node_count():
    floors = {2: 350.0, 16: 300.0}
    assert floor_for(floors, 2) == floor_for(floors, 8) == 350.0 and floor_for(floors, 64) == 300.0
    assert floor_for(floors, 1) is None and floor_for({}, 8) is None


def fake_cluster(slow: set[str], between: tuple[set[str], set[str]] | None = None):
    jobs = []

    def measure(nodes):
        jobs.append(list(nodes))
        crosses = between and set(nodes) & between[0] and set(nodes) & between[1]
        return Measurement(nodes, 40.0 if set(nodes) & slow or crosses else 200.0)
    return measure, jobs


@pytest.mark.parametrize("nodes, slow, expected", [
    ([f"n{i}" for i in range(8)], set(), []),
    ([f"n{i}" for i in range(8)], {"n5"}, [["n4", "n5"]]),
    ([f"n{i}" for i in range(4)], {"n0"}, [["n0", "n1"]]),
    ([f"n{i}" for i in range(3)], {"n2"}, [["n0", "n1", "n2"]]),
    ([f"n{i}" for i in range(8)], {"n1", "n6"}, [["n0", "n1"], ["n6", "n7"]]),
])
def test_halving_finds_the_slow_pair(nodes, slow, expected):
    measure, jobs = fake_cluster(slow)
    result = find_slow(nodes, measure, {2: 100.0})
    assert result.slow == expected
    assert len(jobs) <= 1 + 2 * 2 * max(1, len(slow)) * 2  # a few jobs, not one per pair


def test_slow_between_halves_reports_the_whole_set():
    nodes = [f"n{i}" for i in range(4)]
    measure, _ = fake_cluster(set(), between=({"n0", "n1"}, {"n2", "n3"}))
    result = find_slow(nodes, measure, {2: 100.0})
    assert result.slow == [nodes]
    assert verdict(result, {2: 100.0}).failed


def test_verdicts():
    good = find_slow(["a", "b"], lambda n: Measurement(n, 180.0), {2: 100.0})
    assert verdict(good, {2: 100.0}).id == "NCCL_CLUSTER_BUSBW" and not verdict(good, {2: 100.0}).failed
    broken = find_slow(["a", "b"], lambda n: Measurement(n, None, "srun: error: Unable to allocate"), {})
    v = verdict(broken, {})
    assert v.failed and "Unable to allocate" in v.message and "a,b" in v.message


def test_the_testbed_simulator_through_the_parser(tmp_path):
    """The simulated all_reduce_perf prints what parse_ranks reads, healthy and with the nccl-slow fault."""
    state = tmp_path / "state.json"
    env = {"KILN_SIM_STATE": str(state), "PATH": f"{SIMULATORS}:/usr/bin:/bin"}
    subprocess.run([str(SIMULATORS / "kiln-sim"), "init", "--gpus", "1", "--model", "h100", "--driver", "535.261.03"],
                   env=env, check=True)

    def run(command):
        words = shlex.split(command)
        assert words[0] == "srun"
        out = subprocess.run([str(SIMULATORS / "all_reduce_perf"), *words[words.index("all_reduce_perf") + 1:]],
                             env=env, capture_output=True, text=True)
        return Result(out.returncode, "".join(f"0: {line}\n" for line in out.stdout.splitlines()), out.stderr)

    measure = measure_with(run, 1, "none", "all_reduce_perf")
    assert measure(["a", "b"]).busbw == 180.0
    subprocess.run([str(SIMULATORS / "kiln-sim"), "inject", "nccl-slow"], env=env, check=True)
    assert measure(["a", "b"]).busbw == 30.0
