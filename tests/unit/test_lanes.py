"""The run's three lanes (tests/lanes.py): every live module has a lane, the VM tier follows lane a's nspawn
tests, the Vagrant cluster's test ends lane c, lane c uses no shared testbed, and the VM tier's wait ends
once the live tests of lanes b and c (their nspawn tests and the Vagrant cluster's) are in the run's finished
log."""

from __future__ import annotations

import ast
import threading
import time
from types import SimpleNamespace

import pytest

from tests import lanes
from tests.conftest import REPO
from tests.testbed import conftest as testbed_conftest


def test_every_module_has_one_lane_and_the_vm_tier_is_lane_as():
    for path in sorted((REPO / "tests" / "testbed").glob("test_*.py")):
        assert lanes.lane_of(f"tests/testbed/{path.name}::t") in lanes.LANES
    assert all(m.startswith("tests/testbed/test_") and (REPO / m).exists() for m in lanes.LANE_B + lanes.LANE_C)
    assert not set(lanes.LANE_B) & set(lanes.LANE_C)
    assert lanes.lane_of("tests/vm/test_vm.py::t") == "a" and lanes.lane_of("tests/unit/test_lanes.py::t") == "c"
    assert lanes.lane_of("tests/plan/test_kerberos_plan.py::t") == "c"
    assert lanes.lane_of("tests/testbed/test_checks.py::t") == "a"
    assert lanes.lane_of("tests/testbed/test_remediation.py::t") == "b"
    assert lanes.lane_of("tests/vm/test_vagrant.py::t") == "c"


def _fixtures_used(path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {arg.arg for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) for arg in node.args.args}


def test_lane_c_asks_for_no_shared_testbed_and_gets_a_clear_error_if_it_does(monkeypatch):
    """Lane c has no shared testbed: its modules use none of the shared fixtures, and one that did would be
    told to move (not handed lane a's nodes, which another worker is using)."""
    for module in lanes.LANE_C:
        assert not _fixtures_used(REPO / module) & {"testbed", "slurm"}, module
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw2")
    lanes.set_current("tests/testbed/test_lifecycle.py::t")
    with pytest.raises(AssertionError, match="lane c has no shared testbed"):
        testbed_conftest.shared_name()
    lanes.set_current("tests/testbed/test_remediation.py::t")
    assert testbed_conftest.shared_name() == "kilnlb"
    lanes.set_current("tests/testbed/test_checks.py::t")
    assert testbed_conftest.shared_name() == "kilntest"
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "main")  # one process, one shared testbed for every test
    lanes.set_current("tests/testbed/test_remediation.py::t")
    assert testbed_conftest.shared_name() == "kilntest"


def test_the_vm_tier_waits_until_the_other_lanes_live_tests_are_in_the_finished_log(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    config = SimpleNamespace(option=SimpleNamespace(basetemp=str(tmp_path / "popen-gw0")))
    items = [SimpleNamespace(nodeid=n) for n in ("tests/testbed/test_remediation.py::a", "tests/testbed/test_checks.py::b",
                                                 "tests/unit/test_lanes.py::c", "tests/vm/test_vm.py::d",
                                                 "tests/vm/test_vagrant.py::e", "tests/testbed/test_lifecycle.py::f")]
    said = []
    done = threading.Event()
    waited = []

    def wait():
        waited.append(lanes.wait_for_other_lanes(config, items, said.append, timeout=30, poll=0.01))
        done.set()

    threading.Thread(target=wait, daemon=True).start()
    time.sleep(0.2)
    assert not done.is_set() and said == ["the VM tier waits for lanes b and c's 3 remaining live tests"]
    lane_b = SimpleNamespace(option=SimpleNamespace(basetemp=str(tmp_path / "popen-gw1")))
    lane_c = SimpleNamespace(option=SimpleNamespace(basetemp=str(tmp_path / "popen-gw2")))
    lanes.note_finished(lane_c, "tests/unit/test_lanes.py::c")  # a unit test: not waited for
    time.sleep(0.1)
    assert not done.is_set()
    lanes.note_finished(lane_b, "tests/testbed/test_remediation.py::a")
    lanes.note_finished(lane_c, "tests/testbed/test_lifecycle.py::f")
    time.sleep(0.1)
    assert not done.is_set()  # the Vagrant cluster's VMs are still up
    lanes.note_finished(lane_c, "tests/vm/test_vagrant.py::e")
    assert done.wait(5) and waited[0] > 0.3
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "main")  # one process: nothing to wait for, no log written
    assert lanes.wait_for_other_lanes(config, items, said.append) == 0.0 and lanes.finished_log(config) is None
