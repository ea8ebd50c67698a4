"""Shared fixtures: paths of the repository and a guard that proves no connection is opened; the live
tiers run side by side under pytest-xdist, and what each tier took is printed when the run ends.

The run is spread over three pytest-xdist workers (pyproject.toml: ``-n 3 --dist loadgroup``). Each live
tier is one unit of work, run whole by one worker in the order tests/testbed/conftest.py gives it, beside
the others: the shared nspawn testbed's tests (``shared-testbed``), the nspawn tests that bring up testbeds
of their own (``own-testbeds``: Debian 13, the lifecycle, the installed wheel) and the VM tier (``vm``).
The unit and plan tests fill what workers are left. Live tiers mostly wait (on Slurm, timers, reboots,
QEMU), so side by side on two cores they cost little of each other. ``-n 0`` runs everything in one
process, in the same order (with ``-s`` to see what the tiers print).

xdist's own groups (``xdist_group`` markers) are read from node ids it rewrites, which pytest 9.2 no
longer lets it do; the tiers are given to xdist as a scheduler instead (``TierScheduling``), from the test's
path: the controller sees node ids only.
"""

from __future__ import annotations

import socket
import time
from collections import defaultdict
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

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


# The nspawn test modules that bring up testbeds of their own (everything else under tests/testbed uses
# the shared one): checked against each test's fixtures when the run is collected.
OWN_TESTBED_MODULES = ("tests/testbed/test_debian13.py", "tests/testbed/test_installed.py",
                       "tests/testbed/test_lifecycle.py")
SHARED_TESTBED_FIXTURES = {"testbed", "slurm"}


def tier_of(nodeid: str) -> str | None:
    """The live tier of a test by its node id (None for unit and plan tests, spread over every worker)."""
    path = nodeid.split("::")[0]
    if path.startswith("tests/vm/"):
        return "vm"
    if path in OWN_TESTBED_MODULES:
        return "own-testbeds"
    if path.startswith("tests/testbed/"):
        return "shared-testbed"
    return None


class TierScheduling(LoadScopeScheduling):
    """xdist's scope scheduling with each live tier one scope (largest first: each starts at once on a
    worker of its own) and every other test a scope of its own."""

    def _split_scope(self, nodeid: str) -> str:
        return tier_of(nodeid) or nodeid


def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") == "loadgroup":
        return TierScheduling(config, log)
    return None


def pytest_collection_modifyitems(items):
    """A test's tier (by its path) must be the testbed it uses (by its fixtures): a new module under
    tests/testbed that brings up a testbed of its own is added to OWN_TESTBED_MODULES, or it would share a
    worker with, and wait behind, the shared testbed's tests (or, the other way, run beside them on it)."""
    wrong = [item.nodeid for item in items if tier_of(item.nodeid) in ("shared-testbed", "own-testbeds")
             and (tier_of(item.nodeid) == "shared-testbed") != bool(SHARED_TESTBED_FIXTURES & set(item.fixturenames))]
    if wrong:
        raise pytest.UsageError("tests/conftest.py's tiers disagree with the fixtures of: " + ", ".join(wrong[:5]))


def pytest_terminal_summary(terminalreporter):
    """Per tier: its tests' seconds summed, from its first test's start to its last test's end, and the
    workers it ran on. What to balance when the run grows (CI must stay within 45 minutes)."""
    spans: dict[str, list[float]] = defaultdict(lambda: [float("inf"), 0.0, 0.0])
    workers: dict[str, set[str]] = defaultdict(set)
    for reports in terminalreporter.stats.values():
        for report in reports:
            if not isinstance(report, pytest.TestReport):
                continue
            tier = tier_of(report.nodeid) or "unit and plan"
            span = spans[tier]
            span[0], span[1] = min(span[0], report.start), max(span[1], report.stop)
            span[2] += report.duration
            node = getattr(report, "node", None)
            workers[tier].add(getattr(getattr(node, "gateway", None), "id", "main"))
    if not spans:
        return
    terminalreporter.section("time per tier")
    began = min(span[0] for span in spans.values())
    for tier, (start, stop, total) in sorted(spans.items(), key=lambda kv: kv[1][0]):
        terminalreporter.write_line(
            f"{tier:14} tests {total:7.0f} s, from {start - began:5.0f} s to {stop - began:5.0f} s of the run "
            f"on {', '.join(sorted(workers[tier]))} ({time.strftime('%H:%M:%S', time.localtime(stop))})")
