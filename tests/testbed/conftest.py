"""End-to-end tests on the systemd-nspawn testbed: one shared testbed per test run.

They need root and the host tools (.ci/run installs them). Outside CI they skip, saying why; in CI
(CI=true) a missing prerequisite is a failure, not a skip.
"""

from __future__ import annotations

import os
import shutil

import pytest

from kiln.testbed.testbed import Testbed
from tests import lanes
from tests.testbed.slurm_helpers import deploy_json, on, wait_for

SHARED_NAMES = {"a": "kilntest", "b": "kilnlb"}  # the shared testbed of each lane that has one (tests/lanes.py)
NODES = 5  # 1 controller + 4 compute: enough for rolling patches with a node drained by a person
TOOLS = ("debootstrap", "systemd-nspawn", "apt-cacher-ng", "ip", "ssh", "unshare", "nsenter")


def testbed_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "the testbed needs root (mounts, bridges, systemd-nspawn)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return f"host tools missing: {', '.join(missing)} (apt-get install debootstrap systemd-container apt-cacher-ng)"
    return None


def require_testbed() -> None:
    reason = testbed_unavailable()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the testbed tests, but {reason}")
        pytest.skip(reason)


def quiet(message: str) -> None:
    print(message)


@pytest.fixture(scope="session")
def testbed(tmp_path_factory):
    """A 5-node testbed (1 controller + 4 compute) shared by every end-to-end test of the run's lane (lanes a
    and b, one pytest-xdist worker each: tests/lanes.py)."""
    require_testbed()
    tb = Testbed(shared_name(), progress=quiet)
    inventory = tmp_path_factory.mktemp("inventory") / "testbed"
    tb.up(NODES, inventory_dir=inventory)
    without_remediation(inventory)
    tb.inventory = inventory
    SHARED_UP.append(tb)
    yield tb
    take_down_shared_testbed()


def shared_name() -> str:
    """The shared testbed's name in this process: its lane's own, so that two lanes never share nodes. A test
    of lane c (which has none) asking for it is an error: its module belongs in lanes.LANE_B or lane a."""
    if lanes.worker() == "main":
        return SHARED_NAMES["a"]
    lane = lanes.current_lane()
    if lane not in SHARED_NAMES:
        raise AssertionError(f"lane {lane} has no shared testbed (tests/lanes.py): move its module to LANE_B or lane a")
    return SHARED_NAMES[lane]


SHARED_UP: list[Testbed] = []  # the shared testbed while it is up


def without_remediation(inventory) -> None:
    """The shared testbed's inventory with kiln-remediate off: the live tests break nodes on purpose and
    expect them to stay broken while they look; tests/testbed/test_remediation.py turns it on for itself."""
    import yaml
    path = inventory / "group_vars" / "all" / "testbed.yml"
    data = yaml.safe_load(path.read_text())
    data["kiln_remediation"] = {**data.get("kiln_remediation", {}), "enabled": False}
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def take_down_shared_testbed() -> None:
    """The shared testbed down, if it is up (at the end of the run, or earlier: tests/vm/conftest.py)."""
    while SHARED_UP:
        tb = SHARED_UP.pop()
        tb.down(inventory_dir=tb.inventory)


@pytest.fixture(scope="session")
def slurm(testbed):
    """The shared testbed with Slurm deployed once; every kiln output of the run is kept in ``outputs``."""
    rc, data, text = deploy_json(testbed.inventory)
    assert rc == 0, text
    nodes = [n.name for n in testbed.recorded_nodes()]
    testbed.controller, testbed.computes = nodes[0], nodes[1:]
    testbed.first_deploy = data
    testbed.outputs = [text]
    wait_for(lambda: on(testbed, testbed.controller, "sinfo -h -N -o '%N %T'").stdout.count("idle")
             == len(testbed.computes), timeout=90, what="every compute node idle in sinfo")
    return testbed
