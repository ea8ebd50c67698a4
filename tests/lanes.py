"""The run on two pytest-xdist workers, one lane each (pyproject.toml: ``-n 2 --dist loadscope``).

The nspawn tier mostly waits (on Slurm, timers, reboots: about 0.6 of a core on average), so its tests
are split between two lanes, each on a shared 5-node testbed of its own (tests/testbed/conftest.py
names it after the worker). The VM tier is bound by CPU (QEMU's software emulation): it runs after
lane ``a``'s nspawn tests and waits until lane ``b``'s live tests are done too (``wait_for_lane_b``), so
it never runs beside a testbed or other VMs. The unit and plan tests take lane ``b``'s first minutes,
while lane ``a``'s testbed comes up and deploys; the Vagrant cluster's test takes its last, beside lane
``a``'s last nspawn tests.

Measured at cacd6cf: the nspawn phase keeps about 1 of the 2 cores busy, the VM tier 1.7 to 2. Booting and
deploying the VM cluster ahead on that idle core was tried and backed out (8bb05b4): at nice 19 its VMs still
took 1.2 cores, since the kernel's autogroups weigh each testbed supervisor's session on its own; from a
low-weight cpu cgroup the controller's GlusterFS TLS start failed under the starvation.

    lane a: the shared testbed's Slurm, checks, monitoring, usage, isolation, firewall, rolling patches
            and images, then the VM tier (but the Vagrant cluster)
    lane b: unit and plan tests, remediation, maintenance, power loss, login access, directory identities, the log host,
            a slow slurmdbd's start, the database on its socket, training through a node
            loss, a job across node types, a node made slow, testbeds of their own (lifecycle, the installed
            wheel, Debian 13), then the Vagrant cluster

Each lane is one xdist scope, run whole by one worker in the order tests/conftest.py gives. With
``-n 0`` everything runs in one process in that order, as before. A lane's tests are listed here by
module: a new module under tests/testbed goes to lane ``a`` unless it is named in ``LANE_B``; move one when
``time per lane`` (printed when the run ends) says the lanes are out of balance.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from xdist.scheduler import LoadScopeScheduling

# The nspawn modules of lane b (every other tests/testbed module is lane a's)
LANE_B = ("tests/testbed/test_remediation.py", "tests/testbed/test_patch_maintenance.py",
          "tests/testbed/test_power_loss.py", "tests/testbed/test_debian13.py",
          "tests/testbed/test_lifecycle.py", "tests/testbed/test_installed.py", "tests/testbed/test_testbed.py",
          "tests/testbed/test_login_access.py",
          "tests/testbed/test_usage_node_types.py", "tests/testbed/test_cpu_slow.py", "tests/testbed/test_training.py",
          "tests/testbed/test_logs.py", "tests/testbed/test_directory.py",
          # lane a's nspawn tests ended about 200 s after lane b's (the VM tier waits for both): ~70 s moved
          "tests/testbed/test_service_start.py", "tests/testbed/test_database.py")


# The Vagrant cluster's test runs last on lane b, beside lane a's last nspawn tests, instead of first in the
# VM tier: in the last full run lane b's nspawn tests ended 423 s before lane a's, and the VM tier waited for
# both; the Vagrant test (239 s) was on that tier's path, now it fills lane b's wait
VAGRANT = "tests/vm/test_vagrant.py"


def lane_of(nodeid: str) -> str:
    """``a`` or ``b``: the lane of a test by its node id."""
    path = nodeid.split("::")[0]
    if path == VAGRANT:
        return "b"
    if path.startswith("tests/vm/"):
        return "a"
    if path.startswith("tests/testbed/"):
        return "b" if path in LANE_B else "a"
    return "b"


def is_live(nodeid: str) -> bool:
    """A test of the live tiers: it runs nodes or VMs (the nspawn tier, the VM tier, the Vagrant cluster)."""
    return nodeid.startswith(("tests/testbed/", "tests/vm/"))


class LaneScheduling(LoadScopeScheduling):
    """xdist's scope scheduling with each lane one scope: with two workers, one lane each, sent whole."""

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


def wait_for_lane_b(config, items: list, say, timeout: float = 3600, poll: float = 5) -> float:
    """Wait until every live lane ``b`` test of this run has finished (its testbeds and the Vagrant cluster
    are then down), so that the VM tier's emulated CPUs run beside no testbed and no other VM. Returns the
    seconds waited; after ``timeout`` (a lane that hangs) it goes on, saying so."""
    log = finished_log(config)
    if log is None:
        return 0.0  # one process: the nspawn tests ran before (tests/conftest.py orders them)
    pending = {i.nodeid for i in items if is_live(i.nodeid) and lane_of(i.nodeid) == "b"}
    started = time.monotonic()
    said = False
    while pending:
        pending -= set(log.read_text().split("\n")) if log.exists() else set()
        if not pending:
            break
        if time.monotonic() - started > timeout:
            say(f"lane b still has {len(pending)} live tests after {timeout:.0f} s; the VM tier starts anyway")
            break
        if not said:
            say(f"the VM tier waits for lane b's {len(pending)} remaining live tests")
            said = True
        time.sleep(poll)
    return time.monotonic() - started
