"""The run on three pytest-xdist workers, one lane each (pyproject.toml: ``-n 3 --dist loadscope``).

The nspawn tier mostly waits (on Slurm, timers, reboots): with two lanes it kept about 1 of the 2 cores
busy for half an hour. So the tests that share a testbed are split between lanes ``a`` and ``b``, each on a
shared 5-node testbed of its own (tests/testbed/conftest.py names it after the lane), and a third lane
``c`` takes what needs no shared testbed: the unit and plan tests (they keep a core busy while the two
shared testbeds come up and deploy), the modules with testbeds of their own (lifecycle, the installed
wheel, Debian 13) and last the Vagrant cluster. The VM tier is bound by CPU (QEMU's software emulation):
it runs after lane ``a``'s nspawn tests and waits until lanes ``b`` and ``c``'s live tests are done too
(``wait_for_other_lanes``), so it never runs beside a testbed or other VMs.

Measured at cacd6cf (two lanes): the nspawn phase keeps about 1 of the 2 cores busy, the VM tier 1.7 to 2.
Booting and deploying the VM cluster ahead on that idle core was tried and backed out (8bb05b4): at nice 19
its VMs still took 1.2 cores, since the kernel's autogroups weigh each testbed supervisor's session on its
own; from a low-weight cpu cgroup the controller's GlusterFS TLS start failed under the starvation.

Measured at cbc2365 (three lanes, ci7, this 2-core machine): 3936 s in all (two lanes, ci5: 4244 s). Lane a's
nspawn tests end at 2096 s (ci5: 2331 s), lane b's at 1975 s, lane c's at 1261 s (its Vagrant cluster 391 s
beside both testbeds); the VM tier runs 1833 s after. Both shared testbeds' first deploys took 235 s beside
the unit tests (ci5: 145 s). The cores stay about 1.1 busy from 1300 s to 2050 s: lane c is idle from 1261 s.

    lane a: the shared testbed's Slurm, checks, monitoring, usage, isolation, rolling patches and images,
            then the VM tier (but the Vagrant cluster)
    lane b: remediation, maintenance, power loss, login access, directory identities, the log host, a slow
            slurmdbd's start, the database on its socket, training through a node loss, a job across node
            types, a node made slow, the firewall, the testbed itself, rolling patches that lose nodes
    lane c: unit and plan tests, testbeds of their own (lifecycle, the installed wheel, Debian 13), then the
            Vagrant cluster

Each lane is one xdist scope, run whole by one worker in the order tests/conftest.py gives. With
``-n 0`` everything runs in one process in that order, on one shared testbed. A lane's tests are listed
here by module: a new module under tests/testbed goes to lane ``a`` unless it is named in ``LANE_B`` or
``LANE_C``; move one when ``time per lane`` (printed when the run ends) says the lanes are out of balance.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from xdist.scheduler import LoadScopeScheduling

# The nspawn modules of lane b, on its own shared testbed (every other tests/testbed module is lane a's, but
# LANE_C's). Balanced on ci5's seconds per module: lane a's shared-testbed modules 2329 s, lane b's 1329 s
# before test_patch_lost_nodes (403 s) and test_firewall (99 s) came over from lane a
LANE_B = ("tests/testbed/test_remediation.py", "tests/testbed/test_patch_maintenance.py",
          "tests/testbed/test_power_loss.py", "tests/testbed/test_testbed.py", "tests/testbed/test_login_access.py",
          "tests/testbed/test_usage_node_types.py", "tests/testbed/test_cpu_slow.py", "tests/testbed/test_training.py",
          "tests/testbed/test_logs.py", "tests/testbed/test_directory.py", "tests/testbed/test_service_start.py",
          "tests/testbed/test_database.py", "tests/testbed/test_patch_lost_nodes.py", "tests/testbed/test_firewall.py")

# The nspawn modules of lane c: each brings up testbeds of its own and uses no shared one
LANE_C = ("tests/testbed/test_debian13.py", "tests/testbed/test_lifecycle.py", "tests/testbed/test_installed.py")

# The Vagrant cluster's test ends lane c, beside lanes a and b's last nspawn tests, instead of being on the
# VM tier's path (it boots VMs of its own, and the VM tier waits for it)
VAGRANT = "tests/vm/test_vagrant.py"

LANES = ("a", "b", "c")


def lane_of(nodeid: str) -> str:
    """``a``, ``b`` or ``c``: the lane of a test by its node id."""
    path = nodeid.split("::")[0]
    if path == VAGRANT or path in LANE_C:
        return "c"
    if path.startswith("tests/vm/"):
        return "a"
    if path.startswith("tests/testbed/"):
        return "b" if path in LANE_B else "a"
    return "c"


def is_live(nodeid: str) -> bool:
    """A test of the live tiers: it runs nodes or VMs (the nspawn tier, the VM tier, the Vagrant cluster)."""
    return nodeid.startswith(("tests/testbed/", "tests/vm/"))


class LaneScheduling(LoadScopeScheduling):
    """xdist's scope scheduling with each lane one scope: with three workers, one lane each, sent whole."""

    def _split_scope(self, nodeid: str) -> str:
        return lane_of(nodeid)


_CURRENT: list[str] = []  # the lane of the test this process runs now (tests/conftest.py sets it)


def set_current(nodeid: str) -> None:
    _CURRENT[:] = [lane_of(nodeid)]


def current_lane() -> str:
    """The lane of the test this process is running (a worker runs one lane only); ``a`` before any."""
    return _CURRENT[0] if _CURRENT else "a"


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
    """Wait until every live test of lanes ``b`` and ``c`` in this run has finished (their testbeds and the
    Vagrant cluster are then down), so that the VM tier's emulated CPUs run beside no testbed and no other
    VM. Returns the seconds waited; after ``timeout`` (a lane that hangs) it goes on, saying so."""
    log = finished_log(config)
    if log is None:
        return 0.0  # one process: the nspawn tests ran before (tests/conftest.py orders them)
    pending = {i.nodeid for i in items if is_live(i.nodeid) and lane_of(i.nodeid) != "a"}
    started = time.monotonic()
    said = False
    while pending:
        pending -= set(log.read_text().split("\n")) if log.exists() else set()
        if not pending:
            break
        if time.monotonic() - started > timeout:
            say(f"lanes b and c still have {len(pending)} live tests after {timeout:.0f} s; the VM tier starts anyway")
            break
        if not said:
            say(f"the VM tier waits for lanes b and c's {len(pending)} remaining live tests")
            said = True
        time.sleep(poll)
    return time.monotonic() - started
