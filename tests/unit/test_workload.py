"""The workload suite (#45): its probe's reader over what the probe really printed, the judge that names a
slow node or link against the cluster's median, and the runner with the real probe (PyTorch's CPU build,
tests/torch_env.py) on two local "nodes" whose all-reduce crosses the loopback."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from checks.node import local_node
from checks.parsers.workload import WorkloadResult, parse_workload
from checks.suites import OPT_IN, SUITES
from checks.verdict import CheckError, UnknownFormat
from checks.workload import judge, ring
from kiln.check.workload import measure, probe_command
from kiln.inventory.workload_schema import WorkloadCheck

# what the probe printed on this machine (PyTorch 2.13.0+cpu, one thread)
STEP = ('kiln-workload {"device": "cpu (1 threads)", "median": 0.01697860399963247, "mode": "step", '
        '"seconds": 0.01762205409968374, "steps": 20}\n')
ALLREDUCE = ('kiln-workload {"backend": "gloo", "busbw_gbs": 1.921483705784324, "device": "cpu (1 threads)", '
             '"median": 0.0335644204997152, "mib": 64, "mode": "allreduce", "seconds": 0.034925544150064526, '
             '"steps": 20}\n')
NO_TORCH = ("kiln-workload {\"error\": \"PyTorch does not import with /usr/bin/python3 (No module named 'torch'): "
            "set kiln_check_workload's python and pythonpath to an interpreter that has it\"}\n")


def test_the_reader_takes_the_probes_line_among_others_and_refuses_what_is_not_a_result():
    warned = "/usr/lib/python3/dist-packages/torch/__init__.py:1: UserWarning: NUMA\n" + STEP
    step = parse_workload(warned)
    assert (step.mode, step.device, round(step.seconds, 4), step.busbw_gbs) == ("step", "cpu (1 threads)", 0.0176, None)
    assert round(parse_workload(ALLREDUCE).busbw_gbs, 2) == 1.92
    with pytest.raises(CheckError, match="No module named 'torch'") as no_torch:
        parse_workload(NO_TORCH)
    assert not isinstance(no_torch.value, UnknownFormat)
    for text in ("", "Traceback (most recent call last):\n  Killed\n", STEP[:40] + "\n",
                 'kiln-workload {"mode": "step", "device": "cpu", "seconds": 0}\n',
                 'kiln-workload {"mode": "step", "device": "cpu", "seconds": NaN}\n',
                 'kiln-workload {"mode": "allreduce", "device": "cpu", "seconds": 1}\n',
                 'kiln-workload ["step"]\n', 'kiln-workload {"mode": "bench", "device": "cpu", "seconds": 1}\n'):
        with pytest.raises(UnknownFormat):
            parse_workload(text)


def _step(seconds: float) -> WorkloadResult:
    return WorkloadResult("step", "cpu (1 threads)", seconds, None)


def _bw(gbs: float) -> WorkloadResult:
    return WorkloadResult("allreduce", "cpu (1 threads)", 0.04, gbs)


def _failed(found) -> dict[str, list[str]]:
    return {n: sorted(v.id for v in vs if v.failed) for n, vs in found.items() if any(v.failed for v in vs)}


NODES = ["c1", "c2", "c3", "c4"]


def test_a_slow_node_is_named_alone_though_its_neighbours_links_are_slow_too():
    steps = {"c1": _step(0.021), "c2": _step(0.020), "c3": _step(0.022), "c4": _step(0.095)}
    pairs = [(a, b, _bw(0.35 if "c4" in (a, b) else 1.5)) for a, b in ring(NODES)]
    found = judge(steps, pairs, 1.5)
    assert _failed(found) == {"c4": ["WORKLOAD_ALLREDUCE", "WORKLOAD_STEP"]}
    message = next(v.message for v in found["c4"] if v.id == "WORKLOAD_STEP")
    assert "95.0 ms" in message and "4.4x the median 21.5 ms of 4 nodes" in message
    assert {v.id for v in found["c1"]} == {"WORKLOAD_STEP", "WORKLOAD_ALLREDUCE"}


def test_nothing_slow_names_nothing_and_everyday_spread_passes():
    steps = {n: _step(t) for n, t in zip(NODES, (0.020, 0.024, 0.021, 0.027))}
    pairs = [(a, b, _bw(g)) for (a, b), g in zip(ring(NODES), (1.5, 1.2, 1.4, 1.1))]
    assert _failed(judge(steps, pairs, 1.5)) == {}


def test_a_slow_link_between_two_sound_nodes_fails_both_ends_naming_the_link():
    steps = {n: _step(0.02) for n in NODES + ["c5"]}
    pairs = [(a, b, _bw(0.2 if (a, b) == ("c2", "c3") else 1.5)) for a, b in ring(NODES + ["c5"])]
    found = judge(steps, pairs, 1.5)
    assert _failed(found) == {"c2": ["WORKLOAD_ALLREDUCE"], "c3": ["WORKLOAD_ALLREDUCE"]}
    assert "the link between c2 and c3 is slow" in next(v.message for v in found["c2"] if v.failed)


def test_a_node_whose_every_link_is_slow_is_named_though_its_step_is_not():
    steps = {n: _step(0.02) for n in NODES + ["c5"]}
    pairs = [(a, b, _bw(0.2 if "c3" in (a, b) else 1.5)) for a, b in ring(NODES + ["c5"])]
    found = judge(steps, pairs, 1.5)
    assert _failed(found) == {"c3": ["WORKLOAD_ALLREDUCE"]}
    assert "every link of this node is slow" in next(v.message for v in found["c3"] if v.failed)


def test_three_nodes_one_slow_and_two_nodes_and_one_node():
    three = judge({"a": _step(0.02), "b": _step(0.021), "c": _step(0.09)},
                  [(x, y, _bw(0.3 if "c" in (x, y) else 1.5)) for x, y in ring(["a", "b", "c"])], 1.5)
    assert _failed(three) == {"c": ["WORKLOAD_ALLREDUCE", "WORKLOAD_STEP"]}
    assert ring(["a", "b"]) == [("a", "b")] and ring(["a"]) == []
    two = judge({"a": _step(0.02), "b": _step(0.09)}, [("a", "b", _bw(0.3))], 1.5)
    assert _failed(two) == {"b": ["WORKLOAD_STEP"]}  # one pair: no other to compare its bandwidth with
    one = judge({"a": _step(0.02)}, [], 1.5)
    assert _failed(one) == {} and "no other node to compare" in one["a"][0].message


def test_a_probe_that_could_not_run_fails_its_node_with_the_probes_words():
    why = "PyTorch does not import with /usr/bin/python3 (No module named 'torch') (exit 0)"
    found = judge({"a": _step(0.02), "b": why, "c": _step(0.02)},
                  [("a", "b", f"b: {why}"), ("b", "c", f"b: {why}"), ("c", "a", _bw(1.5))], 1.5)
    assert _failed(found) == {"b": ["WORKLOAD_ALLREDUCE", "WORKLOAD_STEP"]}
    assert "No module named 'torch'" in next(v.message for v in found["b"] if v.id == "WORKLOAD_STEP")


def test_the_suite_is_opt_in_and_its_settings_are_data():
    assert "workload" in SUITES and "workload" in OPT_IN
    for bad in ({"python": "python3; rm -rf /"}, {"pythonpath": "/srv/x/../../etc"}, {"slow_factor": 1.0},
                {"port": 80}, {"extra": 1}, {"pythonpath": "relative/torch"}):
        with pytest.raises(ValidationError):
            WorkloadCheck(**bad)
    command = probe_command(WorkloadCheck(pythonpath="/srv/kiln-shared/torch:2"), "step")
    assert command.startswith("env PYTHONPATH=/srv/kiln-shared/torch:2 timeout 300 /usr/bin/python3 - step ")


@pytest.fixture(scope="module")
def torch_dir():
    from tests.torch_env import torch_path
    return str(torch_path())


def test_the_runner_measures_two_local_nodes_with_the_real_probe(torch_dir):
    """The probe's source travels in its command (a here-document) and runs with PyTorch's CPU build; the
    pair's two ranks meet on the loopback through Gloo."""
    settings = WorkloadCheck(python=__import__("sys").executable, pythonpath=torch_dir, steps=5, hidden=256,
                             batch=64, threads=1, allreduce_mib=4, port=29617, timeout_seconds=120)
    nodes = {n: local_node(n) for n in ("n1", "n2")}
    steps, pairs = measure(nodes, {"n1": "127.0.0.1", "n2": "127.0.0.1"}, settings)
    assert all(isinstance(f, WorkloadResult) and f.mode == "step" for f in steps.values()), steps
    assert len(pairs) == 1 and isinstance(pairs[0][2], WorkloadResult), pairs
    assert pairs[0][2].busbw_gbs > 0 and pairs[0][2].device.startswith("cpu")
    missing = WorkloadCheck(python=__import__("sys").executable, steps=3, timeout_seconds=30)
    steps, _ = measure({"n1": nodes["n1"]}, {"n1": "127.0.0.1"}, missing)
    assert "PyTorch does not import" in steps["n1"], steps


def test_a_run_over_the_cluster_records_its_medians_and_a_batch_is_judged_against_them(tmp_path, monkeypatch):
    """Three nodes or more: judged among themselves, their medians kept (the passing nodes'); a rollout's
    batch of one is judged against those, so a slow node alone is still named."""
    import kiln.check.workload as runner
    figures = {}
    monkeypatch.setattr(runner, "measure", lambda nodes, addresses, settings, reference=None: (
        {n: figures[n] for n in nodes}, [(a, b, _bw(1.5)) for a, b in ring(list(nodes))]))
    figures.update({"c1": _step(0.020), "c2": _step(0.022), "c3": _step(0.021), "c4": _step(0.09)})
    baseline = runner.baseline_path(tmp_path / "inventory", "kiln")
    found = runner.workload_verdicts(dict.fromkeys(NODES), {}, WorkloadCheck(), baseline)
    assert set(_failed(found)) == {"c4"}
    kept = runner.read_baseline(baseline)
    assert kept["step_seconds"] == 0.021 and kept["nodes"] == 3 and kept["busbw_gbs"] == 1.5  # c4 left out
    figures["c4"] = _step(0.020)  # patched, and fast again
    figures["c5"] = _step(0.080)
    assert _failed(runner.workload_verdicts({"c4": None}, {}, WorkloadCheck(), baseline)) == {}
    alone = runner.workload_verdicts({"c5": None}, {}, WorkloadCheck(), baseline)
    assert _failed(alone) == {"c5": ["WORKLOAD_STEP"]}
    assert "the cluster's 3 nodes at its last run" in alone["c5"][0].message
    batch = judge({"c1": _step(0.02), "c2": _step(0.02)}, [("c1", "c2", _bw(0.3))], 1.5, kept)
    assert _failed(batch) == {"c1": ["WORKLOAD_ALLREDUCE"], "c2": ["WORKLOAD_ALLREDUCE"]}  # the link, against 1.5


def test_each_nodes_best_round_counts_so_a_burst_of_load_elsewhere_is_not_a_slow_node(monkeypatch):
    """rounds: 3: a sound node slowed in one round by another tenant's burst passes (its best round counts);
    a node slow in every round still fails; a probe that failed once but ran in another round counts its run."""
    from checks.node import Node, Result
    import kiln.check.workload as runner
    seconds = {"c1": [0.02, 0.021, 0.02], "c2": [0.09, 0.021, 0.02], "c3": [0.02, 0.02, 0.022],
               "c4": [0.09, 0.095, 0.092], "c5": [None, 0.02, 0.021]}
    seen = {n: 0 for n in seconds}

    def node(name):
        def run(command):
            if " - step " not in command:
                return Result(0, ALLREDUCE, "")
            t = seconds[name][seen[name]]
            seen[name] += 1
            if t is None:
                return Result(0, NO_TORCH, "")
            return Result(0, STEP.replace("0.01762205409968374", str(t)), "")
        return Node(name, run)
    steps, pairs = runner.measure({n: node(n) for n in seconds}, dict.fromkeys(seconds, "127.0.0.1"),
                                  WorkloadCheck(rounds=3, confirm=0))
    assert {n: round(f.seconds, 3) for n, f in steps.items()} == {"c1": 0.02, "c2": 0.02, "c3": 0.02, "c4": 0.09,
                                                                  "c5": 0.02}
    assert _failed(judge(steps, pairs, 1.5)) == {"c4": ["WORKLOAD_STEP"]}


def test_a_figure_that_would_fail_is_measured_again_before_its_node_or_link_is_named(monkeypatch):
    """confirm: 2, rounds: 1: a sound node whose only step, and a sound pair whose only all-reduce, met a burst
    of load are probed again and pass; a node slow every time is named after exactly 1 + 2 probes; what was
    never suspect is probed once. confirm: 0 names the burst's node and link at once (what CI once saw)."""
    from checks.node import Node, Result
    import kiln.check.workload as runner
    steps = {"c1": [0.02], "c2": [0.06, 0.02], "c3": [0.09, 0.095, 0.092], "c4": [0.021], "c5": [0.02]}
    rates = {"c1": [1.5], "c2": [1.5], "c3": [0.5, 0.5, 0.5], "c4": [0.6, 1.55], "c5": [1.52]}  # by the pair's first node
    probes = {n: 0 for n in steps}
    reduces = {n: 0 for n in steps}

    def node(name):
        def run(command):
            if " - step " in command:
                probes[name] += 1
                return Result(0, STEP.replace("0.01762205409968374", str(steps[name][probes[name] - 1])), "")
            if "--rank 1" in command:
                return Result(0, "", "")  # the figure is rank 0's
            reduces[name] += 1
            return Result(0, ALLREDUCE.replace("1.921483705784324", str(rates[name][reduces[name] - 1])), "")
        return Node(name, run)
    nodes = {n: node(n) for n in steps}
    addresses = {n: f"10.0.0.{i}" for i, n in enumerate(steps, 1)}
    found, pairs = runner.measure(nodes, addresses, WorkloadCheck(rounds=1, confirm=2))
    assert probes == {"c1": 1, "c2": 2, "c3": 3, "c4": 1, "c5": 1}
    # c3 <-> c4 is slow every time (blamed on the slow c3), c4 <-> c5 only once
    assert reduces == {"c1": 1, "c2": 1, "c3": 3, "c4": 2, "c5": 1}
    assert _failed(judge(found, pairs, 1.5)) == {"c3": ["WORKLOAD_ALLREDUCE", "WORKLOAD_STEP"]}
    probes.update(dict.fromkeys(probes, 0))
    reduces.update(dict.fromkeys(reduces, 0))
    found, pairs = runner.measure(nodes, addresses, WorkloadCheck(rounds=1, confirm=0))
    # c2 for its step; c4, both its links now slow (c3 <-> c4 and the burst on c4 <-> c5)
    assert set(_failed(judge(found, pairs, 1.5))) == {"c2", "c3", "c4"}


def test_kiln_checks_run_of_the_workload_suite_reaches_its_runner(monkeypatch):
    """RemoteCheck.collect hands the workload suite to kiln/check/workload.py (a bad edit once dropped that
    step; only the live tier would have noticed)."""
    import kiln.check.remote as remote
    from kiln.inventory import load_cluster
    from tests.conftest import REPO
    called = []
    monkeypatch.setattr(remote, "workload_verdicts", lambda nodes, addresses, settings, baseline: called.append(
        (nodes, settings)) or {})
    with remote.RemoteCheck(load_cluster(REPO / "inventory" / "example"), [], ["workload"]) as checker:
        checker.collect()
    assert called == [({}, load_cluster(REPO / "inventory" / "example").setting("check_workload"))]
