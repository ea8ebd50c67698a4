"""Reading an inventory runs nothing of the inventory's or of the working directory's: ansible-core is
configured by kiln alone (an ``ansible.cfg`` in the working directory, in the inventory, or ANSIBLE_*
plugin paths in the environment are not read), so a branch's own Python never runs during
``kiln inventory validate``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import INVENTORIES, REPO

PLUGIN = """
from ansible.plugins.vars import BaseVarsPlugin
open({marker!r}, "w").write("ran")


class VarsModule(BaseVarsPlugin):
    REQUIRES_ENABLED = False

    def get_vars(self, loader, path, entities, cache=True):
        return {{}}
"""


def _plant(tmp_path: Path) -> tuple[Path, Path, str]:
    """An inventory, a vars plugin that leaves a marker when it is imported, and the config naming it."""
    marker = tmp_path / "marker"
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "kiln_evil.py").write_text(PLUGIN.format(marker=str(marker)))
    config = f"[defaults]\nvars_plugins = {plugins}\nvars_plugins_enabled = host_group_vars,kiln_evil\n"
    inventory = tmp_path / "inv"
    shutil.copytree(INVENTORIES / "small", inventory)
    return inventory, marker, config


def _validate(inventory: Path, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    base["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-m", "kiln", "inventory", "validate", "-i", str(inventory)],
                          capture_output=True, text=True, cwd=cwd, env={**base, **(env or {})}, timeout=120)


def test_the_plugin_runs_when_ansible_reads_that_config(tmp_path):
    """The planted plugin is real: ansible-inventory run in that directory imports it."""
    inventory, marker, config = _plant(tmp_path)
    (tmp_path / "ansible.cfg").write_text(config)
    ansible = Path(sys.executable).parent / "ansible-inventory"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    out = subprocess.run([str(ansible), "-i", str(inventory / "hosts.yml"), "--list"], capture_output=True,
                         text=True, cwd=tmp_path, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert marker.exists()


@pytest.mark.parametrize("where", ["working directory", "inventory"])
def test_an_ansible_cfg_beside_the_inventory_is_not_read(tmp_path, where):
    inventory, marker, config = _plant(tmp_path)
    directory = tmp_path if where == "working directory" else inventory
    (directory / "ansible.cfg").write_text(config)
    out = _validate(inventory, directory)
    assert out.returncode == 0, out.stdout + out.stderr
    assert not marker.exists()


def test_ansible_settings_from_the_environment_are_not_read(tmp_path):
    inventory, marker, _ = _plant(tmp_path)
    (tmp_path / "elsewhere.cfg").write_text(f"[defaults]\nvars_plugins = {tmp_path / 'plugins'}\n")
    out = _validate(inventory, tmp_path, {"ANSIBLE_VARS_PLUGINS": str(tmp_path / "plugins"),
                                          "ANSIBLE_CONFIG": str(tmp_path / "elsewhere.cfg")})
    assert out.returncode == 0, out.stdout + out.stderr
    assert not marker.exists()
