"""The isolation suite (checks/isolation.py) passes where a team's probe account reaches nothing of
others', and FAILS on each way through: another user's jobs, a readable secret, Slurm administration, a
missing probe account. Answers are what squeue, runuser and scontrol print (Slurm 22.05, seen on the
testbed); tests/testbed/test_isolation.py shows the same on live nodes."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from checks.isolation import run
from checks.node import Node, Result
from checks.suites import run_suites, suite_commands
from tests.slurm_framing import record

PROBE = "kiln-probe-vision"
TEAM_DIRECTORIES = [{"path": "/shared/projects/vision", "team": "vision"},
                    {"path": "/shared/projects/language", "team": "language"}]
EXPECT = {"isolation": {"probes": [PROBE], "probe_teams": {PROBE: "vision"},
                        "secrets": ["/etc/munge/munge.key", "/etc/slurm/slurmdbd.conf"], "address": "10.0.0.1",
                        "team_directories": TEAM_DIRECTORIES, "team_parents": ["/shared/projects"],
                        "homes": ["/home/alice", "/home/bob"],
                        "shared_roots": ["/shared"],
                        "monitoring_endpoints": ["http://10.0.0.1:9100/metrics", "http://10.0.0.9:9090/api/v1/query?query=up"]}}
SEP = re.compile(r"JobID:(\|k[0-9a-f]{16}\|)")
# sshare -a -P and sacctmgr show association on the testbed (Slurm 22.05.8), as root; under PrivateData the
# probe account (no association of its own) gets sshare's header line and nothing from sacctmgr
SSHARE_HEADER = "Account|User|RawShares|NormShares|RawUsage|EffectvUsage|FairShare\n"
SSHARE = SSHARE_HEADER + ("root|||0.000000|0|1.000000|\n root|root|1|0.009901|0|0.000000|1.000000\n"
                          " language||40|0.396040|0|0.000000|\n  language|bob|1|1.000000|0|0.000000|0.000000\n"
                          " vision||60|0.594059|0|0.000000|\n  vision|alice|1|1.000000|0|0.000000|0.000000\n")
ASSOCIATIONS = "root|\nroot|root\nlanguage|\nlanguage|bob\nvision|\nvision|alice\n"
# sacctmgr -i add account as the probe (refused), and as an operator (taken)
ACCOUNT_DENIED = ("", "sacctmgr: error: Access/permission denied\n Problem getting accounts from database.  Contact your admin.\n")
ACCOUNT_DENIED_24_11 = ("", " error: Only admins/operators/coordinators can add accounts\n")  # Debian 13's Slurm 24.11
ACCOUNT_ADDED = (" Adding Account(s)\n  kiln-isolation-kiln-probe-vision\n Settings\n  Description     = Account Name\n"
                 "  Organization    = Parent/Account Name\n Associations\n  A = kiln-isola C = kexp      \n")


def squeue_answer(command: str, jobs: list[tuple[str, str]]) -> Result:
    """squeue -O JobID:SEP,UserName:SEP,JobID: in the framed form of tests/slurm_framing.py."""
    sep = SEP.search(command).group(1)
    return Result(0, "".join(record(job, user, job, sep=sep) for job, user in jobs))


class Cluster:
    """A login host's answers: the queue, what the probe sees of it, what it can read, Slurm's verdict on
    its scontrol reconfigure."""

    def __init__(self, queue=(("41", "alice"), ("42", "bob")), leaks=False, readable=(), admin=False, account=True,
                 ssh="publickey", files="", sudo=(1, "sudo: a password is required\n", f"User {PROBE} is not allowed to run sudo on login01.\n"),
                 http=("401", "401"), usage_leaks=False, associations_leak=False, account_add=None, homes="",
                 leftover=False, writes="/shared/projects/vision\n"):
        self.files, self.sudo, self.http = files, sudo, http
        self.writes = writes
        self.usage_leaks, self.associations_leak, self.homes = usage_leaks, associations_leak, homes
        self.account_add = account_add or ((0, ACCOUNT_ADDED, "") if admin else (1, *ACCOUNT_DENIED))
        self.accounts = {f"kiln-isolation-{PROBE}"} if leftover else set()  # what slurmdbd holds
        self.queue, self.leaks, self.readable, self.admin, self.account = list(queue), leaks, readable, admin, account
        self.ssh = ssh
        self.asked: list[str] = []

    def answer(self, command: str) -> Result:
        self.asked.append(command)
        as_probe = command.startswith(f"runuser -u {PROBE} -- ")
        if command == f"id -u {PROBE}":
            return Result(0, "2191\n") if self.account else Result(1, "", f"id: '{PROBE}': no such user\n")
        if "squeue" in command:
            seen = self.queue if (self.leaks or not as_probe) else [j for j in self.queue if j[1] == PROBE]
            return squeue_answer(command, seen)
        if "sshare -a -P" in command:
            return Result(0, SSHARE if (self.usage_leaks or not as_probe) else SSHARE_HEADER)
        if "sacctmgr -n -P show association" in command:
            return Result(0, ASSOCIATIONS if (self.associations_leak or not as_probe) else "")
        if command == f"runuser -u {PROBE} -- sacctmgr -i add account kiln-isolation-{PROBE}":
            if self.account_add[0] == 0:
                self.accounts.add(f"kiln-isolation-{PROBE}")
            return Result(*self.account_add)
        if command == f"sacctmgr -n -P show account kiln-isolation-{PROBE} format=Account":
            return Result(0, "".join(f"{a}\n" for a in self.accounts))
        if command == f"sacctmgr -i delete account where name=kiln-isolation-{PROBE}":
            assert self.accounts, "deleted an account slurmdbd does not hold"
            self.accounts.clear()
            return Result(0, f" Deleting accounts...\n  kiln-isolation-{PROBE}\n")
        if "scontrol create reservation" in command and as_probe:
            return Result(0, f"Reservation created: kiln-isolation-{PROBE}\n") if self.admin else \
                Result(1, "", "Error creating the reservation: Invalid user id\n")
        if command == f"scontrol delete ReservationName=kiln-isolation-{PROBE}":
            assert self.admin, "deleted a reservation the probe never got"
            return Result(0, "")
        if "BatchMode=yes" in command and as_probe:
            assert command.endswith(" sh 10.0.0.1") and "StrictHostKeyChecking=yes" in command
            return Result(255, self.ssh if "Permission" in self.ssh or "\n" in self.ssh else
                          f"{PROBE}@10.0.0.1: Permission denied ({self.ssh}).\n")
        if "head -c1" in command and as_probe:
            return Result(0, "".join(f"{p}\n" for p in self.readable))
        if "urllib.request" in command and as_probe:
            urls = EXPECT["isolation"]["monitoring_endpoints"]
            assert command.endswith(" '' " + " ".join(shlex.quote(u) for u in urls)), command
            return Result(0, "".join(f"{c} {u}\n" for c, u in zip(self.http, urls) if c))
        if "sudo -S -p " in command and as_probe:
            return Result(self.sudo[0], self.sudo[1])
        if command == f"env LC_ALL=C sudo -l -U {PROBE}":
            return Result(0, self.sudo[2])
        if "-writable" in command and as_probe:
            assert " -o -path /home -o -path /shared -o " in command and "; find /shared -maxdepth 1 " in command
            return Result(0, self.writes)
        if "kiln-isolation-$$" in command and as_probe:
            if command.endswith(" sh other:/home/alice other:/home/bob"):
                return Result(0, self.homes)
            return Result(0, self.files)
        raise AssertionError(f"unexpected command {command!r}")


def verdicts(cluster: Cluster) -> dict[str, tuple[str, str]]:
    return {v.id: (v.severity, v.message) for v in run(Node("login01", cluster.answer), EXPECT)}


def test_a_probe_that_reaches_nothing_passes_every_probe():
    found = verdicts(Cluster())
    assert {k: s for k, (s, _) in found.items()} == {"ISOLATION_JOBS": "ok", "ISOLATION_SECRETS": "ok",
                                                     "ISOLATION_USAGE": "ok", "ISOLATION_ACCOUNTING": "ok",
                                                     "ISOLATION_HOMES": "ok", "ISOLATION_WRITES": "ok",
                                                     "ISOLATION_SLURM_ADMIN": "ok", "ISOLATION_SSH_PASSWORD": "ok",
                                                     "ISOLATION_FILES": "ok", "ISOLATION_SUDO": "ok",
                                                     "ISOLATION_MONITORING": "ok"}
    assert found["ISOLATION_FILES"][1] == f"{PROBE} writes its team's 1 director(ies) and none of the other 2"
    assert found["ISOLATION_HOMES"][1] == f"{PROBE} lists and writes none of the 2 users' homes"
    assert found["ISOLATION_WRITES"][1] == (f"{PROBE} can write nothing outside its own space on this host's local "
                                            "filesystems and the top of its 1 shared one(s)")  # its own team's is its own
    cluster = Cluster()
    verdicts(cluster)
    assert [c for c in cluster.asked if "kiln-isolation-$$" in c][0].endswith(
        " sh own:/shared/projects/vision other:/shared/projects/language beside:/shared/projects")
    assert "none of the 2 job(s) of other users" in found["ISOLATION_JOBS"][1]
    assert found["ISOLATION_USAGE"][1] == f"sshare shows {PROBE} none of the 3 usage line(s) of other users"
    assert found["ISOLATION_ACCOUNTING"][1] == f"sacctmgr shows {PROBE} none of the 3 association(s) of other users"
    assert found["ISOLATION_SLURM_ADMIN"][1] == f"Slurm refuses an operator's changes (a reservation, a new account) " \
                                                f"from {PROBE}"


def test_every_probe_runs_as_the_probe_account_and_root_only_counts():
    cluster = Cluster()
    verdicts(cluster)
    probes = [c for c in cluster.asked if any(w in c.lower() for w in ("squeue", "reservation", "head -c1", "sshare",
                                                                       "sacctmgr"))]
    as_root = [c for c in probes if not c.startswith(f"runuser -u {PROBE} -- ")]
    # root reads each listing once, and asks slurmdbd whether the probe's account is there (before and after)
    assert sorted(c.split()[0] for c in as_root) == ["sacctmgr"] * 3 + ["squeue", "sshare"], as_root
    assert all(" show " in c for c in as_root if c.startswith("sacctmgr")), as_root


def test_a_reservation_the_probe_got_is_deleted_again():
    cluster = Cluster(admin=True)
    found = verdicts(cluster)
    created = next(i for i, c in enumerate(cluster.asked) if "scontrol create reservation" in c)
    assert cluster.asked[created + 1] == f"scontrol delete ReservationName=kiln-isolation-{PROBE}"
    added = next(i for i, c in enumerate(cluster.asked) if "add account" in c)
    assert cluster.asked[added + 2] == f"sacctmgr -i delete account where name=kiln-isolation-{PROBE}"
    assert not cluster.accounts
    assert "Slurm took a reservation (slurmctld) and a new account (slurmdbd) from" in found["ISOLATION_SLURM_ADMIN"][1]


@pytest.mark.parametrize("refusal", [ACCOUNT_DENIED, ACCOUNT_DENIED_24_11, ("", "")])
def test_whether_slurmdbd_took_the_account_is_asked_of_slurmdbd_not_read_off_its_words(refusal):
    """Slurm 22.05 and 24.11 word the refusal differently (seen on the testbed, Debian 12 and 13): whatever
    sacctmgr says to the probe, root asks slurmdbd whether the account is there."""
    found = verdicts(Cluster(account_add=(1, *refusal)))
    assert found["ISOLATION_SLURM_ADMIN"][0] == "ok", found


def test_an_account_an_earlier_run_left_is_deleted_before_the_probe_asks():
    """sacctmgr prints "Nothing new added." (exit 1) for an account that exists: left by an earlier run it would
    read as taken; root deletes it first, and the probe's own attempt decides."""
    cluster = Cluster(leftover=True)
    found = verdicts(cluster)
    assert found["ISOLATION_SLURM_ADMIN"][0] == "ok" and not cluster.accounts, found
    added = next(i for i, c in enumerate(cluster.asked) if "add account" in c)
    assert f"sacctmgr -i delete account where name=kiln-isolation-{PROBE}" in cluster.asked[:added]


@pytest.mark.parametrize("fault, check, says", [
    (dict(leaks=True), "ISOLATION_JOBS", "squeue shows kiln-probe-vision 2 job(s) of alice, bob: set PrivateData=jobs"),
    (dict(usage_leaks=True), "ISOLATION_USAGE", "sshare shows kiln-probe-vision 3 usage line(s) of alice, bob, root: "
     "set PrivateData=usage"),
    (dict(associations_leak=True), "ISOLATION_ACCOUNTING", "sacctmgr shows kiln-probe-vision 3 association(s) of "
     "alice, bob, root: set PrivateData=users in slurmdbd.conf"),
    (dict(account_add=(0, ACCOUNT_ADDED, "")), "ISOLATION_SLURM_ADMIN", "Slurm took a new account (slurmdbd) from "
     "kiln-probe-vision"),
    (dict(readable=["/etc/munge/munge.key"]), "ISOLATION_SECRETS", "can read /etc/munge/munge.key"),
    (dict(admin=True), "ISOLATION_SLURM_ADMIN", "it is an operator or administrator"),
    (dict(ssh=f"{PROBE}@10.0.0.1: Permission denied (publickey,password).\n"), "ISOLATION_SSH_PASSWORD",
     "takes password, publickey"),
    (dict(ssh=f"{PROBE}@10.0.0.1: Permission denied (publickey,keyboard-interactive).\n"), "ISOLATION_SSH_PASSWORD",
     "takes keyboard-interactive, publickey"),
    (dict(ssh="ssh: connect to host 10.0.0.1 port 22: Connection refused\n"), "ISOLATION_SSH_PASSWORD",
     "did not list its methods"),
    (dict(ssh="Host key verification failed.\n"), "ISOLATION_SSH_PASSWORD", "did not list its methods"),
    # a pre-authentication banner holding a look-alike line: only ssh's own last line counts
    (dict(ssh=f"Permission denied (publickey).\n{PROBE}@10.0.0.1: Permission denied (publickey,password).\n"),
     "ISOLATION_SSH_PASSWORD", "takes password, publickey"),
    (dict(sudo=(0, "", "")), "ISOLATION_SUDO", "ran a command as root for kiln-probe-vision without a password"),
    (dict(sudo=(1, "sudo: a password is required\n", f"User {PROBE} may run the following commands on login01:\n"
                "    (ALL : ALL) ALL\n")), "ISOLATION_SUDO", "sudo has a rule for kiln-probe-vision ((ALL : ALL) ALL)"),
    (dict(sudo=(1, "sudo: a password is required\n", "sudo: unable to read /etc/sudoers\n")), "ISOLATION_SUDO",
     "not one kiln reads"),
    (dict(http=("200", "401")), "ISOLATION_MONITORING", "http://10.0.0.1:9100/metrics (200)"),
    (dict(http=("401", "404")), "ISOLATION_MONITORING", "query=up (404)"),
    (dict(http=("401", "")), "ISOLATION_MONITORING", "could not ask http://10.0.0.9:9090"),
    (dict(files="other-listed /shared/projects/language\n"), "ISOLATION_FILES", "listed /shared/projects/language"),
    (dict(files="other-wrote /shared/projects/language\n"), "ISOLATION_FILES", "created a file in /shared/projects/language"),
    (dict(files="own-unwritable /shared/projects/vision\n"), "ISOLATION_FILES", "cannot create a file in its own team's"),
    (dict(files="beside-wrote /shared/projects\n"), "ISOLATION_FILES", "beside the team directories"),
    (dict(homes="other-listed /home/bob\n"), "ISOLATION_HOMES", "kiln-probe-vision: listed /home/bob: chmod o-rwx each"),
    (dict(homes="other-wrote /home/alice\nother-listed /home/alice\n"), "ISOLATION_HOMES",
     "created a file in /home/alice; listed /home/alice"),
    # a home named like a finding, or a finding for a path it was not asked about, adds nothing
    (dict(homes="other-listed /home/carol\n", files="other-listed /shared/projects/language\n"), "ISOLATION_FILES",
     "listed /shared/projects/language"),
    (dict(ssh=f"Permission denied (publickey).\nssh: connect to host 10.0.0.1 port 22: Connection timed out\n"),
     "ISOLATION_SSH_PASSWORD", "did not list its methods"),
])
def test_each_probe_fails_when_its_protection_is_gone(fault, check, says):
    found = verdicts(Cluster(**fault))
    assert found[check][0] == "fail" and says in found[check][1], found[check]
    assert [k for k, (s, _) in found.items() if s == "fail"] == [check]


def test_a_missing_probe_account_fails_and_probes_nothing_as_root_in_its_place():
    cluster = Cluster(account=False)
    found = verdicts(cluster)
    assert found == {"ISOLATION_PROBE_ACCOUNT": ("fail", f"no account {PROBE} on this host: kiln deploy creates it "
                                                          "(the team's probe_uid; a directory team's probe_user is "
                                                          "the directory's, read through SSSD)")}
    assert cluster.asked == [f"id -u {PROBE}"]


def test_an_empty_queue_passes_and_says_there_was_nothing_to_see():
    found = verdicts(Cluster(queue=[]))
    assert found["ISOLATION_JOBS"][0] == "ok" and "nothing kiln-probe-vision could see" in found["ISOLATION_JOBS"][1]


def test_a_readable_path_the_suite_did_not_ask_about_is_not_taken_from_the_answer():
    """Only the paths the suite asked about count: a line the probe's shell printed otherwise is no secret."""
    found = verdicts(Cluster(readable=["/etc/hostname"]))
    assert found["ISOLATION_SECRETS"][0] == "ok"


def test_an_unreadable_squeue_answer_fails_never_passes():
    class Garbled(Cluster):
        def answer(self, command):
            if "squeue" in command and command.startswith("runuser"):
                return Result(0, "41 |x| alice\n")
            return super().answer(command)
    found = verdicts(Garbled())
    assert found["ISOLATION_JOBS"][0] == "fail" and "cannot read whole" in found["ISOLATION_JOBS"][1]


def test_hosts_without_probes_run_nothing_and_the_suite_is_registered():
    assert run(Node("gpu01", lambda c: pytest.fail(c)), {"isolation": {}}) == []
    assert suite_commands(EXPECT, ["isolation"]) == [f"id -u {PROBE}"]
    assert {v.suite for v in run_suites(Node("login01", Cluster().answer), EXPECT, ["isolation"])} == {"isolation"}


def test_secret_paths_are_quoted_as_one_word_each():
    """A path is data: a space or a quote in it stays inside its own word of the shell line."""
    import subprocess

    from checks.isolation import readable_secrets
    odd = ["/etc/a b", "/etc/x';touch /tmp/kiln-isolation-pwned;'", "$(id)"]
    out = subprocess.run(["/bin/sh", "-c", readable_secrets(odd).replace('head -c1 -- "$p" >/dev/null 2>&1 && ', "")],
                         capture_output=True, text=True)
    assert out.stdout.split("\n")[:-1] == odd and out.returncode == 0


def test_every_isolation_probe_has_its_row_in_the_zone_and_control_table():
    from checks.reference import CHECKS
    from tests.conftest import REPO
    table = (REPO / "docs" / "isolation.md").read_text()
    for check_id in (c for c in CHECKS if c.startswith("ISOLATION_")):
        assert f"| `{check_id}` |" in table, check_id


def test_roots_view_of_the_queue_is_read_once_for_all_probes():
    second = "kiln-probe-language"
    cluster = Cluster()
    answer = cluster.answer
    cluster.answer = lambda c: answer(c.replace(second, PROBE)) if second in c else answer(c)
    run(Node("login01", cluster.answer), {"isolation": {**EXPECT["isolation"], "probes": [PROBE, second]}})
    assert sum(1 for c in cluster.asked if c.startswith("squeue ")) == 1


def test_a_finding_names_a_directory_it_was_given_and_of_its_kind():
    """A line for a path or kind the suite did not ask about (a directory named like a finding, own
    listed) adds nothing."""
    from checks.isolation import read_file_findings
    targets = [("own", "/p/vision"), ("other", "/p/language")]
    assert read_file_findings("other-listed /p/vision\nown-wrote /p/vision\nother-listed /p/x\n"
                              "other-listed /p/language\n", targets) == ["listed /p/language"]


def test_no_team_directories_no_files_probe():
    expect = {"isolation": {k: v for k, v in EXPECT["isolation"].items() if not k.startswith("team_")}}
    found = {v.id for v in run(Node("login01", Cluster().answer), expect)}
    assert "ISOLATION_FILES" not in found and "ISOLATION_JOBS" in found


@pytest.fixture
def directories():
    """A team's, another team's and their parent, owned by the account the probe script runs as (nobody
    when the tests run as root: root passes every permission check)."""
    import os
    import pwd
    import shutil
    import tempfile
    top = Path(tempfile.mkdtemp(prefix="kiln-isolation-"))
    top.chmod(0o755)
    parent, own, other = top / "projects", top / "projects" / "vision", top / "projects" / "language"
    for d, mode in ((parent, 0o555), (own, 0o770), (other, 0o070)):
        d.mkdir()
        d.chmod(mode)
        if os.geteuid() == 0:
            nobody = pwd.getpwnam("nobody")
            os.chown(d, nobody.pw_uid, nobody.pw_gid)
    yield parent, own, other
    shutil.rmtree(top)


def run_files_script(targets):
    """checks/isolation.py's probe script, run for real: as nobody when root (runuser), else as this user."""
    import os
    import subprocess

    from checks.isolation import files_command
    line = files_command("nobody", targets)
    argv = ["/bin/sh", "-c", line] if os.geteuid() == 0 else shlex.split(line)[4:]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("fault, expected", [
    (None, []),
    (("other", 0o777), ["created a file in {other}", "listed {other}"]),
    (("other", 0o570), ["listed {other}"]),
    (("own", 0o550), ["cannot create a file in its own team's {own}"]),
    (("parent", 0o777), ["created a file in {parent}, beside the team directories"]),
])
def test_the_files_probe_script_on_real_directories(directories, fault, expected):
    """The shell the probe runs, on real directories and modes: each fault it targets shows, nothing else;
    what it created it removed."""
    from checks.isolation import read_file_findings
    parent, own, other = directories
    if fault:
        {"own": own, "other": other, "parent": parent}[fault[0]].chmod(fault[1])
    targets = [("own", str(own)), ("other", str(other)), ("beside", str(parent))]
    out = run_files_script(targets)
    assert out.returncode == 0, out.stderr
    assert read_file_findings(out.stdout, targets) == [e.format(own=own, other=other, parent=parent) for e in expected]
    for d in (own, other, parent):
        d.chmod(0o777)
    assert not [f for d in (own, other, parent) for f in d.iterdir() if f.is_file()]


def test_a_host_without_sudo_passes_the_sudo_probe():
    found = verdicts(Cluster(sudo=(0, "kiln-no-sudo\n", "")))
    assert found["ISOLATION_SUDO"] == ("ok", "no sudo on this host")


def test_a_listener_out_of_reach_passes_and_is_named_as_such():
    found = verdicts(Cluster(http=("401", "unreachable")))
    assert found["ISOLATION_MONITORING"] == ("ok", f"1 monitoring listener(s) refused {PROBE} without credentials; "
                                                   "1 not reachable from here")


def test_the_http_probe_script_reads_real_answers():
    """The probe's Python, against a real server on this machine: 401 from one with basic auth, 200 from one
    without, unreachable from a closed port."""
    import subprocess
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from checks.isolation import _HTTP

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(401 if self.path.startswith("/locked") else 200)
            self.end_headers()

        def log_message(self, *args):
            pass
    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    closed = HTTPServer(("127.0.0.1", 0), Handler)
    closed_port = closed.server_address[1]
    closed.server_close()
    try:
        urls = [f"http://127.0.0.1:{port}/locked", f"http://127.0.0.1:{port}/open", f"http://127.0.0.1:{closed_port}/x"]
        out = subprocess.run(["python3", "-c", _HTTP, "", *urls], capture_output=True, text=True, timeout=60)
    finally:
        server.shutdown()
    assert out.stdout.splitlines() == [f"401 {urls[0]}", f"200 {urls[1]}", f"unreachable {urls[2]}"], out


def test_a_listener_showing_a_certificate_the_cluster_ca_did_not_sign_fails_the_monitoring_probe():
    found = verdicts(Cluster(http=("untrusted", "401")))
    status, message = found["ISOLATION_MONITORING"]
    assert status == "fail" and "the cluster CA did not sign" in message, found


def test_a_probe_the_inventory_lets_through_warns_naming_the_setting_and_others_still_fail():
    """allowed (from the inventory: kiln/check/expectations.py): the jobs probe that gets through warns, not
    fails, and says which setting turned its protection off; a secret read beside it still fails; where the
    protection holds anyway the probe passes."""
    allowed = {"ISOLATION_JOBS": "kiln_slurm_private_data leaves out jobs"}
    expect = {"isolation": {**EXPECT["isolation"], "allowed": allowed}}
    found = {v.id: (v.severity, v.message)
             for v in run(Node("login01", Cluster(leaks=True, readable=["/etc/munge/munge.key"]).answer), expect)}
    assert found["ISOLATION_JOBS"][0] == "warn"
    assert found["ISOLATION_JOBS"][1].endswith("(the inventory turns this protection off: kiln_slurm_private_data "
                                               "leaves out jobs; reported, not failed)")
    assert found["ISOLATION_SECRETS"][0] == "fail"
    held = {v.id: v.severity for v in run(Node("login01", Cluster().answer), expect)}
    assert held["ISOLATION_JOBS"] == "ok"


def test_a_path_outside_its_own_space_the_probe_may_write_fails_and_so_does_a_name_it_cannot_pass():
    found = verdicts(Cluster(writes="/shared/projects/vision\n/var/local\n/usr/local/bin\n"))
    assert found["ISOLATION_WRITES"][0] == "fail" and found["ISOLATION_WRITES"][1].startswith(
        f"{PROBE} can write /var/local; /usr/local/bin, outside its own space"), found["ISOLATION_WRITES"]
    odd = verdicts(Cluster(writes="kiln-odd-name\n"))["ISOLATION_WRITES"]
    assert odd[0] == "fail" and "1 path(s) with a control character in the name" in odd[1], odd
    # its shell's other words are no path
    assert verdicts(Cluster(writes="find: '/root': Permission denied\n"))["ISOLATION_WRITES"][0] == "ok"


def test_the_walk_finds_what_its_user_may_write_and_no_sticky_directorys_contents(tmp_path):
    """The probe's own find expression, run here on a tree made here (its walk of / moved to the tree), as
    ``nobody`` where the test runs as root (root may write anything), else as the test's own user."""
    import os
    import shutil
    import subprocess
    import tempfile

    from checks.isolation import writable_command
    root = os.geteuid() == 0
    top = Path(tempfile.mkdtemp(dir="/var/tmp")) if root else tmp_path
    dirs = (("etc", 0o555), ("opt", 0o777), ("tmp", 0o1777), ("var/local", 0o2775), ("var", 0o555), ("home", 0o755),
            ("home/alice", 0o777), ("odd\nname", 0o777))
    try:
        for d, _ in dirs:
            (top / d).mkdir(parents=True, exist_ok=True)
        for f, mode in (("etc/conf", 0o444), ("etc/open", 0o666), ("tmp/theirs", 0o666), ("opt/run.sh", 0o775)):
            (top / f).write_text("x")
            os.chmod(top / f, mode)
        for d, mode in dirs:
            os.chmod(top / d, mode)
        os.chmod(top, 0o755)
        script = shlex.split(writable_command("nobody", []))[-1].replace(
            "find / -xdev", f"find {top} -xdev").replace("-path /home ", f"-path {top}/home ")
        argv = ["runuser", "-u", "nobody", "--", "sh", "-c", script] if root else ["sh", "-c", script]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout.split("\n")
    finally:
        for d in ("etc", "var", "tmp"):
            os.chmod(top / d, 0o755)
        if root:
            shutil.rmtree(top)
    found = sorted(p.removeprefix(str(top)) for p in out if p.startswith(str(top) + "/"))
    # nobody: only what others may write; the tree's owner: also its own files, not the read-only directory
    assert found == (["/etc/open", "/opt"] if root else ["/etc/open", "/opt", "/opt/run.sh", "/var/local"]), out
    assert out.count("kiln-odd-name") == 1  # the 0777 directory with a newline in its name
