"""The log host live on the shared testbed (#46, #47): a user's SSH login, a failed sudo and a job submission
reach the log host within 60 s and `kiln logs` shows them by the host whose files held them; `kiln logs --job`
gives Slurm's entries of the job on the controller and its node; an entry a user writes claiming to be sshd's
shows the user's UID; LOG_SHIPPING passes, fails when the uploader stops and when the log host stops taking
entries, and what a node wrote while the log host was down arrives once it is back."""

from __future__ import annotations

import json
import secrets
import subprocess
import time

import pytest

from checks import logs as logs_suite
from kiln.inventory import load_cluster
from tests.testbed.slurm_helpers import job_state, kiln, ok, on, wait_for


def _kiln_logs(tb, *args: str) -> dict:
    out = kiln("logs", "-i", str(tb.inventory), "--json", "-n", "0", *args, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)


def _ssh_as(tb, user: str, key, command: str) -> subprocess.CompletedProcess:
    """``ssh user@controller command`` with the user's own key, on a connection of its own (a login of its own)."""
    argv = tb.ssh_command(tb.controller, [command])
    argv[1:1] = ["-l", user, "-i", str(key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
                 "-o", "ControlMaster=no", "-o", "ControlPath=none"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def _logs_check(tb) -> dict[str, tuple[str, str]]:
    out = kiln("check", "-i", str(tb.inventory), "--suite", "logs", "--json", "-", timeout=300)
    data = json.loads(out.stdout)
    return {n: next((c["severity"], c["message"]) for c in v["checks"] if c["id"] == "LOG_SHIPPING")
            for n, v in data["nodes"].items()}


@pytest.mark.proves("monitoring", "kiln check", tier="nspawn")
def test_a_login_a_failed_sudo_and_a_submission_reach_the_log_host_within_a_minute(slurm, tmp_path):
    tb, ctl, node = slurm, slurm.controller, slurm.computes[0]
    key = tmp_path / "id_bob"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    public = key.with_suffix(".pub").read_text().strip()
    ok(tb, ctl, f"install -d -o bob -g bob -m 700 /home/bob/.ssh && echo '{public}' >> /home/bob/.ssh/authorized_keys "
                "&& chown bob:bob /home/bob/.ssh/authorized_keys")
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 5))
    started = time.monotonic()
    # one login of bob's (not an operator): a wrong password to sudo, a batch job on one compute node
    said = _ssh_as(tb, "bob", key, f"echo not-my-password | sudo -S -p '' true; sbatch --parsable -N1 -w {node} "
                                   "-o /dev/null --wrap 'sleep 2'")
    assert said.returncode == 0, said.stdout + said.stderr
    job = said.stdout.strip().splitlines()[-1].split(";")[0]
    seen: dict[str, float] = {}

    def arrived():
        for e in _kiln_logs(tb, ctl, "--since", since)["entries"]:
            what = {"login": e["program"] == "sshd" and e["uid"] == "0" and "Accepted publickey for bob" in e["message"],
                    "sudo": e["program"] == "sudo" and "bob : user NOT in sudoers" in e["message"],
                    "submission": e["program"] == "slurmctld" and f"_slurm_rpc_submit_batch_job: JobId={job} " in e["message"]}
            for name, hit in what.items():
                if hit and e["host"] == ctl:
                    seen.setdefault(name, time.monotonic() - started)
        return len(seen) == 3

    wait_for(arrived, timeout=60, interval=2, what="bob's login, failed sudo and job submission on the log host")
    print("on the log host after: " + ", ".join(f"{k} {v:.0f} s" for k, v in seen.items()))

    # the job: Slurm's entries naming it, on the controller and on the node it ran on
    wait_for(lambda: job_state(tb, ctl, job) == "COMPLETED", timeout=90, interval=2, what=f"job {job} to end")

    def job_entries():
        data = _kiln_logs(tb, "--job", job)
        hosts = {e["host"] for e in data["entries"] if f"Launching batch job {job} for UID 2102" in e["message"]}
        return data if node in hosts else None

    data = wait_for(job_entries, timeout=60, interval=3, what=f"kiln logs --job {job} to show its launch on {node}")
    assert data["job"]["user"] == "bob" and data["job"]["hosts"] == [ctl, node], data["job"]
    assert all(f"JobId={job}" in e["message"] or f"job {job}" in e["message"] for e in data["entries"] if e["host"] == ctl)
    print(f"kiln logs --job {job}: {len(data['entries'])} entries, "
          f"{sum(e['host'] == ctl for e in data['entries'])} of them slurmctld's naming it")

    # a user's own entry that claims to be sshd's shows whose it is
    token = secrets.token_hex(4)
    ok(tb, ctl, f"runuser -u bob -- logger -t sshd 'Accepted publickey for root from 192.0.2.9 {token}'")
    forged = wait_for(lambda: [e for e in _kiln_logs(tb, ctl, "--grep", token)["entries"]], timeout=60, interval=2,
                      what="bob's forged line on the log host")
    assert forged[0]["program"] == "sshd" and forged[0]["uid"] == "2102", forged
    shown = kiln("logs", "-i", str(tb.inventory), ctl, "--grep", token).stdout
    assert "sshd[" in shown and "uid=2102: Accepted publickey for root" in shown, shown


@pytest.mark.proves("monitoring", "kiln check", tier="nspawn")
def test_log_shipping_fails_on_a_stopped_uploader_and_a_stopped_log_host_and_nothing_written_meanwhile_is_lost(slurm):
    tb, ctl, node = slurm, slurm.controller, slurm.computes[0]
    found = _logs_check(tb)  # every host's uploader waited for the log host at its first start: all ship
    assert set(found) == {ctl, *tb.computes} and all(s == "ok" for s, _ in found.values()), found
    ok(tb, node, "systemctl stop systemd-journal-upload")
    try:
        found = _logs_check(tb)
        assert found[node][0] == "fail" and "systemd-journal-upload is inactive" in found[node][1], found[node]
        assert all(s == "ok" for n, (s, _) in found.items() if n != node), found
    finally:
        ok(tb, node, "systemctl start systemd-journal-upload")

    # the log host stops taking entries: the node's entries wait, its probe reads how long, none is lost
    cluster = load_cluster(tb.inventory)
    expect = {"log_host": f"{cluster.hosts[ctl].address}:19532", "lag_seconds": 5,
              "state": "/var/lib/private/systemd/journal-upload/state", "unit": "systemd-journal-upload.service"}
    token = secrets.token_hex(4)
    ok(tb, ctl, "systemctl stop systemd-journal-remote.socket systemd-journal-remote.service")
    try:
        ok(tb, node, f"logger -t kiln-test 'written while the log host was down {token}'")
        time.sleep(8)
        judged = logs_suite.judge(expect, on(tb, node, logs_suite.probe_command(expect)).stdout)
        assert judged.severity == "fail" and "have not reached the log host" in judged.message, judged
        print(f"log host down 8 s: {judged.message[:120]}")
    finally:
        ok(tb, ctl, "systemctl start systemd-journal-remote.socket")
    started = time.monotonic()
    wait_for(lambda: _kiln_logs(tb, node, "--grep", token)["entries"], timeout=60, interval=2,
             what="the entry written while the log host was down, on the log host")
    print(f"the entry written while the log host was down arrived {time.monotonic() - started:.0f} s after it was back")
    wait_for(lambda: logs_suite.judge(expect, on(tb, node, logs_suite.probe_command(expect)).stdout).severity == "ok",
             timeout=60, interval=3, what=f"{node}'s LOG_SHIPPING to pass again")
