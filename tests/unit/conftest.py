"""Unit tests never touch a real testbed's state: a Testbed made here keeps what it writes (its BMC's
certificate and password, written with its inventory) under the run's own directory. Session-wide, so a
module's fixtures that make a Testbed are covered too."""

import pytest


@pytest.fixture(autouse=True, scope="session")
def _testbed_state(tmp_path_factory):
    from kiln.testbed import testbed
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(testbed, "STATE_ROOT", tmp_path_factory.mktemp("testbed-state"))
        yield
