"""Shared fixtures: paths of the repository and a guard that proves no connection is opened; the run's
two lanes (tests/lanes.py); what each tier and lane took, printed when the run ends."""

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
    """The two lanes, one a worker (``--dist loadscope``, pyproject.toml's default)."""
    if config.getvalue("dist") == "loadscope":
        return lanes.LaneScheduling(config, log)
    return None


_CONFIG: list = []


def pytest_configure(config):
    _CONFIG[:] = [config]


def pytest_runtest_logfinish(nodeid, location):  # noqa: ARG001 - the hook's signature
    """Each finished test is written to the run's shared log: the VM tier waits on lane b's (tests/lanes.py)."""
    if _CONFIG:
        lanes.note_finished(_CONFIG[0], nodeid)


def pytest_terminal_summary(terminalreporter):
    """Per lane and tier: its tests' seconds summed, and from its first test's start to its last test's
    end. What to balance or cut when the run grows (CI must stay within 45 minutes on a 2-core machine).
    The nspawn tier mostly waits; the VM tier is bound by CPU (QEMU's software emulation): run beside the
    nspawn tier on a third worker it took longer than alone (the VM tier's setup 977 s instead of 485 s),
    so it waits for both nspawn lanes (tests/lanes.py)."""
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
