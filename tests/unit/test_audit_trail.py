"""ISOLATION_AUDIT_TRAIL (kiln/check/audit_trail.py): the probe's refused sudo, found on the log host in the
login host's own files by this run's token, passes once it is there; an entry without the token (an earlier
run's, one written with logger under another name), in another host's files, or written by another user who
saw the token (``logger -t sudo`` with the probe's words, their own sudo naming the probe in its command)
never stands in; after the wait it fails naming the probe and what to look at. The log host is a fake node
answering what read_command asks with journalctl's JSON lines, in the fields a live log host showed."""

from __future__ import annotations

from checks.node import Node, Result
from kiln import log_host
from kiln.check.audit_trail import AUDIT_WAIT, audit_trail
from tests.unit.test_log_host import _entry, cluster  # noqa: F401 (the fixture)

TOKEN = "kiln-0f3a9c"
PROBE = "kiln-probe-vision"
PROBE_UID = 2191
UIDS = {PROBE: PROBE_UID, "kiln-probe-language": 2192}


def _sudo(probe: str, token: str, **fields) -> str:
    """sudo's entry of ``probe``'s refused command, as journald recorded it on a live Debian 12 login host:
    ``_UID`` the invoking user's real UID (not root's), ``_COMM``/``_EXE`` sudo's."""
    fields = {"_UID": str(UIDS.get(probe, 1002)), **fields}
    return _entry(f"{probe} : user NOT in sudoers ; PWD=/root ; USER=root ; COMMAND=/usr/bin/true {token}",
                  SYSLOG_IDENTIFIER="sudo", _COMM="sudo", _EXE="/usr/bin/sudo", _TRANSPORT="syslog", **fields)


class LogHost:
    """Answers each read with the entries of ``rounds`` in turn (the last one again), per host's marker."""

    def __init__(self, rounds: list[dict[str, list[str]]]):
        self.rounds, self.asked = rounds, []

    def run(self, command: str) -> Result:
        self.asked.append(command)
        entries = self.rounds[min(len(self.asked), len(self.rounds)) - 1]
        return Result(0, "".join(f"{log_host.MARKER}{h}\n" + "".join(e + "\n" for e in es) for h, es in entries.items()))


def _trail(cluster, rounds, hosts=("ctl01",)):  # noqa: F811
    fake, now = LogHost(rounds), [0.0]
    found = audit_trail(Node("ctl01", fake.run), "ctl01", {h: (cluster.hosts[h], [PROBE]) for h in hosts}, UIDS, TOKEN,
                        since=1_796_475_900, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    return found, fake


def test_the_probes_refused_sudo_on_the_log_host_passes_once_it_arrives(cluster):  # noqa: F811
    found, fake = _trail(cluster, [{"ctl01": []}, {"ctl01": [_sudo(PROBE, TOKEN)]}])
    assert found["ctl01"].severity == "ok" and "reached the log host ctl01 in 2 s" in found["ctl01"].message
    assert len(fake.asked) == 2 and "SYSLOG_IDENTIFIER=sudo" in fake.asked[0]
    assert f"--file={log_host.REMOTE_DIR}/remote-{cluster.hosts['ctl01'].address}[.@]*journal*" in fake.asked[0]


def test_no_entry_of_this_run_fails_after_the_wait_and_nothing_else_stands_in(cluster):  # noqa: F811
    impostors = {"ctl01": [_sudo(PROBE, "kiln-earlier-run"),                      # an earlier run's token
                           _sudo("kiln-probe-language", TOKEN),                   # another probe's
                           _entry(f"{PROBE} : {TOKEN}", SYSLOG_IDENTIFIER="logger")],  # written with logger
                 "hgx001": [_sudo(PROBE, TOKEN)]}                                  # another host's files
    found, fake = _trail(cluster, [impostors])
    verdict = found["ctl01"]
    assert verdict.severity == "fail" and f"the sudo refused to {PROBE} here did not reach the log host ctl01 " \
        f"within {AUDIT_WAIT:.0f} s" in verdict.message and "kiln check --suite logs" in verdict.message
    assert len(fake.asked) == AUDIT_WAIT / 2 + 1  # asked again every 2 s until the wait was over


def test_another_user_who_saw_the_token_cannot_write_the_probes_entry(cluster):  # noqa: F811
    """The token is on the probe's sudo command line while sudo runs: a user of the login host (UID 1002) who
    read it there writes what looks like sudo's entry: with ``logger -t sudo`` (SYSLOG_IDENTIFIER sudo, the
    probe's exact words), from a program it named sudo (prctl), or with a sudo of its own whose command names
    the probe and the token. The kernel's UID of the sender, and sudo writing the invoking user first, keep
    each of them out."""
    words = f"{PROBE} : user NOT in sudoers ; PWD=/root ; USER=root ; COMMAND=/usr/bin/true {TOKEN}"
    forged = {"ctl01": [_entry(words, SYSLOG_IDENTIFIER="sudo", _COMM="logger", _UID="1002"),
                        _entry(words, SYSLOG_IDENTIFIER="sudo", _COMM="sudo", _EXE="/tmp/sudo", _UID="1002"),
                        _entry(f"eve : user NOT in sudoers ; PWD=/home/eve ; USER=root ; COMMAND=/usr/bin/true {PROBE} "
                               f": {TOKEN}", SYSLOG_IDENTIFIER="sudo", _COMM="sudo", _EXE="/usr/bin/sudo", _UID="1002")]}
    found, _ = _trail(cluster, [forged])
    assert found["ctl01"].severity == "fail", found["ctl01"]
    found, _ = _trail(cluster, [{"ctl01": forged["ctl01"] + [_sudo(PROBE, TOKEN)]}])
    assert found["ctl01"].severity == "ok", found["ctl01"]


def test_each_login_host_is_judged_by_its_own_files(cluster):  # noqa: F811
    found, _ = _trail(cluster, [{"ctl01": [_sudo(PROBE, TOKEN)], "hgx001": []}], hosts=("ctl01", "hgx001"))
    assert {h: v.severity for h, v in found.items()} == {"ctl01": "ok", "hgx001": "fail"}


def test_kiln_check_traces_only_the_probes_sudo_refused_for_want_of_a_rule(monkeypatch, cluster):  # noqa: F811
    """RemoteCheck's step after the isolation suite: a probe with a sudo rule (ISOLATION_SUDO failed: sudo
    refuses it for want of a password and logs nothing), one whose account is missing, and a host with no
    sudo are left out; the probes refused with no rule are traced on the log host, by this run's token."""
    import kiln.check.remote as remote
    from checks.isolation import NO_SUDO, no_rule
    from checks.verdict import Verdict
    asked = []
    monkeypatch.setattr(remote, "audit_trail", lambda node, name, tried, uids, token, since: asked.append(
        (name, {h: p for h, (_, p) in tried.items()}, token, uids)) or {h: Verdict("ISOLATION_AUDIT_TRAIL", "ok", "there")
                                                                    for h in tried})
    login = next(h for h in cluster.user_logins)
    probes = [t.probe().name for t in cluster.teams if t.probe_uid is not None]
    assert len(probes) >= 2
    with remote.RemoteCheck(cluster, [login], ["isolation"]) as checker:
        checker.started, checker.outputs = 0.0, {login.name: {}}
        checker.results = {login.name: [Verdict("ISOLATION_SUDO", "ok", no_rule(probes[0]), "isolation"),
                                        Verdict("ISOLATION_SUDO", "fail", f"sudo has a rule for {probes[1]} (ALL)",
                                                "isolation")]}
        checker._audit_trail()
        uids = {t.probe().name: t.probe_uid for t in cluster.teams if t.probe_uid is not None}
        assert asked == [("ctl01", {login.name: [probes[0]]}, checker.token, uids)]
        assert checker.results[login.name][-1].id == "ISOLATION_AUDIT_TRAIL"
        asked.clear()
        checker.results = {login.name: [Verdict("ISOLATION_SUDO", "ok", NO_SUDO, "isolation")]}
        checker._audit_trail()
        assert asked == []
