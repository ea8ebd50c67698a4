"""Slurm deployed by `kiln deploy` on the shared testbed (1 controller + 2 compute), proven with real jobs.

The GPUs are stand-in device files (the testbed makes /dev/nvidia0..3 on compute nodes): Slurm's GRES
allocation, device cgroups and accounting are real; there is no GPU behind them.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.testbed.slurm_helpers import (copy_inventory, deploy_json, job_state, kiln, ok, on, submit, suite_verdicts,
                                         wait_for)

pytestmark = pytest.mark.testbed


@pytest.mark.proves("base", "slurm", tier="nspawn")
def test_first_deploy_changes_every_host(slurm):
    hosts = {h["host"]: h for h in slurm.first_deploy["hosts"]}
    assert set(hosts) == {slurm.controller, *slurm.computes}
    assert all(h["status"] == "changed" for h in hosts.values()), hosts
    # Services were checked to stay up after their start (slurmd can die right after a "successful" start).
    assert "slurm: slurmd stays active after its start" in hosts[slurm.computes[0]]["changed"]
    assert "slurm: slurmctld stays active after its start" in hosts[slurm.controller]["changed"]


def test_base_role_on_the_nodes(slurm):
    for node in [slurm.controller, *slurm.computes]:
        ids = ok(slurm, node, "id -u slurm; id -u munge; id -u alice; id -g alice; id -Gn alice").split("\n")
        assert ids[:4] == ["980", "981", "2101", "2101"] and "vision" in ids[4].split()
        hosts = ok(slurm, node, "cat /etc/hosts")
        assert all(f" {n}\n" in hosts for n in [slurm.controller, *slurm.computes])
    # slurmd waits for GPU device files (nvidia-persistenced, where a node has it) and munge
    after = ok(slurm, slurm.computes[0], "systemctl show slurmd -p After")
    assert "nvidia-persistenced.service" in after and "munge.service" in after
    # Jobs get slurmd's locked-memory limit (unlimited on a real node, for RDMA and NCCL), never the
    # submitting shell's (PropagateResourceLimitsExcept=MEMLOCK). Testbed nodes' init has 8 MiB.
    out = ok(slurm, slurm.controller, "su - alice -c 'ulimit -l 64; ulimit -l; srun -N1 sh -c \"ulimit -l\"'")
    assert out.split() == ["64", "8192"], out


def test_srun_runs_on_every_compute_node(slurm):
    out = ok(slurm, slurm.controller, f"timeout 60 srun -N{len(slurm.computes)} hostname")
    assert sorted(out.split()) == sorted(slurm.computes)


@pytest.mark.proves("slurm accounting", tier="nspawn")
def test_batch_job_completes_and_is_accounted(slurm):
    job = submit(slurm, slurm.controller, "-N1 -o /srv/kiln-shared/job-%j.out --wrap 'hostname; sleep 1'")
    wait_for(lambda: job_state(slurm, slurm.controller, job) == "COMPLETED", timeout=90, what=f"job {job} COMPLETED")
    out = ok(slurm, slurm.controller, f"cat /srv/kiln-shared/job-{job}.out")
    assert out.strip() in slurm.computes
    # sacct reads slurmdbd (MariaDB): the job is in the accounting database.
    acct = ok(slurm, slurm.controller, f"sacct -n -X -P -j {job} -o JobID,State,Cluster,NodeList")
    assert acct.strip().split("|")[:3] == [job, "COMPLETED", slurm.name]


@pytest.mark.proves("gpu gres", tier="nspawn")
def test_gpu_gres_gives_exactly_the_devices_asked_for(slurm):
    out = ok(slurm, slurm.controller, "timeout 60 srun -N1 --gres=gpu:2 sh -c 'echo $CUDA_VISIBLE_DEVICES; "
                                      "ls /dev/nvidia*; cat /dev/nvidia3 >/dev/null 2>&1 && echo open3 || echo denied3'")
    lines = out.split()
    visible = lines[0].split(",")
    assert len(visible) == 2 and all(v.isdigit() for v in visible), out
    # ConstrainDevices: a GPU the job was not given cannot be opened (devices cgroup), unless it was given.
    if "3" not in visible:
        assert "denied3" in lines, out


def test_more_gpus_than_a_node_has_is_refused(slurm):
    out = on(slurm, slurm.controller, "timeout 30 srun -N1 --gres=gpu:5 true")
    assert out.returncode != 0
    assert "Requested node configuration is not available" in out.stderr


def test_team_at_its_gpu_limit_waits_with_the_limit_named(slurm):
    ctl = slurm.controller
    first = submit(slurm, ctl, "--gres=gpu:2 -o /tmp/limit-%j.out --wrap 'sleep 120'", user="alice")
    second = None
    try:
        wait_for(lambda: job_state(slurm, ctl, first) == "RUNNING", timeout=60, what="alice's 2-GPU job running")
        second = submit(slurm, ctl, "--gres=gpu:1 -o /tmp/limit-%j.out --wrap 'true'", user="alice")
        # The scheduler names the reason on its next pass.
        wait_for(lambda: ok(slurm, ctl, f"squeue -h -j {second} -o '%T %r'").strip() == "PENDING AssocGrpGRES",
                 timeout=60, what="the second job PENDING with reason AssocGrpGRES")
        # bob's team (language) has its own limit: his GPU job runs meanwhile.
        out = ok(slurm, ctl, "su - bob -c 'timeout 60 srun --gres=gpu:1 printenv CUDA_VISIBLE_DEVICES'")
        assert out.strip().isdigit()
    finally:
        on(slurm, ctl, f"scancel {first} {second or ''}")


def test_fair_share_of_the_teams_in_sshare(slurm):
    out = ok(slurm, slurm.controller, "sshare -n -P -a -o Account,User,RawShares")
    # sshare indents accounts by depth in the tree: strip it
    rows = {(f[0].strip(), f[1]): f[2] for f in (line.split("|") for line in out.splitlines())}
    assert rows[("vision", "")] == "60" and rows[("language", "")] == "40", out
    assert ("vision", "alice") in rows and ("language", "bob") in rows


def test_pam_slurm_adopt_lets_in_only_users_with_a_job(slurm):
    node = slurm.computes[0]
    key = slurm.key.with_suffix(".pub").read_text()
    ok(slurm, node, f"install -d -o alice -g alice -m 700 /home/alice/.ssh && echo '{key.strip()}' > "
                    "/home/alice/.ssh/authorized_keys && chown alice:alice /home/alice/.ssh/authorized_keys")
    refused = on(slurm, node, "true", user="alice")
    assert refused.returncode != 0, "alice got in with no job on the node"
    job = submit(slurm, slurm.controller, f"-w {node} -o /tmp/adopt-%j.out --wrap 'sleep 120'", user="alice")
    try:
        wait_for(lambda: job_state(slurm, slurm.controller, job) == "RUNNING", timeout=60, what="alice's job")
        inside = on(slurm, node, "cat /proc/self/cgroup", user="alice")
        assert inside.returncode == 0, inside.stderr
        assert f"job_{job}" in inside.stdout  # the ssh session was adopted into the job
        # and not moved out again into a logind session scope: the slurm role took pam_systemd out of
        # sshd's stack (with it, the session's cgroup line here reads .../session-N.scope)
        assert ".scope" not in inside.stdout, inside.stdout
        assert "pam_systemd" not in ok(slurm, node, "grep -v '^#' /etc/pam.d/common-session")
    finally:
        on(slurm, slurm.controller, f"scancel {job}")
    # root is never affected
    assert on(slurm, node, "true").returncode == 0
    # SYSTEM_LOGIN_ACCESS asks the node's own PAM stack for each team's probe account (never a job): kept out;
    # with pam_slurm_adopt's line gone, a user without a job is let in and the check names the probe accounts
    found = suite_verdicts(slurm.inventory, "system", node)
    assert found["SYSTEM_LOGIN_ACCESS"] == ("ok", "sshd keeps out kiln-probe-vision, kiln-probe-language, with no job "
                                                  "on this node (pam_slurm_adopt)"), found
    ok(slurm, node, "sed -i '/pam_slurm_adopt\\.so/d' /etc/pam.d/sshd")
    try:
        assert on(slurm, node, "true", user="alice").returncode == 0, "alice not let in without pam_slurm_adopt"
        severity, message = suite_verdicts(slurm.inventory, "system", node)["SYSTEM_LOGIN_ACCESS"]
        assert severity == "fail" and "kiln-probe-vision (vision) is let in with no job on this node" in message, message
    finally:
        rc, _, text = deploy_json(slurm.inventory, "--roles", "slurm", "--limit", node)
    assert rc == 0, text
    assert on(slurm, node, "true", user="alice").returncode != 0, "alice got in with no job after kiln deploy"
    assert suite_verdicts(slurm.inventory, "system", node)["SYSTEM_LOGIN_ACCESS"][0] == "ok"


def test_second_deploy_changes_nothing(slurm):
    rc, data, text = deploy_json(slurm.inventory)
    slurm.outputs.append(text)
    assert rc == 0, text
    assert {h["status"] for h in data["hosts"]} == {"no change"}, text


def test_partition_change_touches_only_slurm_conf_and_a_running_job_survives(slurm, tmp_path):
    ctl = slurm.controller
    job = submit(slurm, ctl, f"-w {slurm.computes[0]} -o /tmp/survive-%j.out --wrap 'sleep 300'")
    changed = None
    try:
        wait_for(lambda: job_state(slurm, ctl, job) == "RUNNING", timeout=60, what="the long job running")
        changed = copy_inventory(slurm.inventory, tmp_path / "inv", {"kiln_slurm_partitions": [
            {"name": "batch", "groups": ["testbed_compute"], "default": True},
            {"name": "debug", "groups": ["testbed_compute"], "max_time": "00:30:00", "priority_tier": 2}]})
        rc, data, text = deploy_json(changed)
        slurm.outputs.append(text)
        assert rc == 0, text
        for host in data["hosts"]:
            expected = ["slurm: slurm.conf"]
            if host["host"] == ctl:
                # the new partition is billed (its nodes have prices): the job summary's list of billed
                # partitions, beside slurm.conf, is the only other file
                expected += ["monitoring: kiln-job-summary's Prometheus and prices",
                             "slurm: scontrol reconfigure (slurm.conf changed)"]
            assert host["changed"] == expected, host
        part = ok(slurm, ctl, "scontrol show partition debug")
        assert "MaxTime=00:30:00" in part
        assert job_state(slurm, ctl, job) == "RUNNING"
        # and back: again only slurm.conf
        rc, data, text = deploy_json(slurm.inventory)
        changed = None
        assert rc == 0 and all("slurm: slurm.conf" in h["changed"] for h in data["hosts"]), text
        assert job_state(slurm, ctl, job) == "RUNNING"
        assert on(slurm, ctl, "scontrol show partition debug").returncode != 0
    finally:
        on(slurm, ctl, f"scancel {job}")
        if changed is not None:  # failed half-way: the shared testbed gets its inventory back
            deploy_json(slurm.inventory)


def test_limit_to_one_node_keeps_slurm_conf_identical_everywhere(slurm):
    rc, data, text = deploy_json(slurm.inventory, "--limit", slurm.computes[-1])
    slurm.outputs.append(text)
    assert rc == 0, text
    assert [h["host"] for h in data["hosts"]] == [slurm.computes[-1]]
    assert data["hosts"][0]["status"] == "no change"
    sums = {n: ok(slurm, n, "sha256sum /etc/slurm/slurm.conf").split()[0]
            for n in [slurm.controller, *slurm.computes]}
    assert len(set(sums.values())) == 1, sums


def test_dry_run_shows_the_diff_and_changes_nothing(slurm, tmp_path):
    changed = copy_inventory(slurm.inventory, tmp_path / "inv", {"kiln_slurm_partitions": [
        {"name": "batch", "groups": ["testbed_compute"], "default": True, "max_time": "2-00:00:00"}]})
    before = ok(slurm, slurm.controller, "sha256sum /etc/slurm/slurm.conf")
    out = kiln("deploy", "-i", str(changed), "--dry-run")
    slurm.outputs.append(out.stdout + out.stderr)
    assert out.returncode == 3, out.stdout + out.stderr       # changes pending
    assert re.search(rf"would change +{slurm.name}\[01-05\]", out.stdout), out.stdout   # one folded line
    assert f"+PartitionName=batch Nodes={slurm.name}[02-05] Default=YES MaxTime=2-00:00:00" in out.stdout
    assert f"-PartitionName=batch Nodes={slurm.name}[02-05] Default=YES MaxTime=INFINITE" in out.stdout
    assert ok(slurm, slurm.controller, "sha256sum /etc/slurm/slurm.conf") == before
    same = kiln("deploy", "-i", str(slurm.inventory), "--dry-run")
    assert same.returncode == 0 and re.search(rf"no change +{slurm.name}\[01-05\]", same.stdout), same.stdout


def test_secrets_have_right_modes_and_never_leak(slurm):
    for node in [slurm.controller, *slurm.computes]:
        assert ok(slurm, node, "stat -c '%a %U %G' /etc/munge/munge.key").strip() == "400 munge munge"
    assert ok(slurm, slurm.controller, "stat -c '%a %U %G' /etc/slurm/slurmdbd.conf").strip() == "600 slurm slurm"
    secrets = slurm.inventory.parent / "secrets" / slurm.name
    password = (secrets / "slurmdbd.password").read_text().strip()
    key = (secrets / "munge.key").read_bytes()
    assert ok(slurm, slurm.controller, "sha256sum < /etc/munge/munge.key").split()[0] == hashlib.sha256(key).hexdigest()
    forms = [password, key.hex()[:32], base64.b64encode(key)[:32].decode()]
    for text in slurm.outputs:
        for form in forms:
            assert form not in text
    # -e: a generated password may start with "-"
    tracked = subprocess.run(["git", "grep", "-l", "-F", "-e", password], capture_output=True, text=True, cwd=REPO)
    assert tracked.returncode == 1 and tracked.stdout == ""
    # the cluster CA's key and each host's TLS key: in no output either
    tls_keys = [(secrets / "tls" / "ca.key").read_text(), (secrets / "tls" / "hosts" / f"{slurm.controller}.key").read_text()]
    for text in slurm.outputs:
        assert not any(k.splitlines()[1] in text for k in tls_keys)
    assert (secrets.stat().st_mode & 0o777) == 0o700
    assert all((f.stat().st_mode & 0o777) == (0o700 if f.is_dir() else 0o600) for f in secrets.rglob("*"))


def test_a_failing_operation_is_reported_for_its_host_only(slurm):
    node = slurm.computes[-1]
    ok(slurm, node, "mv /etc/slurm/cgroup.conf /root/cgroup.conf.saved && mkdir /etc/slurm/cgroup.conf")
    try:
        rc, data, text = deploy_json(slurm.inventory)
        slurm.outputs.append(text)
        assert rc == 1, text
        hosts = {h["host"]: h for h in data["hosts"]}
        assert hosts[node]["status"] == "failed"
        assert hosts[node]["failed_operation"] == "slurm: cgroup.conf"
        assert hosts[node]["next_step"] and hosts[node]["error"]
        assert all(h["status"] == "no change" for n, h in hosts.items() if n != node)
    finally:
        ok(slurm, node, "rmdir /etc/slurm/cgroup.conf && mv /root/cgroup.conf.saved /etc/slurm/cgroup.conf")


def test_a_node_with_another_os_stops_the_run_before_any_change(slurm, tmp_path):
    node = slurm.computes[0]
    before = {n: ok(slurm, n, "sha256sum /etc/slurm/slurm.conf") for n in [slurm.controller, *slurm.computes]}
    # one Slurm host said to run another release than the others: refused before any connection (the
    # hosts that run Slurm run one OS release: kiln/inventory/cluster_checks.py)
    mixed = copy_inventory(slurm.inventory, tmp_path / "mixed", {"kiln_nvidia_source": "cuda"},
                           {node: {"kiln_os": "ubuntu2204"}})
    out = kiln("deploy", "-i", str(mixed))
    assert out.returncode == 2 and f"{node} runs ubuntu2204 but" in out.stdout + out.stderr, out.stdout + out.stderr
    # every host said to run Ubuntu while they run Debian 12: each node's own os-release stops the run
    # (NVIDIA's repository serves Ubuntu; Debian's non-free archive would be refused before any connection)
    changed = copy_inventory(slurm.inventory, tmp_path / "inv", {"kiln_slurm_partitions": [
        {"name": "other", "groups": ["testbed_compute"], "default": True}], "kiln_nvidia_source": "cuda",
        "kiln_os": "ubuntu2204"})
    rc, data, text = deploy_json(changed)
    slurm.outputs.append(text)
    assert rc == 1, text
    assert data["stopped"] and "no host was changed" in data["stopped"]
    bad = next(h for h in data["hosts"] if h["host"] == node)
    assert "kiln_os 'ubuntu2204'" in bad["error"] and "Debian GNU/Linux 12" in bad["error"]
    assert "kiln_os: debian12" in bad["error"]
    after = {n: ok(slurm, n, "sha256sum /etc/slurm/slurm.conf") for n in before}
    assert after == before


def test_plain_pyinfra_runs_the_same_roles(slurm):
    pyinfra = Path(sys.executable).parent / "pyinfra"
    out = subprocess.run([str(pyinfra), "deploy/inventory.py", "deploy/site.py", "-y"], cwd=REPO, capture_output=True,
                         text=True, timeout=600, env=dict(os.environ, KILN_INVENTORY=str(slurm.inventory)))
    slurm.outputs.append(out.stdout + out.stderr)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    # it converged to exactly what kiln deploy converges to
    rc, data, text = deploy_json(slurm.inventory)
    assert rc == 0 and {h["status"] for h in data["hosts"]} == {"no change"}, text


# Polls the secret files (and their staging names) and every process's argv while a deploy runs; what it
# saw goes to /root/kiln-watch.out. The password to look for is read from a file, never from argv.
WATCHER = r'''
import os, time
paths = ["/etc/munge/munge.key", "/etc/munge/munge.key.kiln-new", "/etc/slurm/slurmdbd.conf",
         "/etc/slurm/slurmdbd.conf.kiln-new"]
password = open("/root/kiln-watch.pw", "rb").read().strip()
seen, argv, me, end = set(), set(), str(os.getpid()), time.time() + 600
while not os.path.exists("/root/kiln-watch.stop") and time.time() < end:
    for p in paths:
        try:
            s = os.lstat(p)
            seen.add((p, s.st_mode & 0o7777, s.st_uid, s.st_gid))
        except FileNotFoundError:
            pass
    if password:
        for pid in os.listdir("/proc"):
            if pid.isdigit() and pid != me:
                try:
                    if password in open(f"/proc/{pid}/cmdline", "rb").read():
                        argv.add(pid)
                except OSError:
                    pass
with open("/root/kiln-watch.out", "w") as out:
    for p, mode, uid, gid in sorted(seen):
        out.write(f"{p} {mode:o} {uid} {gid}\n")
    for pid in sorted(argv):
        out.write(f"ARGV {pid}\n")
'''


def test_secret_files_are_never_wider_on_a_node_during_a_deploy(slurm):
    """The munge key and slurmdbd.conf are written afresh while a watcher polls their modes (and every
    process's argv for the database password): never wider than 0600 root or their final mode."""
    ctl, compute = slurm.controller, slurm.computes[0]
    password = (slurm.inventory.parent / "secrets" / slurm.name / "slurmdbd.password").read_text().strip()
    for node in (ctl, compute):
        ok(slurm, node, f"rm -f /root/kiln-watch.*; cat > /root/kiln-watch.py <<'EOF'\n{WATCHER}\nEOF")
        secret = password if node == ctl else ""  # the database password exists on the controller only
        ok(slurm, node, f"umask 077; printf '%s' {shlex.quote(secret)} > /root/kiln-watch.pw; "
                        "rm -f /etc/munge/munge.key /etc/slurm/slurmdbd.conf; "
                        "setsid -f python3 /root/kiln-watch.py >/dev/null 2>&1 < /dev/null")
    try:
        rc, data, text = deploy_json(slurm.inventory)
        slurm.outputs.append(text)
        assert rc == 0, text
    finally:
        for node in (ctl, compute):
            ok(slurm, node, "touch /root/kiln-watch.stop; for i in $(seq 50); do [ -f /root/kiln-watch.out ] && break; "
                            "sleep 0.2; done; rm -f /root/kiln-watch.pw")
    ids = {name: ok(slurm, ctl, f"id -u {name}; id -g {name}").split() for name in ("munge", "slurm")}
    for node in (ctl, compute):
        seen = ok(slurm, node, "cat /root/kiln-watch.out").splitlines()
        assert not [line for line in seen if line.startswith("ARGV")], seen  # no argv held the password
        modes = [line.split() for line in seen]
        assert any(p == "/etc/munge/munge.key" for p, *_ in modes), seen  # the watcher saw the key written
        for path, mode, uid, gid in modes:
            owner = "munge" if "munge" in path else "slurm"
            assert int(mode, 8) & 0o077 == 0, f"{node}: {path} seen with mode {mode}"
            # chown sets both at once, but a stat beside it may see the new owner with the old group (seen
            # once: munge:root): each is root's or the final one, and with no group or other bits neither widens it
            assert uid in ("0", ids[owner][0]) and gid in ("0", ids[owner][1]), f"{node}: {path} seen owned by {uid}:{gid}"
    assert ok(slurm, ctl, "stat -c '%a %U' /etc/slurm/slurmdbd.conf").split() == ["600", "slurm"]
    wait_for(lambda: on(slurm, ctl, "sinfo -h -N -o '%N %T'").stdout.count("idle") == len(slurm.computes),
             timeout=90, what="every compute node idle again after munge's restart")


def test_a_hostile_but_valid_inventory_converges(slurm, tmp_path):
    """The oddest values the formats allow (names with . _ -, a Slurm time with days, features, a mount point
    with @ + = , : ~) deploy cleanly, run a job, and a second deploy changes nothing."""
    ctl = slurm.controller
    odd_team = {"name": "_ml.vision-2", "shares": 5, "gid": 24001,
                "users": [{"name": "a_b.c-d", "uid": 24002}]}
    teams = yaml.safe_load((slurm.inventory / "group_vars" / "all" / "testbed.yml").read_text())["kiln_teams"]
    changed = copy_inventory(slurm.inventory, tmp_path / "inv", {
        "kiln_teams": teams + [odd_team],
        "kiln_slurm_partitions": [{"name": "batch", "groups": ["testbed_compute"], "default": True},
                                  {"name": "_odd.part-1", "groups": ["testbed_compute"], "max_time": "12-03:04:00"}]})
    compute_vars = changed / "group_vars" / "testbed_compute.yml"
    data = yaml.safe_load(compute_vars.read_text())
    data["kiln_features"] = ["fast.nvme-1_x"]
    data["kiln_storage_mounts"].append({"path": "/mnt/k@i+l=n,x:y~z", "type": "tmpfs", "source": "tmpfs",
                                        "options": "rw,size=8m"})
    compute_vars.write_text(yaml.safe_dump(data, sort_keys=False))
    try:
        rc, data, text = deploy_json(changed)
        slurm.outputs.append(text)
        assert rc == 0, text
        rc, data, text = deploy_json(changed)
        assert rc == 0 and {h["status"] for h in data["hosts"]} == {"no change"}, text
        node = slurm.computes[0]
        assert "MaxTime=12-03:04:00" in ok(slurm, ctl, "scontrol show partition _odd.part-1")
        assert "fast.nvme-1_x" in ok(slurm, ctl, f"scontrol show node {node}")
        assert ok(slurm, node, "id -nG a_b.c-d").split() == ["a_b.c-d", "_ml.vision-2"]
        assert ok(slurm, node, "findmnt -n -o FSTYPE '/mnt/k@i+l=n,x:y~z'").strip() == "tmpfs"
        assert "_ml.vision-2" in ok(slurm, ctl, "sacctmgr -nP show account _ml.vision-2 format=account")
        out = ok(slurm, ctl, "timeout 90 srun -p _odd.part-1 -N1 -t 1 hostname")
        assert out.strip() in slurm.computes, out
    finally:
        rc, _, text = deploy_json(slurm.inventory)
        # kiln leaves accounts the inventory no longer names (their jobs' history is Slurm's): the test's own
        # team goes, so that it holds no share of root's fair share in the tests that follow
        on(slurm, ctl, "sacctmgr -i delete user a_b.c-d account=_ml.vision-2; sacctmgr -i delete account _ml.vision-2")
        assert rc == 0, text
