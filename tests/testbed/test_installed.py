"""kiln as operators use it: a wheel built from this tree, installed into a fresh virtualenv outside
it, run from an empty directory holding only a copy of the example inventory. Validation, a testbed of
its own (up, a dry-run deploy against it, down) work without the source tree."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.testbed.conftest import require_testbed

NAME = "wheel"


def run(args: list[str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KILN_INVENTORY", "VIRTUAL_ENV")}
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    require_testbed()
    base = tmp_path_factory.mktemp("installed")
    wheels = base / "wheels"
    built = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(REPO)], base)
    assert built.returncode == 0, built.stdout + built.stderr
    wheel = next(wheels.glob("kiln-*.whl"))
    venv = base / "venv"
    assert run([sys.executable, "-m", "venv", str(venv)], base).returncode == 0
    pip = run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)], base)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    ops = base / "ops"  # an operator's repository: nothing of kiln's tree in it
    shutil.copytree(REPO / "inventory" / "example", ops / "inventory" / "example")
    yield venv / "bin" / "kiln", ops
    run([str(venv / "bin" / "kiln"), "testbed", "down", "--name", NAME], ops, timeout=300)


def test_the_installed_kiln_is_not_the_source_tree(installed):
    kiln, ops = installed
    where = run([str(kiln.with_name("python")), "-c", "import kiln, roles, templates, checks; "
                 "print(kiln.__file__, roles.__file__, templates.__file__, checks.__file__)"], ops)
    assert where.returncode == 0, where.stderr
    assert str(REPO) not in where.stdout and "site-packages" in where.stdout
    version = run([str(kiln), "--version"], ops)
    assert version.returncode == 0 and version.stdout.startswith("kiln, version ")


def test_validate_the_example_from_an_empty_operations_repository(installed):
    kiln, ops = installed
    out = run([str(kiln), "inventory", "validate", "-i", "inventory/example"], ops)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "valid. cluster hopper" in out.stdout


def test_testbed_up_dry_run_deploy_and_down_from_the_wheel(installed):
    kiln, ops = installed
    up = run([str(kiln), "testbed", "up", "--nodes", "1", "--name", NAME], ops)
    assert up.returncode == 0, up.stdout + up.stderr
    inventory = ops / "inventory" / f"testbed-{NAME}"
    assert (inventory / "hosts.yml").is_file()  # written under the current directory
    node = run([str(kiln), "testbed", "ssh", "--name", NAME, f"{NAME}01", "--", "nvidia-smi -L"], ops, timeout=120)
    assert node.returncode == 0 and "GPU 0" in node.stdout, node.stdout + node.stderr  # simulators shipped
    dry = run([str(kiln), "deploy", "-i", str(inventory), "--dry-run"], ops)
    assert dry.returncode == 3, dry.stdout + dry.stderr  # a fresh node: changes pending
    assert "dry run (nothing changed)" in dry.stdout, dry.stdout
    down = run([str(kiln), "testbed", "down", "--name", NAME], ops, timeout=300)
    assert down.returncode == 0, down.stdout + down.stderr
    assert f"kb-{NAME}" not in run(["ip", "-o", "link"], ops).stdout
