"""`kiln deploy` and `kiln check` on bad input: exit 2, a message naming what is wrong, and no connection."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from kiln.cli.main import main
from tests.conftest import INVENTORIES, REPO

EXAMPLE = str(REPO / "inventory" / "example")


@pytest.mark.parametrize("args, message", [
    (["deploy", "-i", str(INVENTORIES / "nonexistent")], "inventory directory not found"),
    (["deploy", "-i", EXAMPLE, "--roles", "slurm,nvidia"], "unknown role(s) nvidia"),
    (["deploy", "-i", EXAMPLE, "--limit", "gpu_a100"], "--limit term 'gpu_a100' matches no host or group"),
    (["check", "-i", EXAMPLE, "--suite", "gpu,disk"], "--suite: unknown disk"),
    (["check", "-i", EXAMPLE, "--limit", "hgx999"], "matches no host or group"),
])
def test_bad_input_exits_2_without_connecting(no_network, args, message):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert no_network == []
