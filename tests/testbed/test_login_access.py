"""Who may log in where over SSH, live on the shared testbed (#46): the controller is its login host; with
language's ``login_hosts`` empty, alice (vision) logs in there by key and bob (language) is refused by
pam_access before a shell starts, while bob's jobs still run; SYSTEM_LOGIN_ACCESS passes, fails when
kiln's line is taken out of sshd's PAM stack (bob is then let in), and kiln deploy puts it back."""

from __future__ import annotations

import subprocess

import pytest

from kiln.testbed.inventory import TESTBED_TEAMS
from tests.testbed.slurm_helpers import (copy_inventory, deploy_json, job_state, ok, on, submit, suite_verdicts,
                                        wait_for)


def _system(inventory, node: str) -> dict[str, tuple[str, str]]:
    return suite_verdicts(inventory, "system", node)


def _ssh_as(tb, user: str, key) -> subprocess.CompletedProcess:
    """``ssh user@controller id -un`` with the user's own key (host key checked, as every testbed ssh)."""
    argv = tb.ssh_command(tb.controller, ["id -un"])
    # a connection of its own (never a master connection an earlier login left open: PAM runs once per login)
    argv[1:1] = ["-l", user, "-i", str(key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
                 "-o", "ControlMaster=no", "-o", "ControlPath=none"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


@pytest.mark.proves("base", "kiln check", tier="nspawn")
def test_a_team_kept_off_the_login_host_is_refused_there_its_jobs_still_run_and_the_check_sees_the_rules(slurm, tmp_path):
    tb = slurm
    teams = [dict(t, login_hosts=[]) if t["name"] == "language" else t for t in TESTBED_TEAMS]
    narrowed = copy_inventory(tb.inventory, tmp_path / "inv", {"kiln_teams": teams})
    key = tmp_path / "id_user"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    public = key.with_suffix(".pub").read_text().strip()
    for user in ("alice", "bob"):
        ok(tb, tb.controller, f"install -d -o {user} -g {user} -m 700 /home/{user}/.ssh && echo '{public}' > "
                              f"/home/{user}/.ssh/authorized_keys && chown {user}:{user} /home/{user}/.ssh/authorized_keys")
    try:
        rc, _, text = deploy_json(narrowed, "--roles", "base")
        assert rc == 0, text
        rules = ok(tb, tb.controller, "cat /etc/security/kiln-access.conf")
        assert "+ : (vision) : ALL" in rules and "(language)" not in rules and rules.rstrip().endswith("- : ALL : ALL")
        alice = _ssh_as(tb, "alice", key)
        assert alice.returncode == 0 and alice.stdout.strip() == "alice", alice.stderr
        before_bob = ok(tb, tb.controller, "date +%s").strip()
        bob = _ssh_as(tb, "bob", key)
        assert bob.returncode != 0 and "bob" not in bob.stdout, bob.stdout + bob.stderr
        # refused by kiln's rules, after his key; journald writes sshd's lines when it gets to them (seconds
        # behind on a loaded host: ci7 read the journal before bob's lines were in it)
        journal = [""]
        since_bob = f"journalctl -q --no-pager --since @{before_bob} _COMM=sshd"

        def refusal() -> bool:
            journal[0] = ok(tb, tb.controller, since_bob)
            return "pam_access" in journal[0] and "bob" in journal[0]
        try:
            wait_for(refusal, timeout=30, interval=2, what="sshd's journal naming pam_access and bob")
        except AssertionError as timed_out:
            raise AssertionError(f"{timed_out}\n{journal[0]}") from None
        job = submit(tb, tb.controller, "-N1 -o /dev/null --wrap 'true'", user="bob")  # jobs: not a login
        wait_for(lambda: job_state(tb, tb.controller, job) == "COMPLETED", timeout=90, what=f"bob's job {job}")
        found = _system(narrowed, tb.controller)
        assert found["SYSTEM_LOGIN_ACCESS"][0] == "ok", found["SYSTEM_LOGIN_ACCESS"]
        # kiln's line gone from sshd's stack: bob is let in, and the check names him
        ok(tb, tb.controller, "sed -i '/pam_access.so accessfile=\\/etc\\/security\\/kiln-access.conf/d' /etc/pam.d/sshd")
        assert _ssh_as(tb, "bob", key).returncode == 0
        severity, message = _system(narrowed, tb.controller)["SYSTEM_LOGIN_ACCESS"]
        assert severity == "fail" and "bob (language) is let in" in message, message
        rc, _, text = deploy_json(narrowed, "--roles", "base")
        assert rc == 0, text
        assert _ssh_as(tb, "bob", key).returncode != 0
        assert _system(narrowed, tb.controller)["SYSTEM_LOGIN_ACCESS"][0] == "ok"
        # the shared inventory (every team on every login host) lets bob in again
        rc, _, text = deploy_json(tb.inventory, "--roles", "base")
        assert rc == 0, text
        back = _ssh_as(tb, "bob", key)
        assert back.returncode == 0 and back.stdout.strip() == "bob", back.stderr
    finally:
        deploy_json(tb.inventory, "--roles", "base")
        for user in ("alice", "bob"):
            on(tb, tb.controller, f"rm -f /home/{user}/.ssh/authorized_keys")
