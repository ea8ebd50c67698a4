"""Unit tests never touch a real testbed's state: a Testbed made here keeps what it writes (its BMC's
certificate and password, written with its inventory) under the test's own directory."""

import pytest


@pytest.fixture(autouse=True)
def _testbed_state(tmp_path_factory, monkeypatch):
    from kiln.testbed import testbed
    monkeypatch.setattr(testbed, "STATE_ROOT", tmp_path_factory.mktemp("testbed-state"))
