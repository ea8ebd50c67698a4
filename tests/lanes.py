"""The run on three pytest-xdist workers, one lane each (pyproject.toml: ``-n 3 --dist loadscope``).

The nspawn tier mostly waits (on Slurm, timers, reboots: about 0.6 of a core on average), so its tests
are split between three lanes, each on a shared 5-node testbed of its own (tests/testbed/conftest.py
names it after the worker): on CI's two cores two such lanes left most of a core idle for the nspawn
tier's 40 minutes, while the VM tier, bound by CPU (QEMU's software emulation), waited after them. The VM
tier runs after lane ``a``'s nspawn tests and waits until lanes ``b`` and ``c``'s are done too
(``wait_for_other_lanes``), so it never runs beside a testbed. The unit and plan tests take lane ``c``'s
first minutes, while the testbeds come up and deploy.

    lane a: the shared testbed's Slurm, checks, monitoring, rolling patches and images, then the VM tier
    lane b: remediation, maintenance, power loss, login access, directory identities, the log host,
            a slow slurmdbd's start, the database on its socket, training through a node
            loss, a job across node types, a node made slow, testbeds of their own (lifecycle, the installed
            wheel, Debian 13)
    lane c: unit and plan tests, isolation, the firewall's zones, usage, the workload check

Each lane is one xdist scope, run whole by one worker in the order tests/conftest.py gives. With
``-n 0`` everything runs in one process in that order, as before. A lane's tests are listed here by
module: a new module under tests/testbed goes to lane ``a`` unless it is named in ``LANE_B`` or ``LANE_C``;
move one when ``time per lane`` (printed when the run ends) says the lanes are out of balance.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from xdist.scheduler import LoadScopeScheduling

# The nspawn modules of lane b (every tests/testbed module in neither LANE_B nor LANE_C is lane a's)
LANE_B = ("tests/testbed/test_remediation.py", "tests/testbed/test_patch_maintenance.py",
          "tests/testbed/test_power_loss.py", "tests/testbed/test_debian13.py",
          "tests/testbed/test_lifecycle.py", "tests/testbed/test_installed.py", "tests/testbed/test_testbed.py",
          "tests/testbed/test_login_access.py",
          "tests/testbed/test_usage_node_types.py", "tests/testbed/test_cpu_slow.py", "tests/testbed/test_training.py",
          "tests/testbed/test_logs.py", "tests/testbed/test_directory.py",
          # lane a's nspawn tests ended about 200 s after lane b's (the VM tier waits for both): ~70 s moved
          "tests/testbed/test_service_start.py", "tests/testbed/test_database.py")
# The nspawn modules of lane c, after the unit and plan tests
LANE_C = ("tests/testbed/test_isolation.py", "tests/testbed/test_firewall.py", "tests/testbed/test_usage.py",
          "tests/testbed/test_workload_check.py")


def lane_of(nodeid: str) -> str:
    """``a``, ``b`` or ``c``: the lane of a test by its node id."""
    path = nodeid.split("::")[0]
    if path.startswith("tests/vm/"):
        return "a"
    if path.startswith("tests/testbed/"):
        return "b" if path in LANE_B else "c" if path in LANE_C else "a"
    return "c"


def is_live_nspawn(nodeid: str) -> bool:
    return nodeid.startswith("tests/testbed/")


class LaneScheduling(LoadScopeScheduling):
    """xdist's scope scheduling with each lane one scope: with three workers, one lane each, sent whole."""

    def _split_scope(self, nodeid: str) -> str:
        return lane_of(nodeid)


def worker() -> str:
    """This process's xdist worker id (``gw0``, ``gw1``), or ``main`` when the run is not split."""
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def finished_log(config) -> Path | None:
    """The file, shared by the run's workers, where each appends the node id of every test it finished
    (xdist gives each worker ``--basetemp <run's temp>/popen-gwN``: its parent is the run's own). None
    when the run is not split."""
    basetemp = config.option.basetemp
    if worker() == "main" or not basetemp:
        return None
    return Path(basetemp).parent / "kiln-finished-tests"


def note_finished(config, nodeid: str) -> None:
    log = finished_log(config)
    if log is not None:
        with open(log, "a") as out:
            out.write(nodeid + "\n")


def wait_for_other_lanes(config, items: list, say, timeout: float = 3600, poll: float = 5) -> float:
    """Wait until every nspawn test of lanes ``b`` and ``c`` has finished (their testbeds are then down), so
    that the VM tier's emulated CPUs do not run beside a testbed. Returns the seconds waited; after
    ``timeout`` (a lane that hangs) it goes on, saying so."""
    log = finished_log(config)
    if log is None:
        return 0.0  # one process: the nspawn tests ran before (tests/conftest.py orders them)
    pending = {i.nodeid for i in items if is_live_nspawn(i.nodeid) and lane_of(i.nodeid) != "a"}
    started = time.monotonic()
    said = False
    while pending:
        pending -= set(log.read_text().split("\n")) if log.exists() else set()
        if not pending:
            break
        if time.monotonic() - started > timeout:
            say(f"lanes b and c still have {len(pending)} nspawn tests after {timeout:.0f} s; the VM tier starts anyway")
            break
        if not said:
            say(f"the VM tier waits for the {len(pending)} nspawn tests left in lanes b and c")
            said = True
        time.sleep(poll)
    return time.monotonic() - started
