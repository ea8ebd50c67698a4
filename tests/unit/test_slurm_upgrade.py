"""A Slurm upgrade in a rollout (kiln/patch/slurm_upgrade.py): the versions a cluster runs read from
Slurm, the move to the pin refused outside SchedMD's window before anything is touched, and the plan in
SchedMD's order (backup, slurmdbd, slurmctld, slurmd batches, client commands)."""

from __future__ import annotations

import pytest

from checks.parsers.scontrol import read_version
from kiln.patch.slurm_upgrade import Running, backup_commands, is_upgrade, node_versions, refusal, service_order


@pytest.mark.parametrize("text, version", [("slurm 22.05.8\n", "22.05.8"), ("slurm-wlm 23.11.4\n", "23.11.4"),
                                           ("slurm 24.11.5\n", "24.11.5")])
def test_scontrol_version_is_read(text, version):
    assert read_version(text) == version


@pytest.mark.parametrize("text", ["", "scontrol: command not found", "slurm 22.05.8\nslurm 23.02.1\n", "slurm x"])
def test_anything_else_from_scontrol_version_is_refused(text):
    with pytest.raises(ValueError, match="not a Slurm version kiln reads"):
        read_version(text)


def test_each_slurmds_version_is_read_and_a_node_never_registered_has_none():
    text = ("NodeName=gpu01 Arch=x86_64 CoresPerSocket=1 Version=22.05.8 State=IDLE\n"
            "NodeName=gpu02 Arch=x86_64 CoresPerSocket=1 Version=(null) State=DOWN*\n"
            "NodeName=gpu03 Arch=x86_64 Version=22.05.9 Reason=Version=99.99.9 by ops [root@x]\n")
    assert node_versions(text) == {"gpu01": "22.05.8", "gpu03": "22.05.9"}


@pytest.mark.parametrize("controller, slurmd, target, why", [
    ("22.05.8", {"n1": "22.05.8"}, "24.11.5-1", "22.05 -> 24.11 skips 3 major release(s)"),
    ("23.11.4", {"n1": "23.11.4"}, "22.05.8-4+deb12u3", "downgrade"),
    ("22.05.8", {"n1": "23.02.1"}, "23.02.7-1", "n1's slurmd runs 23.02.1, newer than slurmctld's 22.05.8"),
    ("23.02.7", {"n1": "21.08.5"}, "24.05.1-1", "n1's slurmd runs 21.08.5: Slurm 21.08 -> 24.05 skips"),
    ("22.05.8", {}, "bookworm", "'bookworm' is not a Slurm version kiln can read"),
])
def test_a_move_outside_schedmds_rules_is_refused_with_its_reason(controller, slurmd, target, why):
    assert why in (refusal(Running(controller, slurmd), target) or "")


@pytest.mark.parametrize("controller, target, upgrade", [
    ("22.05.8", "22.05.8-4+deb12u3", False), ("22.05.8", "22.05.9-1", False),  # a patch release: a plain rollout
    ("22.05.8", "23.02.7-1", True), ("23.11.4", "24.11.5-1", True), ("22.05.8", "23.11.4-1.2ubuntu5", True)])
def test_a_new_major_is_an_upgrade_and_a_patch_release_is_not(controller, target, upgrade):
    assert refusal(Running(controller, {"n1": controller}), target) is None
    assert is_upgrade(Running(controller, {}), target) is upgrade


def test_slurmdbd_hosts_go_first_then_controllers_and_login_nodes_after_the_compute_nodes():
    first, after = service_order(["login1", "ctl2", "ctl1", "db1"], dbd_hosts=["db1"], controllers=["ctl1", "ctl2"])
    assert first == ["db1", "ctl1", "ctl2"] and after == ["login1"]
    first, after = service_order(["ctl1", "login1"], dbd_hosts=["ctl1"], controllers=["ctl1"])
    assert first == ["ctl1"] and after == ["login1"]


def test_the_backup_stops_slurmdbd_for_a_consistent_dump_and_starts_it_again_even_if_the_dump_fails():
    lines = backup_commands("r1", dbd=True, controller=True)
    assert lines[0] == "install -d -m 700 /var/lib/kiln/backup/slurm-r1"
    assert lines[1] == ("systemctl stop slurmdbd && { mysqldump --single-transaction --databases slurm_acct_db > "
                        "/var/lib/kiln/backup/slurm-r1/slurm_acct_db.sql; r=$?; systemctl start slurmdbd; [ $r = 0 ]; }")
    assert lines[2] == ("tar -C / -czf /var/lib/kiln/backup/slurm-r1/slurmctld-state.tar.gz var/lib/slurm/slurmctld "
                        "etc/slurm")
    assert backup_commands("r1", dbd=False, controller=True)[1].startswith("tar ")


def test_the_rollout_backs_up_then_patches_dbd_and_controller_then_each_slurmd_then_login_nodes(tmp_path, monkeypatch):
    from dataclasses import replace
    from types import SimpleNamespace

    from checks.node import Result
    from kiln.inventory import load_cluster
    from kiln.inventory.model import Secrets
    from kiln.patch import journal as journals
    from kiln.patch import rollout as rollout_module
    from kiln.patch.rollout import Options, Rollout
    from tests.conftest import INVENTORIES
    from tests.unit.test_rollout import FakeSlurm, Recorder
    monkeypatch.setattr(rollout_module, "POLL", 0.01)
    monkeypatch.setattr(rollout_module, "SETTLE_WAIT", 0.0)
    cluster = load_cluster(INVENTORIES / "plan")
    cluster = replace(cluster, versions=dict(cluster.versions, slurm="23.02.7-1"))
    compute = [h.name for h in cluster.compute]
    ran: list[tuple[str, str]] = []

    class Host:
        def __init__(self, name):
            self.name = name

        def run(self, command):
            ran.append((self.name, command))
            if command == "scontrol version":
                return Result(0, "slurm 22.05.8\n")
            return Result(0, "".join(f"NodeName={n} Version=22.05.8\n" for n in compute)) \
                if command.startswith("scontrol show node") else Result(0, "")
    recorder, timeouts = Recorder(), []

    def configure(cluster, secrets, names, role_names):
        assert role_names == ["slurm"] and sorted(names) == sorted(cluster.hosts)
        timeouts.append((cluster.setting("slurm_slurmd_timeout"), list(recorder.applied)))
        return [SimpleNamespace(name=n, status="changed") for n in names]
    checker = SimpleNamespace(close=lambda: None, node=lambda host: Host(host.name))
    rollout = Rollout(cluster, Secrets(b"k" * 32, "p"), journals.Journal(tmp_path / "r.jsonl"),
                      Options(roles=["slurm"], reboot="never"), progress=lambda line: None, slurm=FakeSlurm(compute),
                      checker=checker, apply=recorder.apply, check=recorder.check, configure=configure)
    outcome = rollout.run(rollout.start(list(cluster.hosts)))
    assert outcome.stopped is None and set(outcome.results) == set(cluster.hosts)
    assert recorder.applied == ["ctl1", *compute, "login1"]
    # SlurmdTimeout raised before any host was upgraded, the cluster's own restored after the last one
    assert timeouts == [(3600, []), (cluster.setting("slurm_slurmd_timeout"), ["ctl1", *compute, "login1"])]
    backups = [(h, c) for h, c in ran if "mysqldump" in c]
    assert [h for h, _ in backups] == ["ctl1"] and "slurmctld-state.tar.gz" in backups[0][1]
    assert ran.index(backups[0]) > ran.index(("ctl1", "scontrol version"))


@pytest.mark.parametrize("pin, ok", [("22.05.8-4+deb12u3", True), ("1:24.11.5-1", True), ("latest", False),
                                     ("16.05.1-1", False), ("22.05", False)])
def test_a_slurm_pin_kiln_cannot_place_in_schedmds_releases_is_refused_at_validation(tmp_path, pin, ok):
    import shutil

    from kiln.inventory import validate
    from tests.conftest import INVENTORIES
    root = tmp_path / "inv"
    shutil.copytree(INVENTORIES / "small", root)
    versions = root / "group_vars" / "all" / "versions.yml"
    versions.write_text(versions.read_text().replace('slurm: "22.05.8-4+deb12u3"', f'slurm: "{pin}"'))
    _, errors = validate(root)
    hits = [e for e in errors if e.key == "kiln_versions.slurm"]
    assert (not hits) if ok else (hits and hits[0].file.endswith("versions.yml") and
                                  "not a Slurm release kiln can upgrade" in hits[0].message), errors
