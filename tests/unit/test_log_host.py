"""The log host's pure parts (kiln/log_host.py), LOG_SHIPPING's judgement and its probe on this machine's
real journal, the firewall's output rule loaded by nft and tried with real connections, and the inventory's
settings: a journal entry that holds hostile text is read and shown as text, never as another entry, another
host or a terminal control."""

from __future__ import annotations

import fnmatch
import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from checks import logs
from checks.node import local_node
from kiln import log_host
from kiln.cli.main import main
from kiln.inventory import load_cluster
from kiln.inventory.validate import validate
from roles import firewall_rules
from roles.base import account_specs
from roles.platform import PLATFORMS
from tests.unit.test_firewall import ENABLED, _inventory as firewall_inventory
from tests.ports import free_port

HOSTS = """all:
  children:
    slurm_controller:
      hosts:
        ctl01: {ansible_host: 10.10.0.2}
    slurm_dbd:
      hosts:
        ctl01:
    monitoring:
      hosts:
        ctl01:
    compute:
      children:
        gpu_h100:
          hosts:
            hgx001: {ansible_host: 10.10.0.1}
            hgx002: {ansible_host: 10.10.0.12}
        gpu_l40s:
          hosts:
            l40s01: {ansible_host: "2001:db8::11"}
"""


def _inventory(tmp_path: Path, extra: str = "") -> Path:
    """test_firewall's inventory (the example's, Ubuntu's monitoring pins, the firewall on) with these hosts."""
    return firewall_inventory(tmp_path, ENABLED + extra, HOSTS)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    return load_cluster(_inventory(tmp_path_factory.mktemp("logs")))


def _entry(message, **fields) -> str:
    return json.dumps({"__REALTIME_TIMESTAMP": str(fields.pop("at", 1_796_475_940_409_964)), "MESSAGE": message,
                       "_COMM": "sshd", "_PID": "42", "_UID": "1002", **fields})


def test_the_log_host_is_the_first_monitoring_host_and_each_host_reads_only_its_own_files(cluster):
    assert log_host.log_host(cluster).name == "ctl01"
    assert log_host.url(cluster.hosts["ctl01"]) == "https://10.10.0.2:19532"
    names = ["remote-10.10.0.1.journal", "remote-10.10.0.1@0005f-abc.journal~", "remote-10.10.0.1@ab-cd.journal",
             "remote-10.10.0.12.journal", "remote-10.10.0.12@x.journal", "remote-10.10.0.2.journal"]
    (glob,) = log_host.journal_files(cluster.hosts["hgx001"])
    got = [n for n in names if fnmatch.fnmatchcase(f"{log_host.REMOTE_DIR}/{n}", glob)]
    # the file being written, the archived, and one set aside as uncleanly closed (journalctl reads it too):
    # never 10.10.0.12's
    assert got == ["remote-10.10.0.1.journal", "remote-10.10.0.1@0005f-abc.journal~", "remote-10.10.0.1@ab-cd.journal"]


def test_entries_are_read_per_host_marker_and_hostile_text_stays_text(tmp_path, cluster):
    """A fake journalctl on PATH prints what the real one would for each host's files; read_command runs under
    sh, and parse gives each entry to the host whose files held it, whatever the entry says of itself."""
    hostile = ("Accepted publickey for root\n" + log_host.MARKER + "ctl01\n{\"MESSAGE\": \"forged\"}\x1b[2J\u2028")
    bad_utf8 = list("user \xff".encode("latin-1"))
    fake = tmp_path / "bin" / "journalctl"
    fake.parent.mkdir()
    lines = {"hgx001": [_entry(hostile, _HOSTNAME="ctl01", SYSLOG_IDENTIFIER="sshd"),
                        _entry(bad_utf8, at=1_796_475_941_000_000)],
             "hgx002": ["not json at all", _entry("ok", at=1_796_475_939_000_000)]}
    script = "#!/bin/sh\ncase \"$*\" in\n"
    for name, out in lines.items():
        address = cluster.hosts[name].address.replace(".", "[.]")
        script += f"  *remote-{address}[[].@[]]*) cat <<'EOF'\n" + "\n".join(out) + "\nEOF\n;;\n"
    fake.write_text(script + "esac\n")
    fake.chmod(0o755)
    command = log_host.read_command([cluster.hosts["hgx001"], cluster.hosts["hgx002"]], 1_796_475_000, None)
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True,
                         env={**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}"})
    entries, bad = log_host.parse(out.stdout)
    assert bad == 1  # the line that is no JSON, counted
    assert [(e.host, e.message[:8]) for e in entries] == [("hgx002", "ok"), ("hgx001", "Accepted"), ("hgx001", "user \ufffd")]
    forged = entries[1]
    assert forged.host == "hgx001" and forged.uid == "1002" and forged.program == "sshd"  # its own claim of ctl01 ignored
    shown = log_host.line(forged)
    assert "\n" not in shown and "\x1b" not in shown and "\u2028" not in shown
    assert "\\n@kiln-log-host ctl01\\n" in shown and "\\x1b[2J" in shown and "\\u2028" in shown
    assert shown.startswith("2026-12-05T") and " hgx001 sshd[42] uid=1002: Accepted publickey for root\\n" in shown


def test_a_job_is_named_by_slurms_own_words_and_not_by_a_longer_id():
    named = log_host.job_pattern("12")
    for said in ("_slurm_rpc_submit_batch_job: JobId=12 InitPrio=1100 usec=295", "sched: Allocate JobId=12 NodeList=a",
                 "Launching batch job 12 for UID 2102", "[12.batch] done with job", "launch task StepId=12.0 request",
                 "_job_complete: JobId=12 done"):
        assert named.search(said), said
    for said in ("JobId=120 done", "Launching batch job 121 for UID 1", "[123.batch] done", "StepId=112.0", "job 1234"):
        assert not named.search(said), said


def _probe_output(active: str, cursor: bool, first_at: float | None, now: float) -> str:
    lines = [f"kiln-upload {active}", f"kiln-cursor {'set' if cursor else 'none'}"]
    if first_at is not None:
        lines.append(_entry("x", at=int(first_at * 1e6)))
    return "\n".join(lines + [f"kiln-now {int(now)}"]) + "\n"


EXPECT = {"log_host": "10.10.0.2:19532", "lag_seconds": 120, "state": log_host.UPLOAD_STATE,
          "unit": log_host.UPLOAD_UNIT}


@pytest.mark.parametrize("output, severity, words", [
    (_probe_output("active", True, None, 1000), "ok", "reaches the log host"),
    (_probe_output("active", True, 990, 1000), "ok", "10 s behind"),
    (_probe_output("inactive", True, None, 1000), "fail", "systemd-journal-upload is inactive"),
    (_probe_output("failed", True, None, 1000), "fail", "is failed"),
    (_probe_output("active", False, None, 1000), "fail", "has not accepted one entry"),
    (_probe_output("active", True, 700, 1000), "fail", "of the last 300 s have not reached the log host 10.10.0.2:19532"),
    (_probe_output("activating", True, 700, 1000), "fail", "of the last 300 s have not reached"),  # retrying
    (_probe_output("activating", True, 995, 1000), "ok", "5 s behind"),
    ("", "fail", "could not read the journal uploader's state"),
])
def test_log_shipping_fails_on_each_fault_it_targets(output, severity, words):
    found = logs.judge(EXPECT, output)
    assert (found.id, found.severity) == ("LOG_SHIPPING", severity) and words in found.message, found.message


def test_only_the_uploader_may_reach_the_log_host_and_the_log_host_lets_every_host_in(cluster):
    for name, host in cluster.hosts.items():
        (rule,) = firewall_rules.output_rules(cluster, host)
        assert rule.startswith("ip daddr 10.10.0.2 tcp dport 19532 meta skuid != 982 reject"), rule
    ways = {a.why: a for a in firewall_rules.allows(cluster, cluster.hosts["ctl01"])}
    journals = ways["the journals of every kiln host (systemd-journal-upload)"]
    assert journals.ports == "19532" and set(journals.sources) == {h.address for h in cluster.hosts.values()}
    assert not any(a.ports == "19532" for a in firewall_rules.allows(cluster, cluster.hosts["hgx001"]))


NEEDS_NFT = "loading rules needs root, nft, unshare and setpriv (a network namespace of its own)"


@pytest.mark.skipif(os.geteuid() != 0 or not all(shutil.which(t) for t in ("nft", "unshare", "setpriv")),
                    reason=NEEDS_NFT)
def test_the_output_rule_refuses_every_user_but_the_uploader_on_real_connections(cluster, tmp_path):
    """hgx001's whole ruleset loaded by nft in a network namespace of its own, the log host's address on its
    loopback with a listener on 19532: root and a user are refused there, the uploader's UID connects, and
    another port of the log host is not touched by the rule."""
    rules = tmp_path / "hgx001.nft"
    rules.write_text(firewall_rules.ruleset(cluster, cluster.hosts["hgx001"]))
    other = free_port("127.0.0.1")
    probe = ("import socket, sys\ntry:\n    socket.create_connection(('10.10.0.2', int(sys.argv[1])), timeout=3).close()"
             "; print('open')\nexcept OSError as e:\n    print('refused' if isinstance(e, ConnectionRefusedError) "
             "else type(e).__name__)")
    listen = (f"import socket, time\nkept = []\nfor p in ({log_host.PORT}, {other}):\n    s = socket.socket()\n"
              "    s.bind(('10.10.0.2', p)); s.listen(); kept.append(s)\ntime.sleep(8)")
    py = shlex.quote(shutil.which("python3", path="/usr/bin:/bin") or "python3")  # the system one: every user reads it
    as_user = lambda uid, port: (f"setpriv --reuid={uid} --regid={uid} --clear-groups {py} -c "  # noqa: E731
                                 f"{shlex.quote(probe)} {port}")
    script = (f"ip link set lo up && ip addr add 10.10.0.2/32 dev lo && nft -f {rules} && "
              f"({py} -c {shlex.quote(listen)} >/dev/null 2>&1 &) && sleep 1 && "
              f"echo root $({py} -c {shlex.quote(probe)} {log_host.PORT}) && "
              f"echo user $({as_user(2102, log_host.PORT)}) && echo uploader $({as_user(982, log_host.PORT)}) && "
              f"echo other $({as_user(2102, other)})")
    out = subprocess.run(["unshare", "-n", "sh", "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    said = dict((line + " ").split(" ", 1) for line in out.stdout.splitlines())
    said = {k: v.strip() for k, v in said.items()}
    assert said == {"root": "refused", "user": "refused", "uploader": "open", "other": "open"}, out.stdout


def test_service_accounts_keep_their_defaults_and_log_shipping_needs_the_listeners_tls(tmp_path):
    inventory = _inventory(tmp_path / "a", "kiln_service_uids: {slurm: 990}\n")
    cluster = load_cluster(inventory)
    groups, _ = account_specs(cluster, PLATFORMS["debian12"], cluster.hosts["ctl01"])
    assert {("slurm", 990, True), ("munge", 981, True), ("systemd-journal-upload", 982, True)} <= set(groups)
    errors = validate(_inventory(tmp_path / "b", "kiln_monitoring_tls: false\n"))[1]
    assert [(e.key, "kiln_log_shipping off too" in e.message) for e in errors] == [("kiln_monitoring_tls", True)]
    assert validate(_inventory(tmp_path / "c", "kiln_monitoring_tls: false\nkiln_log_shipping: false\n"))[1] == []
    off = load_cluster(_inventory(tmp_path / "d", "kiln_log_shipping: false\n"))
    assert log_host.log_host(off) is None and firewall_rules.output_rules(off, off.hosts["hgx001"]) == []
    for hostile in ('"yes; reboot"', '"180; rm -rf /"'):
        key = "kiln_log_shipping" if "yes" in hostile else "kiln_log_retention_days"
        errors = validate(_inventory(tmp_path / key / hostile[1:4], f"{key}: {hostile}\n"))[1]
        assert [(e.file, e.key) for e in errors] == [("group_vars/all/firewall.yml", key)], errors


def test_kiln_logs_refuses_bad_input_before_it_connects(tmp_path, no_network):
    inventory = str(_inventory(tmp_path / "x"))
    for args, words in ((["nosuchhost"], "not hosts of the inventory: nosuchhost"),
                        (["--job", "12; reboot"], "is not a Slurm job id"),
                        (["--grep", "(unclosed"], "--grep:"),
                        (["--since", "yesterday"], "is not a date")):
        result = CliRunner().invoke(main, ["logs", "-i", inventory, *args])
        assert result.exit_code == 2 and words in result.output, (args, result.output)
    off = str(_inventory(tmp_path / "off", "kiln_log_shipping: false\n"))
    result = CliRunner().invoke(main, ["logs", "-i", off])
    assert result.exit_code == 2 and "ships no journal" in result.output, result.output
    assert no_network == []


AUDITCTL = """-w /etc/slurm -p wa -k kiln-slurm
-w /etc/munge -p wa -k kiln-munge
-w /etc/kiln -p wa -k kiln-config
-w /usr/local/lib/kiln -p wa -k kiln-config
-w /etc/sudoers -p wa -k kiln-sudoers
-w /etc/sudoers.d -p wa -k kiln-sudoers
-w /etc/passwd -p wa -k kiln-identity
-w /usr/bin/sudo -p x -k kiln-privileged
-a always,exit -F arch=b64 -S execve -F euid=0 -F auid>=1000 -F auid!=-1 -F key=kiln-privileged
"""


@pytest.mark.parametrize("output, severity, words", [
    ("kiln-auditd active\n" + AUDITCTL, "ok", "6 keys loaded"),
    ("kiln-container\n", "ok", "a container"),
    ("kiln-auditd active\nNo rules\n", "fail", "no rule loaded under kiln-slurm, kiln-munge"),
    ("kiln-auditd inactive\n" + AUDITCTL, "fail", "auditd is inactive"),
    ("kiln-auditd active\n" + AUDITCTL.replace("-k kiln-munge", "-k someone-else"), "fail", "no rule loaded under kiln-munge"),
    ("sh: 1: systemctl: not found\n", "fail", "could not ask the audit system"),
])
def test_audit_rules_fails_on_each_fault_it_targets(output, severity, words):
    from roles.audit import KEYS
    found = logs.audit_rules({"keys": list(KEYS)}, output)
    assert (found.id, found.severity) == ("AUDIT_RULES", severity) and words in found.message, found.message
