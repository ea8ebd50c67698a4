"""Inventories written for other tools (tests/inventories/foreign/), with kiln's groups and settings
added, validate with no error about variables kiln does not read: their templates, facts, lookups and
vault values are left alone. Hosts and groups agree with Ansible's own ``ansible-inventory``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kiln.cli.main import main
from kiln.inventory.loader import load_raw
from tests.conftest import INVENTORIES

FOREIGN = INVENTORIES / "foreign"
PASSWORD = FOREIGN / "vault-password"
MARKER = Path("/tmp/kiln-foreign-lookup")


def validate(path: Path, *extra: str) -> tuple[int, dict]:
    result = CliRunner().invoke(main, ["inventory", "validate", "-i", str(path), "--json", *extra])
    return result.exit_code, json.loads(result.output)


@pytest.mark.parametrize("name, hosts, ignored", [
    ("deepops_shaped", 3, ["mgmt01", "mgmt02", "mgmt03"]),
    ("appliance_shaped", 6, []),
])
def test_a_foreign_inventory_validates_with_its_vault(name, hosts, ignored, no_network, monkeypatch):
    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE", raising=False)
    MARKER.unlink(missing_ok=True)
    code, report = validate(FOREIGN / name, "--vault-password-file", str(PASSWORD))
    assert code == 0, report["errors"]
    assert report["summary"]["hosts"] == hosts and report["summary"]["ignored"] == ignored
    assert not MARKER.exists()  # another tool's lookup('pipe') was never run
    assert no_network == []


def test_an_inline_vault_value_kiln_does_not_read_needs_no_password(monkeypatch):
    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE", raising=False)
    code, report = validate(FOREIGN / "deepops_shaped")
    assert code == 0, report["errors"]


def test_a_whole_vault_file_without_its_password_is_one_clear_error(monkeypatch):
    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE", raising=False)
    code, report = validate(FOREIGN / "appliance_shaped")
    assert code == 2
    assert report["errors"] == [{"file": "group_vars/all/secrets.yml", "key": "-", "line": None, "message":
                                 "the whole file is encrypted with Ansible Vault: give its password with "
                                 "--vault-password-file or ANSIBLE_VAULT_PASSWORD_FILE"}]
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(PASSWORD))  # as Ansible reads it
    assert validate(FOREIGN / "appliance_shaped")[0] == 0


def _ansible_groups(path: Path) -> dict[str, set[str]]:
    """group -> every host in it (children included), as ``ansible-inventory --list`` says."""
    tool = Path(sys.executable).with_name("ansible-inventory")
    out = subprocess.run([str(tool), "-i", str(path), "--list", "--export", "--vault-password-file", str(PASSWORD)],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "ANSIBLE_INVENTORY_ENABLED": "yaml,ini"})
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)

    def members(group: str) -> set[str]:
        body = data.get(group, {})
        found = set(body.get("hosts", []))
        for child in body.get("children", []):
            found |= members(child)
        return found

    return {g: members(g) for g in data if g not in ("_meta", "all")}


@pytest.mark.skipif(not Path(sys.executable).with_name("ansible-inventory").exists(),
                    reason="ansible-inventory (ansible-core) is not installed beside this python")
@pytest.mark.parametrize("name", ["deepops_shaped", "appliance_shaped"])
def test_hosts_and_groups_agree_with_ansible_inventory(name, monkeypatch):
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(PASSWORD))
    raw = load_raw(FOREIGN / name)
    assert raw.errors == []
    theirs = {g: hosts for g, hosts in _ansible_groups(FOREIGN / name).items() if hosts or g in raw.groups}
    ours = {g: set(hosts) for g, hosts in raw.groups.items() if hosts or g in theirs}
    ours.pop("ungrouped", None), theirs.pop("ungrouped", None)
    assert ours == theirs
    assert set(raw.hosts) == set().union(*theirs.values())


def _small(tmp_path: Path) -> Path:
    import shutil
    root = tmp_path / "inv"
    shutil.copytree(INVENTORIES / "small", root)
    return root


def test_group_vars_of_a_group_no_hosts_file_names_are_not_read(tmp_path, monkeypatch):
    """Ansible never reads them: a vault file there (another site's secrets) is no error, and a broken
    kiln value there is not kiln's to report."""
    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE", raising=False)
    root = _small(tmp_path)
    (root / "group_vars" / "kube_masters.yml").write_text("$ANSIBLE_VAULT;1.1;AES256\n6331\n")
    (root / "group_vars" / "old_group.yml").write_text("kiln_gpu_count: many\n")
    code, report = validate(root)
    assert code == 0, report["errors"]


def test_a_group_vars_directory_hides_the_file_of_the_same_name_as_in_ansible(tmp_path):
    """group_vars/cpu_b/ and group_vars/cpu_b.yml: Ansible reads the directory only, and kiln reads
    what Ansible reads (the file's misspelt key is not reported, the directory's values are used)."""
    root = _small(tmp_path)
    text = (root / "group_vars" / "cpu_b.yml").read_text()
    (root / "group_vars" / "cpu_b").mkdir()
    (root / "group_vars" / "cpu_b" / "main.yml").write_text(text.replace("kiln_cpus: 16", "kiln_cpus: 24"))
    (root / "group_vars" / "cpu_b.yml").write_text(text + "kiln_gpu_modle: a100\n")
    code, report = validate(root)
    assert code == 0, report["errors"]
    from kiln.inventory import load_cluster
    assert load_cluster(root).hosts["cpu01"].cpus == 24
    ansible = Path(sys.executable).parent / "ansible-inventory"
    out = subprocess.run([str(ansible), "-i", str(root), "--host", "cpu01"], capture_output=True, text=True,
                         env={k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}, timeout=120)
    assert json.loads(out.stdout)["kiln_cpus"] == 24 and "kiln_gpu_modle" not in json.loads(out.stdout)


def test_a_wrong_vault_password_is_reported_against_the_file_it_does_not_open(tmp_path, monkeypatch):
    from ansible.parsing.vault import VaultLib, VaultSecret
    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE", raising=False)
    root = _small(tmp_path)
    path = root / "group_vars" / "cpu_b.yml"
    path.write_bytes(VaultLib([("default", VaultSecret(b"right-one"))]).encrypt(path.read_text()))
    (tmp_path / "right").write_text("right-one\n")
    (tmp_path / "wrong").write_text("wrong-one\n")
    code, report = validate(root, "--vault-password-file", str(tmp_path / "wrong"))
    assert code == 2
    assert [(e["file"], e["key"]) for e in report["errors"]] == [("group_vars/cpu_b.yml", "-")], report["errors"]
    assert "does not decrypt this file" in report["errors"][0]["message"]
    code, report = validate(root, "--vault-password-file", str(tmp_path / "right"))
    assert code == 0, report["errors"]
