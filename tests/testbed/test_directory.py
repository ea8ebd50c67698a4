"""Directory identities live on the shared testbed (#46): a real slapd on the controller serves two teams
over StartTLS (tests/testbed/directory_server.py); kiln deploys SSSD on every node from kiln_directory.
carol (optics), from the directory only, logs in on the login host, runs a job on both compute nodes and
writes her team's project directory; dave (acoustics) can neither read nor write it, sees none of her
jobs and cannot reach a node her job runs on, nor can a local user without a job there (SSSD's PAM profile
on); a directory entry with uid 0 is no user on any node.
SYSTEM_DIRECTORY passes, and fails on a local account that hides carol and on sssd stopped."""

from __future__ import annotations

import json
import subprocess

import pytest

from kiln.testbed.inventory import TESTBED_TEAMS
from tests.testbed import directory_server
from tests.testbed.directory_server import Person
from tests.testbed.slurm_helpers import copy_inventory, deploy_json, job_state, kiln, ok, on, suite_verdicts, wait_for

TEAMS = {"optics": 3001, "acoustics": 3002}
PEOPLE = [Person("carol", 3101, "optics"), Person("dave", 3102, "acoustics"),
          Person("mallory", 0, "none")]  # uid 0 in the directory: below min_id, never a user of a node
PROBE = Person("probe-optics", 3191, "optics")  # optics' probe account: the site's, in no team's users
DIRECTORY_TEAMS = [{"name": team, "shares": 10, "directory": True, "qos": ["normal"],
                    **({"probe_user": PROBE.name} if team == PROBE.team else {}),
                    "users": [{"name": p.name} for p in PEOPLE if p.team == team]} for team in TEAMS]
PROJECTS = "/srv/kiln-shared/projects"
SSSD_PACKAGES_LEFT = "dpkg-query -W -f='${Package}\\n' | sort"


def _ssh_as(tb, user: str, key, node: str, command: str) -> subprocess.CompletedProcess:
    argv = tb.ssh_command(node, [command])
    argv[1:1] = ["-l", user, "-i", str(key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
                 "-o", "ControlMaster=no", "-o", "ControlPath=none"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def _directory_check(inventory) -> dict[str, tuple[str, str]]:
    out = kiln("check", "-i", str(inventory), "--suite", "system", "--json", "-", timeout=300)
    data = json.loads(out.stdout)
    return {node: next(((c["severity"], c["message"]) for c in found["checks"] if c["id"] == "SYSTEM_DIRECTORY"),
                       ("missing", ""))
            for node, found in data["nodes"].items()}


def _probe_verdicts(inventory, node: str) -> list[tuple[str, str, str]]:
    """The isolation suite's verdicts on ``node`` that name optics' probe account: (check, severity, message)."""
    out = kiln("check", "-i", str(inventory), "--suite", "isolation", "--json", "-", "--limit", node, timeout=300)
    checks = json.loads(out.stdout)["nodes"][node]["checks"]
    return [(c["id"], c["severity"], c["message"]) for c in checks if PROBE.name in c["message"]]


@pytest.mark.proves("base", "kiln check", "isolation", tier="nspawn")
def test_a_directory_user_logs_in_runs_on_both_nodes_and_writes_only_her_teams_directory(slurm, tmp_path):
    tb = slurm
    ctl, nodes = tb.controller, [tb.controller, *tb.computes]
    address = next(n.address for n in tb.recorded_nodes() if n.name == ctl)
    before = {n: ok(tb, n, SSSD_PACKAGES_LEFT).split() for n in nodes}
    key = tmp_path / "id_user"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    public = key.with_suffix(".pub").read_text().strip()
    inventory = tmp_path / "inv"
    try:
        directory_server.serve(tb, ctl, address, TEAMS, [*PEOPLE, PROBE], tmp_path / "directory-ca.pem")
        # the server itself refuses clear text: whatever reads it, reads it over TLS
        clear = on(tb, ctl, f"ldapsearch -x -H ldap://{ctl} -b {directory_server.BASE_DN} uid=carol uid")
        assert clear.returncode == 13 and "onfidentiality required" in clear.stdout + clear.stderr, clear
        copy_inventory(tb.inventory, inventory, {
            "kiln_teams": TESTBED_TEAMS + DIRECTORY_TEAMS,
            "kiln_directory": {"uris": [f"ldap://{ctl}"], "base_dn": directory_server.BASE_DN,
                               "ca_file": "directory-ca.pem"}})
        rc, _, text = deploy_json(inventory, "--roles", "base,storage,slurm")
        assert rc == 0, text
        for node in nodes:  # one uid for carol everywhere, from the directory; mallory (uid 0) nowhere
            assert ok(tb, node, "getent -s sss passwd carol").split(":")[2] == "3101"
            assert on(tb, node, "getent passwd mallory").returncode == 2
            assert "optics" in ok(tb, node, "id -nG carol").split()
        found = _directory_check(inventory)
        assert all(severity == "ok" and "carol 3101" in message for severity, message in found.values()), found
        assert ok(tb, ctl, f"stat -c '%g %a' {PROJECTS}/optics").split() == ["3001", "2770"]

        # optics' probe account is the directory's: the isolation suite runs as it on the login host (its refused
        # sudo found on the log host by the directory's uid)
        probed = _probe_verdicts(inventory, ctl)
        assert probed and all(severity == "ok" for _, severity, _ in probed), probed
        assert any(c == "ISOLATION_FILES" and m.startswith("probe-optics writes its team's 2 director(ies) and none of "
                                                           "the other") for c, _, m in probed), probed
        assert any(check == "ISOLATION_AUDIT_TRAIL" for check, _, _ in probed), probed
        ok(tb, ctl, f"chmod o+rx {PROJECTS}/acoustics")
        try:
            probed = _probe_verdicts(inventory, ctl)
        finally:
            ok(tb, ctl, f"chmod o-rx {PROJECTS}/acoustics")
        assert ("ISOLATION_FILES", "fail") in {(c, s) for c, s, m in probed if f"listed {PROJECTS}/acoustics" in m}, probed

        for user, node in [("carol", ctl), ("dave", ctl), ("dave", tb.computes[0])]:
            ok(tb, node, f"install -d -o {user} -g {user} -m 700 /home/{user} /home/{user}/.ssh && "
                         f"echo '{public}' > /home/{user}/.ssh/authorized_keys && chown {user} /home/{user}/.ssh/authorized_keys")
        login = _ssh_as(tb, "carol", key, ctl, "id -un; id -u")
        assert login.returncode == 0 and login.stdout.split() == ["carol", "3101"], login.stderr
        two = ",".join(tb.computes[:2])
        ran = _ssh_as(tb, "carol", key, ctl, f"srun -N2 -w {two} --chdir={PROJECTS}/optics sh -c 'hostname > "
                                              "$(hostname).txt; echo $(hostname) $(id -u)'")
        assert ran.returncode == 0, ran.stderr
        assert sorted(ran.stdout.split()) == sorted([*tb.computes[:2], "3101", "3101"]), ran.stdout
        owners = ok(tb, ctl, f"stat -c '%n %U %G' {PROJECTS}/optics/*.txt").splitlines()
        assert len(owners) == 2 and all(line.endswith(" carol optics") for line in owners), owners

        # dave, another team of the same directory: logs in, and gets none of optics'
        job = _ssh_as(tb, "carol", key, ctl, f"sbatch --parsable -N1 -w {tb.computes[0]} -o /dev/null --wrap 'sleep 120'")
        assert job.returncode == 0, job.stderr
        job_id = job.stdout.strip().split(";")[0]
        wait_for(lambda: job_state(tb, ctl, job_id) == "RUNNING", timeout=60, what=f"carol's job {job_id}")
        dave = _ssh_as(tb, "dave", key, ctl, f"id -un; ls {PROJECTS}/optics; touch {PROJECTS}/optics/dave.txt; "
                                             f"cat {PROJECTS}/optics/{tb.computes[0]}.txt; squeue -h -u carol -o %i; true")
        assert dave.stdout.split("\n")[0] == "dave", dave.stderr
        assert dave.stderr.count("Permission denied") == 3 and job_id not in dave.stdout, dave.stdout + dave.stderr
        adopt = _ssh_as(tb, "dave", key, tb.computes[0], "id -un")
        assert adopt.returncode != 0 and "dave" not in adopt.stdout, adopt.stdout + adopt.stderr  # pam_slurm_adopt
        # a local user (alice) with no job there is refused too: SSSD's profile begins common-account with
        # `account sufficient pam_localuser.so`, and kiln's pam_slurm_adopt line stands before that include
        idle = tb.computes[1]
        stack = ok(tb, idle, "grep -nE '^(account|@include)' /etc/pam.d/sshd /etc/pam.d/common-account")
        assert "pam_localuser.so" in stack and stack.index("pam_slurm_adopt.so") < stack.index("@include common-account"), stack
        local = on(tb, idle, "id -un", user="alice")
        assert local.returncode != 0 and "alice" not in local.stdout, local.stdout + local.stderr
        severity, message = suite_verdicts(inventory, "system", idle)["SYSTEM_LOGIN_ACCESS"]
        assert severity == "ok" and "kiln-probe-vision" in message and PROBE.name in message, message
        ok(tb, ctl, f"scancel {job_id}")

        # a local account that hides carol's, then sssd stopped: each fails the node it is on
        shadow, stopped = tb.computes[0], tb.computes[1]
        ok(tb, shadow, "echo 'carol:x:4000:4000::/home/carol:/bin/sh' >> /etc/passwd")
        ok(tb, stopped, "systemctl stop sssd")
        found = _directory_check(inventory)
        assert found[shadow][0] == "fail" and "carol (optics) is a local account here (uid 4000, the directory's 3101)" \
            in found[shadow][1], found[shadow]
        assert found[stopped][0] == "fail" and "sssd is inactive" in found[stopped][1], found[stopped]
        assert found[ctl][0] == "ok", found[ctl]
        ok(tb, shadow, "sed -i '/^carol:x:4000:/d' /etc/passwd")
        rc, _, text = deploy_json(inventory, "--roles", "base")  # starts sssd again
        assert rc == 0, text
        found = _directory_check(inventory)
        assert all(severity == "ok" for severity, _ in found.values()), found
    finally:
        on(tb, ctl, "scancel -u carol; scancel -u dave; sacctmgr -i delete user carol,dave; "
                    "sacctmgr -i delete account optics,acoustics; true")
        for node in nodes:
            now = on(tb, node, SSSD_PACKAGES_LEFT).stdout.split()
            added = [p for p in now if p not in before[node] and p not in directory_server.PACKAGES]
            on(tb, node, "systemctl stop sssd 2>/dev/null; " +
               (f"DEBIAN_FRONTEND=noninteractive apt-get purge -y -q {' '.join(added)} >/dev/null 2>&1; " if added else "") +
               "rm -rf /etc/sssd /var/lib/sss /home/carol /home/dave; "
               "sed -i '/pam_mkhomedir.so/d' /etc/pam.d/sshd; sed -i -E '/^(passwd|group):/s/ sss$//' /etc/nsswitch.conf; "
               f"rm -rf {PROJECTS}/optics {PROJECTS}/acoustics /srv/kiln-shared/scratch/optics "
               "/srv/kiln-shared/scratch/acoustics; true", timeout=300)
        directory_server.stop(tb, ctl)
