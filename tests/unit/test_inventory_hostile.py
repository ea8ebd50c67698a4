"""The hostile-value catalogue (tests/inventories/hostile.py): every value is refused with exit 2, the
file, line and key; nothing connects, nothing runs on this machine, and each refusal stays within 5 s
and 300 MB (measured per case in a fresh process)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inventories"))
from hostile import CASES, VAULT_PASSWORD, Special  # noqa: E402

from kiln.cli import main  # noqa: E402
from tests.conftest import INVENTORIES  # noqa: E402

LOOKUP_MARKER = Path("/tmp/kiln-hostile-lookup")


def materialize(tmp_path: Path, case) -> Path:
    root = tmp_path / "inv"
    shutil.copytree(INVENTORIES / "small", root)
    for rel, content in case.files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Special):
            if content.kind == "fifo":
                os.mkfifo(path)
            elif content.kind == "link":
                path.symlink_to(content.target)
            else:
                path.write_text("# big\n" + "x" * content.size)
        else:
            path.write_text(content)
    return root


def test_the_catalogue_has_at_least_40_cases():
    assert len({c.name for c in CASES}) == len(CASES) >= 40




@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_value_is_refused_with_its_file_line_and_key(tmp_path, case):
    LOOKUP_MARKER.unlink(missing_ok=True)
    root = materialize(tmp_path, case)
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "kiln", "inventory", "validate", "-i", str(root), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
                            env={k: v for k, v in os.environ.items() if k != "ANSIBLE_VAULT_PASSWORD_FILE"})
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.monotonic() - start
    out = proc.stdout.read().decode()
    code = os.waitstatus_to_exitcode(status)
    assert code == 2, out + proc.stderr.read().decode()
    errors = json.loads(out)["errors"]
    matching = [e for e in errors if e["file"] == case.file and e["key"] == case.key]
    assert matching, f"no error naming {case.file} / {case.key}: {errors}"
    assert any(case.text in e["message"] for e in matching), matching
    if case.key != "-":  # a whole file refused (a FIFO, a link to a device) has no line to name
        assert all(e["line"] for e in matching), matching
    if case.line is not None:
        assert any(e["line"] == case.line for e in matching), matching
    # CPU seconds bound what a value makes kiln compute (a huge power, a backtracking pattern) whatever else
    # the machine runs; the wall clock only that nothing waits on a value (a FIFO, a network lookup)
    cpu = usage.ru_utime + usage.ru_stime
    assert cpu < 5, f"{case.name} took {cpu:.1f} CPU seconds"
    assert seconds < 60, f"{case.name} took {seconds:.1f} s"
    assert usage.ru_maxrss < 300 * 1024, f"{case.name} peaked at {usage.ru_maxrss // 1024} MB"
    assert not LOOKUP_MARKER.exists()  # no lookup ran


@pytest.mark.parametrize("case", [c for c in CASES if "fifo" not in c.name], ids=lambda c: c.name)
def test_deploy_of_a_hostile_inventory_touches_nothing(tmp_path, case, no_network):
    root = materialize(tmp_path, case)
    result = CliRunner().invoke(main, ["deploy", "-i", str(root), "--dry-run"])
    assert result.exit_code == 2, result.output
    assert "nothing was touched" in result.output
    assert no_network == []


def test_the_vaulted_value_is_read_with_its_password(tmp_path):
    case = next(c for c in CASES if c.name == "vault_value_without_its_password")
    root = materialize(tmp_path, case)
    password = tmp_path / "vault-password"
    password.write_text(VAULT_PASSWORD + "\n")
    result = CliRunner().invoke(main, ["inventory", "validate", "-i", str(root), "--json",
                                       "--vault-password-file", str(password)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["summary"]["cluster"] == "small"


def test_only_the_inventorys_own_group_vars_are_read(tmp_path, monkeypatch):
    """A group_vars/ in the current directory is not this inventory's (Ansible would read it)."""
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("kiln_cluster_name: hijacked\n")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["inventory", "validate", "-i", str(INVENTORIES / "small"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["summary"]["cluster"] == "small"
