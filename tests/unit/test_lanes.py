"""The run's two lanes (tests/lanes.py): every live module has a lane, the VM tier follows lane a's nspawn
tests, the Vagrant cluster's test ends lane b, and the VM tier's wait for lane b ends once lane b's live
tests (its nspawn tests and the Vagrant cluster's) are in the run's finished log."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from tests import lanes
from tests.conftest import REPO


def test_every_module_has_one_lane_and_the_vm_tier_is_lane_as():
    for path in sorted((REPO / "tests" / "testbed").glob("test_*.py")):
        assert lanes.lane_of(f"tests/testbed/{path.name}::t") in ("a", "b")
    assert all(m.startswith("tests/testbed/test_") and (REPO / m).exists() for m in lanes.LANE_B)
    assert lanes.lane_of("tests/vm/test_vm.py::t") == "a" and lanes.lane_of("tests/unit/test_lanes.py::t") == "b"
    assert lanes.lane_of("tests/testbed/test_checks.py::t") == "a"
    assert lanes.lane_of("tests/testbed/test_remediation.py::t") == "b"
    assert lanes.lane_of("tests/vm/test_vagrant.py::t") == "b"


def test_the_vm_tier_waits_until_lane_bs_live_tests_are_in_the_finished_log(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    config = SimpleNamespace(option=SimpleNamespace(basetemp=str(tmp_path / "popen-gw0")))
    items = [SimpleNamespace(nodeid=n) for n in ("tests/testbed/test_remediation.py::a", "tests/testbed/test_checks.py::b",
                                                 "tests/unit/test_lanes.py::c", "tests/vm/test_vm.py::d",
                                                 "tests/vm/test_vagrant.py::e")]
    said = []
    done = threading.Event()
    waited = []

    def wait():
        waited.append(lanes.wait_for_lane_b(config, items, said.append, timeout=30, poll=0.01))
        done.set()

    threading.Thread(target=wait, daemon=True).start()
    time.sleep(0.2)
    assert not done.is_set() and said == ["the VM tier waits for lane b's 2 remaining live tests"]
    other = SimpleNamespace(option=SimpleNamespace(basetemp=str(tmp_path / "popen-gw1")))
    lanes.note_finished(other, "tests/unit/test_lanes.py::c")  # a unit test: not waited for
    time.sleep(0.1)
    assert not done.is_set()
    lanes.note_finished(other, "tests/testbed/test_remediation.py::a")
    time.sleep(0.1)
    assert not done.is_set()  # the Vagrant cluster's VMs are still up
    lanes.note_finished(other, "tests/vm/test_vagrant.py::e")
    assert done.wait(5) and waited[0] > 0.3
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "main")  # one process: nothing to wait for, no log written
    assert lanes.wait_for_lane_b(config, items, said.append) == 0.0 and lanes.finished_log(config) is None
