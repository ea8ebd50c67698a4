"""Unit tests never touch a real testbed's state: a Testbed made here keeps what it writes (its BMC's
certificate and password, written with its inventory) under a directory of its own. Per module, so a
module's fixtures that make a Testbed are covered too, and undone at the module's end: the live tiers
that run after the unit tests in the same session keep the real state directory (a socket path under a
temporary one is too long for ssh's ControlPath)."""

import pytest


@pytest.fixture(autouse=True, scope="module")
def _testbed_state(tmp_path_factory):
    from kiln.testbed import testbed
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(testbed, "STATE_ROOT", tmp_path_factory.mktemp("testbed-state"))
        yield
