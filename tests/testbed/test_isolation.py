"""Teams kept apart on the deployed testbed (Slurm's PrivateData, stored job scripts, kiln's secrets) and
the isolation suite that probes it as each team's unprivileged probe account: passing on the deployed
cluster, and failing on each protection taken away (then given back: kiln deploy, or the change undone)."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from tests.testbed.slurm_helpers import copy_inventory, job_state, kiln, ok, on, submit, wait_for

pytestmark = pytest.mark.testbed

MARK = "kiln-isolation-marker-7f3a"


def isolation(tb, tmp_path) -> dict[str, tuple[str, str]]:
    """The controller's isolation verdicts (the testbed has no login node: the controller is it)."""
    out = kiln("check", "-i", str(tb.inventory), "--suite", "isolation", "--json", str(tmp_path / "c.json"), timeout=300)
    data = json.loads((tmp_path / "c.json").read_text())
    found: dict[str, tuple[str, str]] = {}
    for c in data["nodes"][tb.controller]["checks"]:  # one verdict per probe account: a failing one wins
        if c["id"] not in found or c["severity"] == "fail":
            found[c["id"]] = (c["severity"], c["message"])
    assert (out.returncode == 0) == all(s != "fail" for s, _ in found.values()), out.stdout + out.stderr
    return found


def failing(found: dict) -> set[str]:
    return {k for k, (s, _) in found.items() if s == "fail"}


@pytest.mark.proves("slurm", "isolation", "kiln check", tier="nspawn")
def test_one_teams_user_sees_nothing_of_anothers_and_the_isolation_suite_fails_on_each_way_through(slurm, tmp_path):
    tb, ctl = slurm, slurm.controller
    job = submit(tb, ctl, f"-N1 -t 5 --wrap='echo {MARK}; sleep 240'", user="alice")
    try:
        wait_for(lambda: ok(tb, ctl, f"squeue -h -j {job} -o %T").strip() in ("RUNNING", "PENDING"), timeout=30,
                 what="alice's job queued")
        # Another team's user sees none of it: not in squeue, not by id, not its stored script
        assert job not in on(tb, ctl, "runuser -u bob -- squeue -h -o %i").stdout
        shown = on(tb, ctl, f"runuser -u bob -- scontrol show job {job}")
        assert shown.returncode != 0 and "Invalid job id" in shown.stderr, shown
        wait_for(lambda: MARK in on(tb, ctl, f"sacct -j {job} --batch-script").stdout, timeout=30,
                 what="the job's script stored in accounting")
        assert MARK not in on(tb, ctl, f"runuser -u bob -- sacct -j {job} --batch-script").stdout
        # its owner and the operator (root) read it
        assert MARK in ok(tb, ctl, f"runuser -u alice -- sacct -j {job} --batch-script")
        # nor another team's usage
        assert "alice" not in on(tb, ctl, "runuser -u bob -- sshare -a -h -o User").stdout

        found = isolation(tb, tmp_path)
        assert not failing(found), found
        assert {"ISOLATION_JOBS", "ISOLATION_USAGE", "ISOLATION_ACCOUNTING", "ISOLATION_SECRETS", "ISOLATION_SLURM_ADMIN",
                "ISOLATION_SSH_PASSWORD", "ISOLATION_AUDIT_TRAIL"} <= set(found)
        assert "none of the 1 job(s) of other users" in found["ISOLATION_JOBS"][1], found  # not vacuous
        for check, what in (("ISOLATION_USAGE", "usage line(s)"), ("ISOLATION_ACCOUNTING", "association(s)")):
            assert re.search(rf"none of the [1-9][0-9]* {re.escape(what)} of other users", found[check][1]), found

        # Each protection taken away fails its probe, and only it: slurmctld's PrivateData without jobs, then
        # without usage (kiln's default is accounts,jobs,usage,users)
        for left, check in (("accounts,usage,users", "ISOLATION_JOBS"), ("accounts,jobs,users", "ISOLATION_USAGE")):
            ok(tb, ctl, f"sed -i 's/^PrivateData=.*/PrivateData={left}/' /etc/slurm/slurm.conf && scontrol reconfigure")
            found = isolation(tb, tmp_path)
            assert failing(found) == {check} and "alice" in found[check][1], found
        out = kiln("deploy", "-i", str(tb.inventory))
        assert out.returncode == 0, out.stdout + out.stderr
        assert not failing(isolation(tb, tmp_path))  # kiln deploy put PrivateData back

        # slurmdbd's own PrivateData without users: the probe lists every association (who is in which account)
        dbd = "/etc/slurm/slurmdbd.conf"
        ok(tb, ctl, f"cp -p {dbd} {dbd}.kept && sed -i 's/^PrivateData=.*/PrivateData=accounts,jobs,usage/' {dbd} "
                    "&& systemctl restart slurmdbd")
        try:
            wait_for(lambda: on(tb, ctl, "sacctmgr -n show cluster").returncode == 0, timeout=60, what="slurmdbd back")
            found = isolation(tb, tmp_path)
        finally:
            ok(tb, ctl, f"mv {dbd}.kept {dbd} && systemctl restart slurmdbd")
            wait_for(lambda: on(tb, ctl, "sacctmgr -n show cluster").returncode == 0, timeout=60, what="slurmdbd back")
        assert failing(found) == {"ISOLATION_ACCOUNTING"} and "alice" in found["ISOLATION_ACCOUNTING"][1], found

        ok(tb, ctl, "chmod 644 /etc/prometheus/kiln-password")
        found = isolation(tb, tmp_path)
        ok(tb, ctl, "chmod 640 /etc/prometheus/kiln-password")
        assert failing(found) == {"ISOLATION_SECRETS"} and "/etc/prometheus/kiln-password" in found["ISOLATION_SECRETS"][1]

        # a directory and a file outside any team's space made writable (a package's or a person's chmod)
        writes = found["ISOLATION_WRITES"]
        assert writes[0] == "ok" and "can write nothing outside its own space" in writes[1], found
        ok(tb, ctl, "chmod o+w /usr/local/bin && install -d -m 2775 -g vision /opt/kiln-open-to-vision")
        try:
            found = isolation(tb, tmp_path)
        finally:
            ok(tb, ctl, "chmod o-w /usr/local/bin && rmdir /opt/kiln-open-to-vision")
        assert failing(found) == {"ISOLATION_WRITES"}, found
        assert "/usr/local/bin" in found["ISOLATION_WRITES"][1] and "outside its own space" in found["ISOLATION_WRITES"][1]
        wrote = [c for c in json.loads((tmp_path / "c.json").read_text())["nodes"][ctl]["checks"]
                 if c["id"] == "ISOLATION_WRITES" and "/opt/kiln-open-to-vision" in c["message"]]
        assert [c["message"].split()[0] for c in wrote] == ["kiln-probe-vision"], wrote  # its group's only

        ok(tb, ctl, "sacctmgr -i add user kiln-probe-vision account=vision adminlevel=operator")
        try:
            found = isolation(tb, tmp_path)
        finally:
            ok(tb, ctl, "sacctmgr -i delete user name=kiln-probe-vision")
        # an operator also sees every job, usage line and association: those probes fail with it
        assert failing(found) == {"ISOLATION_SLURM_ADMIN", "ISOLATION_JOBS", "ISOLATION_USAGE", "ISOLATION_ACCOUNTING"}, found
        assert "took a reservation (slurmctld) and a new account (slurmdbd)" in found["ISOLATION_SLURM_ADMIN"][1], found

        # a coordinator of the root account changes accounts below it (slurmdbd) but makes no reservation
        ok(tb, ctl, "sacctmgr -i add user kiln-probe-vision account=vision && "
                    "sacctmgr -i add coordinator account=root names=kiln-probe-vision")
        try:
            found = isolation(tb, tmp_path)
        finally:
            ok(tb, ctl, "sacctmgr -i delete user name=kiln-probe-vision")
        assert "ISOLATION_SLURM_ADMIN" in failing(found) and failing(found) <= {
            "ISOLATION_SLURM_ADMIN", "ISOLATION_JOBS", "ISOLATION_USAGE", "ISOLATION_ACCOUNTING"}, found
        assert "Slurm took a new account (slurmdbd) from kiln-probe-vision" in found["ISOLATION_SLURM_ADMIN"][1], found
        assert on(tb, ctl, "sacctmgr -n -P show account kiln-isolation-kiln-probe-vision").stdout.strip() == ""

        ok(tb, ctl, "sed -i 's/^PasswordAuthentication no$/PasswordAuthentication yes/' /etc/ssh/sshd_config.d/00-kiln.conf"
                    " && systemctl reload ssh")
        found = isolation(tb, tmp_path)
        assert failing(found) == {"ISOLATION_SSH_PASSWORD"} and "password" in found["ISOLATION_SSH_PASSWORD"][1], found
        out = kiln("deploy", "-i", str(tb.inventory))
        assert out.returncode == 0, out.stdout + out.stderr
        assert not failing(isolation(tb, tmp_path))  # kiln deploy wrote keys only back, and sshd reloaded

        ok(tb, ctl, "userdel kiln-probe-language")
        found = isolation(tb, tmp_path)
        assert failing(found) == {"ISOLATION_PROBE_ACCOUNT"}, found
        out = kiln("deploy", "-i", str(tb.inventory))
        assert out.returncode == 0, out.stdout + out.stderr
        assert not failing(isolation(tb, tmp_path))
    finally:
        on(tb, ctl, f"scancel {job}")


SHARE = "/srv/kiln-shared"


@pytest.mark.proves("storage", "isolation", "slurm", tier="nspawn")
def test_a_team_writes_its_own_directory_from_jobs_on_both_nodes_and_the_other_team_cannot_reach_it(slurm, tmp_path):
    """kiln deploy made projects/TEAM and scratch/TEAM on the shared storage (root, the team's group, 2770):
    alice's job on both compute nodes writes vision's project directory, and what it wrote keeps the team's
    group; bob (language) neither lists, reads nor writes it, from his own job on those nodes or on the login
    host; the isolation suite passes, and fails when another team's directory is opened to others."""
    tb, ctl = slurm, slurm.controller
    vision, language = f"{SHARE}/projects/vision", f"{SHARE}/projects/language"
    for d, team in ((vision, "vision"), (language, "language"), (f"{SHARE}/scratch/vision", "vision")):
        assert ok(tb, ctl, f"stat -c '%U %G %a' {d}").split() == ["root", team, "2770"], d
    nodes = len(tb.computes)
    job = submit(tb, ctl, f"-N{nodes} -t 5 -o {vision}/job-%j.out --wrap='srun -N{nodes} sh -c "
                 f"\"hostname > {vision}/from-\\$(hostname)\"'", user="alice")
    wait_for(lambda: ok(tb, ctl, f"sacct -n -X -P -j {job} -o State").strip() in ("COMPLETED", "FAILED"), timeout=120,
             what="alice's job on every compute node")
    assert ok(tb, ctl, f"sacct -n -X -P -j {job} -o State").strip() == "COMPLETED"
    written = ok(tb, ctl, f"stat -c '%n %U %G' {vision}/from-*").split("\n")[:-1]
    assert sorted(w.split()[0].rsplit("-", 1)[1] for w in written) == sorted(tb.computes), written
    assert all(w.split()[1:] == ["alice", "vision"] for w in written), written  # setgid: the team's group

    # its output beside the node's /var/tmp: a job's /tmp is its own (kiln_slurm_job_tmp), gone when it ends
    bob = submit(tb, ctl, f"-N{nodes} -t 5 -o /var/tmp/bob-%j.out --wrap='srun -N{nodes} sh -c "
                 f"\"ls {vision}; cat {vision}/from-*; touch {vision}/bob; echo done\"'", user="bob")
    wait_for(lambda: ok(tb, ctl, f"sacct -n -X -P -j {bob} -o State").strip() not in ("PENDING", "RUNNING", ""),
             timeout=120, what="bob's job")
    out = ok(tb, tb.computes[0], f"cat /var/tmp/bob-{bob}.out && rm -f /var/tmp/bob-{bob}.out")
    assert out.count("Permission denied") >= 3 * nodes and out.count("done") == nodes, out
    assert on(tb, ctl, f"runuser -u bob -- ls {vision}").returncode != 0
    assert ok(tb, ctl, f"ls {vision}").split() == sorted(f"from-{n}" for n in tb.computes) + [f"job-{job}.out"]

    found = isolation(tb, tmp_path)
    assert found["ISOLATION_FILES"][0] == "ok" and "writes its team's 2 director(ies) and none of the other 4" in \
        found["ISOLATION_FILES"][1], found
    ok(tb, ctl, f"chmod o+rx {language}")
    found = isolation(tb, tmp_path)
    assert failing(found) == {"ISOLATION_FILES"} and f"listed {language}" in found["ISOLATION_FILES"][1], found
    out = kiln("deploy", "-i", str(tb.inventory))
    assert out.returncode == 0, out.stdout + out.stderr
    assert ok(tb, ctl, f"stat -c %a {language}").strip() == "2770"  # kiln deploy closed it again
    found = isolation(tb, tmp_path)
    assert not failing(found), found

    # the users' homes: created closed to others (Debian 12's own default is 0755); one opened is found and
    # closed again by kiln deploy, the owner's and group's bits left as they were
    assert found["ISOLATION_HOMES"] == ("ok", "kiln-probe-vision lists and writes none of the 2 users' homes"), found
    assert ok(tb, ctl, "stat -c %a /home/alice /home/bob").split() == ["700", "700"]
    ok(tb, ctl, "chmod 755 /home/bob")
    found = isolation(tb, tmp_path)
    assert failing(found) == {"ISOLATION_HOMES"} and "listed /home/bob" in found["ISOLATION_HOMES"][1], found
    out = kiln("deploy", "-i", str(tb.inventory), "--roles", "base", "--limit", ctl)
    assert out.returncode == 0, out.stdout + out.stderr
    assert ok(tb, ctl, "stat -c %a /home/bob").strip() == "750"
    assert not failing(isolation(tb, tmp_path))


@pytest.mark.proves("base", "isolation", tier="nspawn")
def test_only_operators_get_sudo_and_the_isolation_suite_fails_on_a_rule_for_a_team_user(slurm, tmp_path):
    """kiln_operators (the testbed's: alice, without a password) runs commands as root through sudo on every
    node; bob, in no operators group, does not; ISOLATION_SUDO passes, and fails on a rule some other
    file gives a team's user."""
    tb, ctl = slurm, slurm.controller
    for node in (ctl, tb.computes[0]):
        assert ok(tb, node, "su - alice -c 'sudo -n id -u'").strip() == "0"
        denied = on(tb, node, "su - bob -c 'sudo -n id -u'")
        assert denied.returncode != 0 and denied.stdout.strip() != "0", denied
    found = isolation(tb, tmp_path)
    assert found["ISOLATION_SUDO"] == ("ok", "sudo has no rule for kiln-probe-vision"), found
    stray = "/etc/sudoers.d/zz-kiln-test"
    ok(tb, ctl, f"echo 'kiln-probe-language ALL=(ALL:ALL) ALL' > {stray} && chmod 440 {stray}")
    try:
        found = isolation(tb, tmp_path)
    finally:
        ok(tb, ctl, f"rm -f {stray}")
    assert failing(found) == {"ISOLATION_SUDO"} and "sudo has a rule for kiln-probe-language" in \
        found["ISOLATION_SUDO"][1], found


@pytest.mark.proves("monitoring", "isolation", tier="nspawn")
def test_monitoring_listeners_refuse_a_team_user_without_credentials_and_the_suite_fails_when_one_does_not(slurm, tmp_path):
    """node_exporter, Prometheus and Alertmanager on the controller answer the probe account 401 (over TLS
    it trusts through the cluster CA); with their basic auth taken out of the web config (read again on each
    request; its TLS kept) they answer it, and ISOLATION_MONITORING fails until kiln deploy writes the web
    config back."""
    tb, ctl = slurm, slurm.controller
    found = isolation(tb, tmp_path)
    assert found["ISOLATION_MONITORING"] == ("ok", "3 monitoring listener(s) refused kiln-probe-vision without "
                                                   "credentials"), found
    web = "/etc/prometheus/kiln-web.yml"
    ok(tb, ctl, f"cp -p {web} {web}.kept && sed -i '/^basic_auth_users:/,$d' {web} && grep -q '^tls_server_config:' {web}")
    try:
        found = isolation(tb, tmp_path)
    finally:
        out = kiln("deploy", "-i", str(tb.inventory))
        on(tb, ctl, f"rm -f {web}.kept")
    assert out.returncode == 0, out.stdout + out.stderr
    assert failing(found) == {"ISOLATION_MONITORING"} and "(200)" in found["ISOLATION_MONITORING"][1], found
    assert not failing(isolation(tb, tmp_path))


@pytest.mark.proves("isolation", "kiln patch", tier="nspawn")
def test_a_deploy_and_each_rollout_batch_run_the_isolation_suite_and_one_way_through_fails_them(slurm, tmp_path):
    """The suite as a gate (kiln/check/isolation_gate.py): a deploy of the controller (the testbed's login
    host) says every probe held; with a team's probe account made a Slurm operator (nothing kiln deploy
    undoes) the same deploy exits 1 naming it, and a rollout stops after its first batch of one node, the
    rest untouched. A protection the inventory itself turns off (password login) only warns. The probes'
    refused sudo reaches the log host, and ISOLATION_AUDIT_TRAIL fails while the controller's uploader is
    stopped."""
    tb, ctl = slurm, slurm.controller
    out = kiln("deploy", "-i", str(tb.inventory), "--roles", "base", "--limit", ctl)
    assert out.returncode == 0 and f"probe(s) held on {ctl}" in out.stdout, out.stdout + out.stderr
    ok(tb, ctl, "sacctmgr -i add user kiln-probe-vision account=vision adminlevel=operator")
    try:
        out = kiln("deploy", "-i", str(tb.inventory), "--roles", "base", "--limit", ctl)
        assert out.returncode == 1, out.stdout + out.stderr
        assert f"isolation: FAILED {ctl} ISOLATION_SLURM_ADMIN: Slurm took a reservation (slurmctld) and a new account " \
            "(slurmdbd) from kiln-probe-vision" in out.stdout, out.stdout
        out = kiln("patch", "-i", str(tb.inventory), "--roles", "base", "--limit", ",".join(tb.computes),
                   "--max-unavailable", "1", "--canary", "1", "--reboot", "never", "--json", timeout=900)
        report = json.loads(out.stdout)
        assert out.returncode != 0 and "the isolation suite failed after batch 1" in report["stopped"], out.stdout
        assert "ISOLATION_SLURM_ADMIN" in report["stopped"]
        patched = [n for n, r in report["nodes"].items() if r["result"] == "patched"]
        assert patched == [tb.computes[0]], report["nodes"]
        assert all(ok(tb, ctl, f"sinfo -h -n {n} -o %T").strip() in ("idle", "mixed", "allocated")
                   for n in tb.computes), "a node was left out of service"
    finally:
        ok(tb, ctl, "sacctmgr -i delete user name=kiln-probe-vision")
    chosen = copy_inventory(tb.inventory, tmp_path / "inventory", {"kiln_ssh_password_login": True})
    try:
        out = kiln("deploy", "-i", str(chosen), "--roles", "base", "--limit", ctl)
        assert out.returncode == 0, out.stdout + out.stderr
        assert f"isolation: {ctl} ISOLATION_SSH_PASSWORD: sshd at" in out.stdout and \
            "kiln_ssh_password_login is true; reported, not failed" in out.stdout, out.stdout
    finally:
        out = kiln("deploy", "-i", str(tb.inventory), "--roles", "base", "--limit", ctl)
    assert out.returncode == 0 and f"probe(s) held on {ctl}" in out.stdout, out.stdout + out.stderr

    # the probes' refused sudo must reach the log host (the controller here): with the controller's uploader
    # stopped it never does, and only ISOLATION_AUDIT_TRAIL fails
    ok(tb, ctl, "systemctl stop systemd-journal-upload")
    try:
        found = isolation(tb, tmp_path)
    finally:
        ok(tb, ctl, "systemctl start systemd-journal-upload")
    assert failing(found) == {"ISOLATION_AUDIT_TRAIL"} and "did not reach the log host" in \
        found["ISOLATION_AUDIT_TRAIL"][1], found
    assert not failing(isolation(tb, tmp_path))


def _sql(tb, ctl: str, statement: str) -> str:
    """One statement in the accounting database on the controller (MariaDB's root over its socket)."""
    return ok(tb, ctl, f"mysql -N -B slurm_acct_db -e {shlex.quote(statement)}").strip()


@pytest.mark.proves("slurm accounting", "isolation", tier="nspawn")
def test_a_job_past_the_retention_policy_is_purged_with_its_stored_script_and_a_newer_one_is_kept(slurm):
    """#46: slurmdbd purges what kiln_slurm_accounting_retention says (the default: jobs and steps after 12
    months) at its monthly rollup, and kiln-accounting-orphans deletes the stored scripts no job holds any
    more (Slurm 22.05 keeps them). Two real jobs of alice's, scripts stored; one (and its script's copy) is
    made 14 months old in the database and the last monthly rollup moved back a month (as SchedMD's own
    purge test moves the last hourly one), slurmdbd stopped meanwhile. Once slurmdbd is back that job and its
    steps are gone, and once kiln's service ran its script too, while a copy younger than a day that no job
    holds (one slurmdbd may be writing a job for) stays; the other job and its script are whole."""
    tb, ctl = slurm, slurm.controller
    assert "PurgeJobAfter=12months" in ok(tb, ctl, "cat /etc/slurm/slurmdbd.conf").split()
    jobs = {age: submit(tb, ctl, f"-N1 -t 2 --wrap='echo kiln-retention-{age}'", user="alice") for age in ("old", "new")}
    for age, job in jobs.items():
        wait_for(lambda j=job: job_state(tb, ctl, j) == "COMPLETED", timeout=120, interval=2, what=f"job {job} done")
        wait_for(lambda j=job, a=age: f"kiln-retention-{a}" in on(tb, ctl, f"sacct -j {j} --batch-script").stdout,
                 timeout=60, interval=2, what=f"job {job}'s script stored")
    cluster = re.search(r"^ClusterName\s*=\s*(\S+)", ok(tb, ctl, "scontrol show config"), re.M).group(1)
    jt, st, scripts_table = f"`{cluster}_job_table`", f"`{cluster}_step_table`", f"`{cluster}_job_script_table`"
    scripts = {age: _sql(tb, ctl, f"SELECT script_hash_inx FROM {jt} WHERE id_job={job}") for age, job in jobs.items()}
    assert len(set(scripts.values())) == 2 and "0" not in scripts.values(), scripts
    steps = int(_sql(tb, ctl, f"SELECT COUNT(*) FROM {st} s JOIN {jt} j USING (job_db_inx) WHERE j.id_job={jobs['old']}"))
    assert steps >= 1  # its batch step
    aged, month = "@aged", "@month"
    ok(tb, ctl, "systemctl stop slurmdbd")
    try:
        _sql(tb, ctl, "SET @aged = UNIX_TIMESTAMP(NOW() - INTERVAL 14 MONTH), "
                      "@month = UNIX_TIMESTAMP(DATE_FORMAT(NOW() - INTERVAL 1 MONTH, '%Y-%m-01')); "
                      f"UPDATE {jt} SET time_submit={aged}, time_eligible={aged}, time_start={aged}, "
                      f"time_end={aged} + 5 WHERE id_job={jobs['old']}; "
                      f"UPDATE {st} s JOIN {jt} j USING (job_db_inx) SET s.time_start={aged}, s.time_end={aged} + 5 "
                      f"WHERE j.id_job={jobs['old']}; "
                      f"UPDATE {scripts_table} SET last_used=FROM_UNIXTIME({aged}) WHERE hash_inx={scripts['old']}; "
                      # a cluster whose first rollup has not run yet (slurmdbd rolls up hourly) has no row: one
                      # from last month makes slurmdbd roll up (and purge) from there
                      f"INSERT INTO `{cluster}_last_ran_table` (hourly_rollup, daily_rollup, monthly_rollup) "
                      f"SELECT {month}, {month}, {month} FROM DUAL WHERE NOT EXISTS "
                      f"(SELECT 1 FROM `{cluster}_last_ran_table`); "
                      f"UPDATE `{cluster}_last_ran_table` SET monthly_rollup=LEAST(monthly_rollup, {month}); "
                      f"INSERT INTO {scripts_table} (script_hash, batch_script) VALUES ('kiln-young', 'echo young')")
    finally:
        ok(tb, ctl, "systemctl start slurmdbd")
    try:
        wait_for(lambda: _sql(tb, ctl, f"SELECT COUNT(*) FROM {jt} WHERE id_job={jobs['old']}") == "0", timeout=120,
                 interval=2, what=f"job {jobs['old']} purged at slurmdbd's monthly rollup")
        assert _sql(tb, ctl, f"SELECT COUNT(*) FROM {st} s JOIN {jt} j USING (job_db_inx) "
                             f"WHERE j.id_job={jobs['old']}") == "0"
        ok(tb, ctl, "systemctl start kiln-accounting-orphans.service")  # what its timer runs hourly
        left = _sql(tb, ctl, f"SELECT hash_inx, script_hash FROM {scripts_table}").splitlines()
        assert not any(line.split("\t")[0] == scripts["old"] for line in left), f"the purged job's script stayed: {left}"
        assert any(line.split("\t")[0] == scripts["new"] for line in left), left
        assert any(line.endswith("\tkiln-young") for line in left), f"a copy younger than a day went: {left}"
    finally:
        on(tb, ctl, "mysql slurm_acct_db -e " + shlex.quote(f"DELETE FROM {scripts_table} WHERE script_hash='kiln-young'"))
    wait_for(lambda: on(tb, ctl, "sacctmgr -n show cluster").returncode == 0, timeout=60, what="slurmdbd answering")
    assert ok(tb, ctl, f"sacct -n -X -P -j {jobs['old']} -o JobID -S 2000-01-01").strip() == ""
    assert ok(tb, ctl, f"sacct -n -X -P -j {jobs['new']} -o State").strip() == "COMPLETED"
    assert "kiln-retention-new" in ok(tb, ctl, f"runuser -u alice -- sacct -j {jobs['new']} --batch-script")
    print(f"job {jobs['old']} (made 14 months old) purged with its {steps} step(s) and its stored script; "
          f"job {jobs['new']} and a copy younger than a day kept")
