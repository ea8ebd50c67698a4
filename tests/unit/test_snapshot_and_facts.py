"""kiln's facts are pure parsers, tested on output recorded from testbed nodes (tests/recorded/)."""

from __future__ import annotations

import json

import pytest

from roles.facts import IsContainer
from roles.slurm_accounting import parse_sacctmgr
from roles.snapshot import NodeSnapshot, SnapshotError, Watched, parse_snapshot, snapshot_command
from tests.conftest import REPO

RECORDED = REPO / "tests" / "recorded"


def recorded(name: str) -> dict:
    return json.loads((RECORDED / name).read_text())


def test_deployed_compute_node():
    rec = recorded("snapshot-compute-debian12.json")
    snap = parse_snapshot(rec["output"].splitlines())
    assert snap.packages["slurmd"] == "22.05.8-4+deb12u3"
    assert {"slurmd", "slurm-client", "libpam-slurm-adopt"} <= snap.held
    assert snap.users["slurm"].uid == 980 and snap.users["munge"].uid == 981
    assert snap.users["alice"].uid == 2101 and "alice" in snap.groups["vision"][1]
    key = snap.files["/etc/munge/munge.key"]
    assert (key.kind, key.mode, key.user, key.group) == ("regular file", "400", "munge", "munge")
    assert len(key.sha1) == 40
    assert snap.files["/var/log/slurm"].kind == "directory"
    assert snap.unit("slurmd.service").active == "active"
    assert snap.unit("slurmd.service").enabled == "enabled"
    assert snap.lines == {0}  # the pam_slurm_adopt line is there
    # every path and unit the deploy asked about is answered (paths only when they exist)
    assert set(snap.files) == set(rec["paths"])
    assert set(snap.units) == set(rec["units"])


def test_deployed_controller_node():
    snap = parse_snapshot(recorded("snapshot-controller-debian12.json")["output"].splitlines())
    assert snap.unit("slurmctld.service").active == "active"
    assert snap.unit("mariadb.service").active == "active"
    assert snap.files["/etc/slurm/slurmdbd.conf"].mode == "600"
    assert "slurmctld" in snap.held and "slurmdbd" in snap.held


def test_fresh_node_has_nothing_yet():
    rec = recorded("snapshot-fresh-compute-debian12.json")
    snap = parse_snapshot(rec["output"].splitlines())
    assert "slurmd" not in snap.packages and not snap.held
    assert "slurm" not in snap.users
    assert snap.unit("slurmd.service").load == "not-found"
    assert snap.unit("slurmd.service").active == "inactive"
    assert snap.lines == set()
    assert "/etc/slurm/slurm.conf" not in snap.files
    assert snap.files["/etc/hosts"].kind == "regular file"  # the testbed wrote it


@pytest.mark.parametrize("cut", [0.2, 0.5, 0.9])
def test_truncated_output_is_an_error_not_an_empty_node(cut):
    lines = recorded("snapshot-compute-debian12.json")["output"].splitlines()
    with pytest.raises(SnapshotError, match="could not be read completely"):
        parse_snapshot(lines[: int(len(lines) * cut)])


def test_garbage_lines_are_ignored_not_misread():
    snap = parse_snapshot(["@@kiln packages", "garbage", "ii |ok|1.0", "@@kiln passwd", "x:y", "@@kiln files",
                           "/a|regular file|644", "@@kiln lines", "nope", "@@kiln end"])
    assert snap.packages == {"ok": "1.0"} and snap.users == {} and snap.files == {} and snap.lines == set()


def test_rpm_and_versionlock_formats():
    snap = parse_snapshot(["@@kiln packages", "ii |slurm-ohpc|23.11.10-320.ohpc.3.2", "@@kiln held",
                           "slurm-ohpc-0:23.11.10-320.ohpc.3.2.*", "@@kiln end"])
    assert snap.packages == {"slurm-ohpc": "23.11.10-320.ohpc.3.2"}
    assert snap.held == {"slurm-ohpc"}


def test_command_quotes_paths_and_asks_for_each_unit():
    cmd = snapshot_command(Watched(paths=("/etc/a b",), units=("slurmd.service",), lines=(("/etc/pam.d/sshd", "^account x"),)))
    assert "'/etc/a b'" in cmd and "slurmd.service" in cmd and "grep -qE '^account x' /etc/pam.d/sshd" in cmd


def test_loaded_kernel_modules_and_their_versions():
    """What the nvidia_driver role reads for "reboot required": the command, run here, and its parse."""
    import subprocess
    cmd = snapshot_command(Watched(modules=("nvidia", "kiln_no_such_module")))
    out = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "kiln_no_such_module" not in parse_snapshot(out.stdout.splitlines()).modules
    snap = parse_snapshot(["@@kiln modules", "nvidia|535.261.03", "nouveau|", "@@kiln end"])
    assert snap.modules == {"nvidia": "535.261.03", "nouveau": ""}


def test_default_snapshot_is_empty():
    assert NodeSnapshot().unit("x.service").load == "not-found"


SACCT = ["REACHABLE kilntest", "kilntest", "other", "---", "root||1|||", "root|root|1|||normal",
         "vision||60|gres/gpu=2|high,normal|normal", "vision|alice|1||high,normal|normal", "language||40|||",
         "mallory||99|"]  # the last: not the six fields kiln asked for, so left out


def test_sacctmgr_state():
    state = parse_sacctmgr(SACCT)
    assert state.reachable and state.cluster_registered
    assert state.account("vision").fairshare == "60" and state.account("vision").grp_tres == "gres/gpu=2"
    assert state.users("vision") == {"alice"} and state.account("nosuch") is None
    assert state.account("vision").qos == "high,normal" and state.account("mallory") is None


@pytest.mark.parametrize("output", [[], ["sacctmgr: error: Problem talking to the database"], ["REACHABLE x"]])
def test_sacctmgr_unreachable_or_partial(output):
    state = parse_sacctmgr(output)
    assert not state.cluster_registered and not state.associations


def test_is_container():
    fact = IsContainer()
    assert fact.process(["systemd-nspawn"]) is True
    assert fact.process(["none"]) is False and fact.process([]) is False
