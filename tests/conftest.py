"""Shared fixtures: paths of the repository and a guard that proves no connection is opened; the run's
three lanes (tests/lanes.py); what each tier and lane took, printed when the run ends."""

from __future__ import annotations

import socket
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests import lanes

REPO = Path(__file__).resolve().parents[1]
INVENTORIES = REPO / "tests" / "inventories"


@pytest.fixture
def no_network(monkeypatch):
    """Fail the test if anything tries to open a network connection."""
    calls = []

    def refuse(self, address, *args, **kwargs):
        calls.append(address)
        raise AssertionError(f"kiln tried to connect to {address} while validating")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    return calls


def tier_of(nodeid: str) -> str:
    """The tier of a test by its node id."""
    for prefix, tier in (("tests/vm/", "vm"), ("tests/testbed/", "nspawn"), ("tests/gpu/", "gpu")):
        if nodeid.startswith(prefix):
            return tier
    return "unit and plan"


def pytest_xdist_make_scheduler(config, log):
    """The three lanes, one a worker (``--dist loadscope``, pyproject.toml's default)."""
    if config.getvalue("dist") == "loadscope":
        return lanes.LaneScheduling(config, log)
    return None


_CONFIG: list = []


def pytest_configure(config):
    _CONFIG[:] = [config]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """The lane of the test about to run, before its fixtures: the shared testbed is its lane's own."""
    lanes.set_current(item.nodeid)


def pytest_runtest_logfinish(nodeid, location):  # noqa: ARG001 - the hook's signature
    """Each finished test is written to the run's shared log: the VM tier waits on lanes b and c's
    (tests/lanes.py)."""
    if _CONFIG:
        lanes.note_finished(_CONFIG[0], nodeid)


def pytest_terminal_summary(terminalreporter):
    """Per lane and tier: its tests' seconds summed, and from its first test's start to its last test's
    end. What to balance or cut when the run grows (CI must stay within 45 minutes on a 2-core machine).
    The nspawn tier mostly waits; the VM tier is bound by CPU (QEMU's software emulation): run beside the
    nspawn tier on a worker of its own it took longer than alone (the VM tier's setup 977 s instead of 485 s),
    so it waits for the other lanes' live tests (tests/lanes.py)."""
    spans: dict[tuple[str, str], list[float]] = defaultdict(lambda: [float("inf"), 0.0, 0.0])
    for reports in terminalreporter.stats.values():
        for report in reports:
            if not isinstance(report, pytest.TestReport):
                continue
            span = spans[(lanes.lane_of(report.nodeid), tier_of(report.nodeid))]
            span[0], span[1] = min(span[0], report.start), max(span[1], report.stop)
            span[2] += report.duration
    if not spans:
        return
    terminalreporter.section("time per lane and tier")
    began = min(span[0] for span in spans.values())
    for (lane, tier), (start, stop, total) in sorted(spans.items(), key=lambda kv: (kv[0][0], kv[1][0])):
        terminalreporter.write_line(f"lane {lane}  {tier:14} tests {total:7.0f} s, from {start - began:5.0f} s to "
                                    f"{stop - began:5.0f} s of the run ({time.strftime('%H:%M:%S', time.localtime(stop))})")


def pytest_collection_modifyitems(items):
    """The order of the live tiers, whatever part of the suite is selected (this hook is here, not in
    tests/testbed's conftest, which a run of tests/vm alone does not load). The unit and plan tests first
    (they keep a core busy while the first testbed comes up); rolling patches (test_patch.py,
    test_patch_maintenance.py) move the driver back and forth on every node and reboot them: they run after
    the others; the image tests (test_image.py) boot every node afresh from an image: after those; the
    Debian 13 tests (test_debian13.py) take the shared testbed down for a testbed of their own: after those;
    the VM tier (tests/vm) runs last, after the nspawn tests, and its lifecycle tests (which take the VM
    cluster down) last of all."""
    order = {"tests/testbed/test_patch.py": 1, "tests/testbed/test_patch_maintenance.py": 1,
             "tests/testbed/test_planned_work_alerts.py": 1,
             # SSSD and slapd put on the lane's shared testbed and taken off again: before its rolling patches
             "tests/testbed/test_directory.py": 0.9,
             "tests/testbed/test_patch_lost_nodes.py": 2, "tests/testbed/test_image.py": 3,
             # Debian 13 on a testbed of its own, once the shared Debian 12 one is done with (it takes that down)
             "tests/testbed/test_debian13.py": 3.5}
    # the VM lifecycle tests end with the shared VM cluster down: they run after every other VM test
    order["tests/vm/test_vm_lifecycle.py"] = 5
    def key(item) -> float:
        path = item.nodeid.split("::")[0]
        if not path.startswith(("tests/testbed/", "tests/vm/")):
            return -1
        return order.get(path, 4 if path.startswith("tests/vm/") else 0)
    items.sort(key=key)
