"""ISOLATION_AUDIT_TRAIL (kiln/check/audit_trail.py): the probe's refused sudo, found on the log host in the
login host's own files by this run's token, passes once it is there; an entry without the token (an earlier
run's, one written with logger under another name), or in another host's files, never stands in; after
the wait it fails naming the probe and what to look at. The log host is a fake node answering what
read_command asks with journalctl's JSON lines."""

from __future__ import annotations

from checks.node import Node, Result
from kiln import log_host
from kiln.check.audit_trail import AUDIT_WAIT, audit_trail
from tests.unit.test_log_host import _entry, cluster  # noqa: F401 (the fixture)

TOKEN = "kiln-0f3a9c"
PROBE = "kiln-probe-vision"


def _sudo(probe: str, token: str, **fields) -> str:
    return _entry(f"{probe} : a password is required ; TTY=unknown ; PWD=/ ; USER=root ; COMMAND=/usr/bin/true {token}",
                  SYSLOG_IDENTIFIER="sudo", _COMM="sudo", **fields)


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
    found = audit_trail(Node("ctl01", fake.run), "ctl01", {h: (cluster.hosts[h], [PROBE]) for h in hosts}, TOKEN,
                        since=1_796_475_900, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    return found, fake


def test_the_probes_refused_sudo_on_the_log_host_passes_once_it_arrives(cluster):  # noqa: F811
    found, fake = _trail(cluster, [{"ctl01": []}, {"ctl01": [_sudo(PROBE, TOKEN)]}])
    assert found["ctl01"].severity == "ok" and "reached the log host ctl01 in 2 s" in found["ctl01"].message
    assert len(fake.asked) == 2 and "SYSLOG_IDENTIFIER=sudo" in fake.asked[0]
    assert f"--file={log_host.REMOTE_DIR}/remote-{cluster.hosts['ctl01'].address}[.@]*journal" in fake.asked[0]


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
    monkeypatch.setattr(remote, "audit_trail", lambda node, name, tried, token, since: asked.append(
        (name, {h: p for h, (_, p) in tried.items()}, token)) or {h: Verdict("ISOLATION_AUDIT_TRAIL", "ok", "there")
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
        assert asked == [("ctl01", {login.name: [probes[0]]}, checker.token)]
        assert checker.results[login.name][-1].id == "ISOLATION_AUDIT_TRAIL"
        asked.clear()
        checker.results = {login.name: [Verdict("ISOLATION_SUDO", "ok", NO_SUDO, "isolation")]}
        checker._audit_trail()
        assert asked == []
