"""Every kind of malformed inventory is rejected with exit 2, naming its file and key; nothing connects."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inventories"))
from malformed import CASES, Case  # noqa: E402

from kiln.cli import main  # noqa: E402
from tests.conftest import INVENTORIES  # noqa: E402


def materialize(tmp_path: Path, case: Case) -> Path:
    root = tmp_path / "inv"
    shutil.copytree(INVENTORIES / "small", root)
    for rel, content in case.files.items():
        path = root / rel
        if content is None:
            path.unlink()
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
    return root


def test_there_are_at_least_25_kinds():
    assert len({c.name for c in CASES}) == len(CASES) >= 25


def test_base_inventory_is_valid(no_network):
    result = CliRunner().invoke(main, ["inventory", "validate", "-i", str(INVENTORIES / "small"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["valid"] is True
    assert not no_network


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_malformed_inventory_is_rejected(tmp_path, case, no_network):
    root = materialize(tmp_path, case)
    result = CliRunner().invoke(main, ["inventory", "validate", "-i", str(root), "--json"])
    assert result.exit_code == 2, result.output
    report = json.loads(result.output)
    assert report["valid"] is False
    matching = [e for e in report["errors"] if e["file"] == case.file and e["key"] == case.key]
    assert matching, f"no error naming {case.file} / {case.key}: {report['errors']}"
    assert any(case.text in e["message"] for e in matching), matching
    if case.line is not None:
        assert any(e["line"] == case.line for e in matching), matching
    assert not no_network


def test_text_output_lists_every_error_with_file_and_key(tmp_path):
    case = Case("two_faults", {"group_vars/cpu_b.yml": "kiln_cpus: lots\nkiln_memroy_mb: 64000\n"}, "", "", "")
    root = materialize(tmp_path, case)
    result = CliRunner().invoke(main, ["inventory", "validate", "-i", str(root)])
    assert result.exit_code == 2
    assert "group_vars/cpu_b.yml:1: kiln_cpus:" in result.output
    assert "group_vars/cpu_b.yml:2: kiln_memroy_mb: unknown kiln setting (did you mean 'kiln_memory_mb'?)" in result.output
    assert "nothing was touched" in result.output


def test_other_tools_variables_are_left_alone(tmp_path):
    case = Case("foreign", {"group_vars/cpu_b.yml": "kiln_cpus: 16\nkiln_memory_mb: 64000\n"
                            "nhc_checks: [x]\nkilnish: 1\nmy_kiln_thing: true\n"}, "", "", "")
    root = materialize(tmp_path, case)
    result = CliRunner().invoke(main, ["inventory", "validate", "-i", str(root)])
    assert result.exit_code == 0, result.output


def test_missing_inventory_directory_is_bad_input(tmp_path):
    result = CliRunner().invoke(main, ["inventory", "validate", "-i", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "inventory directory not found" in result.output
