"""tests/leftovers.py takes down what an earlier run left up: it must know every testbed name the suite uses,
or a killed run's testbed of a name it missed would run beside the next run."""

from __future__ import annotations

import re

from tests import leftovers
from tests.conftest import REPO
from tests.testbed.conftest import SHARED_NAMES
from tests.testbed.test_debian13 import NAME as DEBIAN13
from tests.testbed.test_installed import NAME as WHEEL
from tests.vm.cluster import VM_NAME


def test_every_testbed_name_of_the_suite_is_taken_down():
    lifecycle = re.findall(r'fresh\("([a-z0-9]+)"', (REPO / "tests/testbed/test_lifecycle.py").read_text())
    assert lifecycle, "test_lifecycle's testbeds were not found"
    names = {*SHARED_NAMES.values(), DEBIAN13, WHEEL, VM_NAME, *lifecycle}
    assert names <= set(leftovers.SUITE_TESTBEDS), names - set(leftovers.SUITE_TESTBEDS)
    # every name the live tiers make elsewhere (the unit tests' Testbed objects only write inventories)
    made = set()
    for path in [*(REPO / "tests/testbed").rglob("*.py"), *(REPO / "tests/vm").rglob("*.py")]:
        made |= set(re.findall(r'Testbed\("([a-z0-9]+)"', path.read_text()))
    assert made <= set(leftovers.SUITE_TESTBEDS), made - set(leftovers.SUITE_TESTBEDS)


def test_nothing_recorded_means_nothing_to_do(tmp_path, monkeypatch):
    from kiln.testbed import testbed
    monkeypatch.setattr(testbed, "STATE_ROOT", tmp_path)
    assert leftovers.testbeds() == []
    (tmp_path / "kilnvm").mkdir()
    (tmp_path / "kexp").mkdir()  # an operator's own testbed: never the suite's to take down
    (tmp_path / "kilntgw4").mkdir()  # the shared testbed of a worker xdist started in place of a crashed one
    assert leftovers.testbeds() == ["kilntgw4", "kilnvm"]
