"""kiln's account lines in sshd's PAM stack come before anything that can end the stack early.

With SSSD on, Debian's common-account begins with ``account sufficient pam_localuser.so``: a local user
who passes it skips every account line after ``@include common-account``, so pam_access (who logs in
where) and pam_slurm_adopt (no job, no login) appended at the end of /etc/pam.d/sshd were never reached
by local users. The plan's own commands run here on the file each OS ships; the snapshot's own test
(present, and before the anchor) runs on the result.
"""

from __future__ import annotations

import subprocess

import pytest

from roles.snapshot import Watched, parse_snapshot, snapshot_command
from tests.conftest import REPO
from tests.plan.facts import fresh
from tests.plan.harness import plan_host
from tests.plan.test_roles_plan import cluster_for

ACCESS = "account    required     pam_access.so accessfile=/etc/security/kiln-access.conf"
ADOPT = "account    required     pam_slurm_adopt.so"
PAM_OPS = ("base: pam_access for sshd (kiln's rules)", "slurm: pam_slurm_adopt for sshd")
SHIPPED = {
    "debian12": (REPO / "tests" / "recorded" / "pam-sshd-debian12.txt").read_text(),
    # Rocky 9's openssh-server (8.7p1): the account stack hands over to password-auth, which authselect's
    # sssd profile fills with `account sufficient pam_localuser.so` too
    "rocky9": ("#%PAM-1.0\nauth       substack     password-auth\nauth       include      postlogin\n"
               "account    required     pam_sepermit.so\naccount    required     pam_nologin.so\n"
               "account    include      password-auth\npassword   include      password-auth\n"
               "session    required     pam_selinux.so close\nsession    required     pam_loginuid.so\n"
               "session    include      password-auth\nsession    include      postlogin\n"),
}
FIRST_HANDOVER = {"debian12": "@include common-account", "rocky9": "account    include      password-auth"}


def _pam_plan(os, snapshot, monkeypatch):
    plan, ctx = plan_host(cluster_for(os), "gpu01", os, snapshot, monkeypatch, with_context=True)
    return {op: cmds for op, cmds in plan if op in PAM_OPS}, ctx


def _run(commands: list[str], path) -> None:
    for command in commands:
        subprocess.run(["sh", "-c", command.replace("/etc/pam.d/sshd", str(path))], check=True, timeout=30)


def _found(ctx, path) -> set[int]:
    """The snapshot's own answer on ``path``: which of the node's watched lines are there and in place."""
    watched = Watched(lines=tuple((str(path) if p == "/etc/pam.d/sshd" else p, r) for p, r in ctx.lines),
                      anchors=tuple(sorted(ctx.line_anchors.items())))
    out = subprocess.run(["sh", "-c", snapshot_command(watched)], capture_output=True, text=True, timeout=60)
    return parse_snapshot(out.stdout.splitlines()).lines & set(ctx.line_anchors)


@pytest.mark.parametrize("os", ["debian12", "rocky9"])
def test_kilns_account_lines_go_before_the_stacks_first_handover_and_stay_there(os, tmp_path, monkeypatch):
    ops, ctx = _pam_plan(os, fresh(os), monkeypatch)
    assert set(ops) == set(PAM_OPS) and len(ctx.line_anchors) == 2
    sshd = tmp_path / "sshd"
    sshd.write_text(SHIPPED[os])
    for op in PAM_OPS:
        _run(ops[op], sshd)
    lines = sshd.read_text().splitlines()
    at = lines.index(FIRST_HANDOVER[os])
    assert lines[at - 2:at] == [ACCESS, ADOPT], lines
    assert [line for line in lines if line not in (ACCESS, ADOPT)] == SHIPPED[os].splitlines()  # nothing else moved
    # the snapshot finds both in place: the next deploy does nothing
    snapshot = fresh(os)
    snapshot.lines |= _found(ctx, sshd)
    assert snapshot.lines >= set(ctx.line_anchors)
    again, _ = _pam_plan(os, snapshot, monkeypatch)
    assert again == {op: [] for op in PAM_OPS}


def test_lines_left_after_common_account_by_an_earlier_deploy_are_moved_before_it(tmp_path, monkeypatch):
    """What kiln wrote until now (appended at the end): present, so a plain grep called it done; the
    snapshot says it is not in place, and the deploy moves it, once, keeping one copy."""
    ops, ctx = _pam_plan("debian12", fresh("debian12"), monkeypatch)
    sshd = tmp_path / "sshd"
    sshd.write_text(SHIPPED["debian12"] + ACCESS + "\n" + ADOPT + "\n")
    assert _found(ctx, sshd) == set()
    for op in PAM_OPS:
        _run(ops[op], sshd)
    lines = sshd.read_text().splitlines()
    assert lines.count(ACCESS) == 1 and lines.count(ADOPT) == 1
    at = lines.index("@include common-account")
    assert lines[at - 2:at] == [ACCESS, ADOPT]
    assert _found(ctx, sshd) == set(ctx.line_anchors)


def test_a_sites_own_sufficient_line_and_a_file_without_any_handover_are_anchors_too(tmp_path, monkeypatch):
    ops, ctx = _pam_plan("debian12", fresh("debian12"), monkeypatch)
    sshd = tmp_path / "sshd"
    sshd.write_text("account sufficient pam_succeed_if.so uid < 1000\n# account sufficient commented out\n")
    _run(ops[PAM_OPS[1]], sshd)
    assert sshd.read_text().splitlines()[0] == ADOPT
    bare = tmp_path / "bare"
    bare.write_text("auth required pam_unix.so\n")
    _run(ops[PAM_OPS[1]], bare)
    assert bare.read_text().splitlines() == ["auth required pam_unix.so", ADOPT]  # no anchor: at the end
