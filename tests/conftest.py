"""Shared fixtures: paths of the repository and a guard that proves no connection is opened; what each
tier took, printed when the run ends."""

from __future__ import annotations

import socket
import time
from collections import defaultdict
from pathlib import Path

import pytest

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


def pytest_terminal_summary(terminalreporter):
    """Per tier: its tests' seconds summed, and from its first test's start to its last test's end. What
    to cut when the run grows (CI must stay within 45 minutes). The suite is bound by CPU, not by waiting:
    the VM tier runs under QEMU's software emulation. Run side by side on three pytest-xdist workers, the
    tiers took longer than one after the other (71.5 min, the VM tier's setup 977 s instead of 485 s)."""
    spans: dict[str, list[float]] = defaultdict(lambda: [float("inf"), 0.0, 0.0])
    for reports in terminalreporter.stats.values():
        for report in reports:
            if not isinstance(report, pytest.TestReport):
                continue
            span = spans[tier_of(report.nodeid)]
            span[0], span[1] = min(span[0], report.start), max(span[1], report.stop)
            span[2] += report.duration
    if not spans:
        return
    terminalreporter.section("time per tier")
    began = min(span[0] for span in spans.values())
    for tier, (start, stop, total) in sorted(spans.items(), key=lambda kv: kv[1][0]):
        terminalreporter.write_line(f"{tier:14} tests {total:7.0f} s, from {start - began:5.0f} s to "
                                    f"{stop - began:5.0f} s of the run ({time.strftime('%H:%M:%S', time.localtime(stop))})")
