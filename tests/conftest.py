"""Shared fixtures: paths of the repository and a guard that proves no connection is opened."""

from __future__ import annotations

import socket
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
