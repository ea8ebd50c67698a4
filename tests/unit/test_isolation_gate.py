"""The isolation suite as a gate (kiln/check/isolation_gate.py): which hosts it runs on, what it says, and
``kiln deploy`` failing (exit 1) when a probe gets through after a deploy, never running it for a dry run.
The rollout's side: tests/unit/test_rollout.py; the suite itself: tests/unit/test_isolation_suite.py."""

from __future__ import annotations

import json
import shutil

from click.testing import CliRunner

from checks.verdict import Verdict
from kiln.check import isolation_gate
from kiln.check.isolation_gate import gate_hosts, lines
from kiln.cli.main import main
from kiln.deploy.runner import DeployResult, HostResult
from kiln.inventory import load_cluster
from tests.conftest import REPO

HELD = {"login01": [Verdict("ISOLATION_JOBS", "ok", "kiln-probe-vision sees none of the 2 job(s) of other users", "isolation"),
                    Verdict("ISOLATION_SSH_PASSWORD", "warn", "sshd at 10.0.0.5 takes password, publickey from "
                            "kiln-probe-vision (the inventory turns this protection off: kiln_ssh_password_login is "
                            "true; reported, not failed)", "isolation")]}
THROUGH = {"login01": [Verdict("ISOLATION_SECRETS", "fail", "kiln-probe-vision can read /etc/munge/munge.key",
                               "isolation")]}


def _example(tmp_path):
    shutil.copytree(REPO / "inventory" / "example", tmp_path / "example")
    return tmp_path / "example"


def test_the_gate_runs_on_the_login_hosts_of_the_change_only(tmp_path):
    cluster = load_cluster(_example(tmp_path))
    logins = [h.name for h in cluster.user_logins]
    assert logins and gate_hosts(cluster, list(cluster.hosts)) == cluster.user_logins
    assert gate_hosts(cluster, [h.name for h in cluster.compute]) == []


def test_what_the_gate_says_held_warned_and_failed():
    assert lines({}) == []
    said = lines(HELD)
    assert said[-1] == "isolation: 2 probe(s) held on login01"
    assert said[0].startswith("isolation: login01 ISOLATION_SSH_PASSWORD: sshd at 10.0.0.5 takes password")
    said = lines(THROUGH)
    assert said == ["isolation: FAILED login01 ISOLATION_SECRETS: kiln-probe-vision can read /etc/munge/munge.key",
                    "isolation: a team's probe got through: fix what each line names, then kiln check --suite isolation"]


def _deploy(monkeypatch, tmp_path, gate, *args):
    """kiln deploy with the convergence itself stood in for (every host changed) and the gate's answer given."""
    import kiln.cli.deploy as cli_deploy
    import kiln.deploy.runner as runner
    asked = []

    class Converged:
        def __init__(self, cluster, secrets, hosts, role_names, dry_run=False, **kw):
            self.hosts, self.dry_run = hosts, dry_run

        def run(self):
            status = "would change" if self.dry_run else "changed"
            return DeployResult(["base"], self.dry_run, [HostResult(n, status, ops=1, changed=["x"]) for n in self.hosts], 1.0)

    def run_gate(cluster, names, forks=64, log=None):
        asked.append(sorted(names))
        return gate
    monkeypatch.setattr(runner, "Deploy", Converged)
    monkeypatch.setattr(isolation_gate, "run_gate", run_gate)
    monkeypatch.setattr(cli_deploy, "gevent_patch", lambda: None)
    inventory = _example(tmp_path)
    result = CliRunner().invoke(main, ["deploy", "-i", str(inventory), *args])
    return result, asked


def test_deploy_fails_when_a_probe_gets_through_afterwards_and_passes_when_every_probe_holds(monkeypatch, tmp_path):
    result, asked = _deploy(monkeypatch, tmp_path / "a", THROUGH)
    assert result.exit_code == 1, result.output
    assert "isolation: FAILED login01 ISOLATION_SECRETS: kiln-probe-vision can read /etc/munge/munge.key" in result.output
    assert len(asked) == 1 and "login01" in asked[0]
    result, _ = _deploy(monkeypatch, tmp_path / "b", HELD, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert [v["id"] for v in report["isolation"]["login01"]] == ["ISOLATION_JOBS", "ISOLATION_SSH_PASSWORD"]


def test_a_dry_run_runs_no_probe(monkeypatch, tmp_path):
    result, asked = _deploy(monkeypatch, tmp_path, THROUGH, "--dry-run")
    assert result.exit_code == 3 and asked == [], result.output


def test_a_deploy_told_no_isolation_gate_runs_no_probe_and_says_none(monkeypatch, tmp_path):
    result, asked = _deploy(monkeypatch, tmp_path, THROUGH, "--no-isolation-gate", "--json")
    assert result.exit_code == 0 and asked == [], result.output
    assert json.loads(result.output)["isolation"] == {}


def test_a_login_host_ssh_did_not_reach_is_said_not_probed_and_is_no_finding():
    from kiln.check.isolation_gate import failures
    lost = {"login01": [Verdict("NODE_UNREACHABLE", "fail", "ssh: connect to host 10.0.0.5 port 22: No route to host",
                                "ssh")]}
    assert failures(lost) == {}
    assert lines(lost) == ["isolation: login01 not probed: ssh: connect to host 10.0.0.5 port 22: No route to host"]
