"""Each job's own /tmp and /dev/shm, live on the shared testbed (#46: job_container/tmpfs, on by default):
alice's job writes both; the node's own /tmp and /dev/shm hold none of it; a step of her job and her SSH
session on the node (pam_slurm_adopt joins the job's namespace) see her files; bob's job on the same node
sees neither and writes its own; when alice's job ends its directory below the base path is gone.
SLURM_JOB_TMP passes, fails on a slurmd started from a slurm.conf without JobContainerType (the node then
drains itself), and ``kiln deploy`` restarts slurmd with the plugin (the node returns by itself)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.testbed.slurm_helpers import deploy_json, job_state, kiln, ok, on, submit, wait_for

BASE = "/var/lib/slurm/job-tmp"  # kiln_slurm_job_tmp's default base_path


def _slurm_check(tb, node: str) -> tuple[str, str]:
    out = kiln("check", "-i", str(tb.inventory), "--suite", "slurm", "--json", "-", "--limit", node, timeout=300)
    checks = {c["id"]: (c["severity"], c["message"]) for c in json.loads(out.stdout)["nodes"][node]["checks"]}
    return checks["SLURM_JOB_TMP"]


def _ssh_as(tb, node: str, user: str, command: str) -> subprocess.CompletedProcess:
    """``command`` in a new SSH session of ``user`` on ``node`` (tb's key, host key checked; a connection of
    its own, so PAM, and pam_slurm_adopt with it, runs for this login)."""
    argv = tb.ssh_command(node, [command])
    argv[1:1] = ["-l", user, "-o", "ControlMaster=no", "-o", "ControlPath=none"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def _state(tb, node: str) -> str:
    return on(tb, tb.controller, f"sinfo -h -n {node} -o %T").stdout.strip()


@pytest.mark.proves("slurm", "kiln check", tier="nspawn")
def test_each_job_has_its_own_tmp_and_shm_gone_when_it_ends_and_the_check_fails_on_a_slurmd_without_them(slurm):
    tb, ctl = slurm, slurm.controller
    node = tb.computes[0]
    key = tb.key.with_suffix(".pub").read_text().strip()
    ok(tb, node, f"install -d -o alice -g alice -m 700 /home/alice/.ssh && echo '{key}' > /home/alice/.ssh/authorized_keys"
                 " && chown alice:alice /home/alice/.ssh/authorized_keys")
    alice = submit(tb, ctl, f"-w {node} -n1 -t 5 -o /dev/null --wrap 'echo alice-secret > /tmp/kiln-jt && "
                            "echo alice-shm > /dev/shm/kiln-jt && sleep 300'", user="alice")
    kept = f"{BASE}/{node}/{alice}"  # Slurm keeps the job's /tmp here (BasePath/NODE/JOB/.JOB), 0700 its user's
    try:
        wait_for(lambda: on(tb, node, f"test -s {kept}/.{alice}/kiln-jt").returncode == 0, timeout=90,
                 what=f"alice's job {alice} writing its /tmp")
        assert ok(tb, node, f"stat -c '%U %a' {kept}/.{alice}").split() == ["alice", "700"]
        assert on(tb, node, "ls /tmp/kiln-jt /dev/shm/kiln-jt").returncode != 0  # the node's own: neither
        step = ok(tb, ctl, f"su - alice -c 'srun --jobid={alice} --overlap -w {node} cat /tmp/kiln-jt /dev/shm/kiln-jt'")
        assert step.split() == ["alice-secret", "alice-shm"], step
        adopted = _ssh_as(tb, node, "alice", "cat /tmp/kiln-jt /dev/shm/kiln-jt")
        assert adopted.stdout.split() == ["alice-secret", "alice-shm"], adopted.stdout + adopted.stderr
        bob = submit(tb, ctl, f"-w {node} -n1 -t 5 -o /var/tmp/kiln-jt-bob-%j.out --wrap 'ls -A /tmp /dev/shm; "
                              "cat /tmp/kiln-jt /dev/shm/kiln-jt; echo bob > /tmp/kiln-jt && cat /tmp/kiln-jt'", user="bob")
        wait_for(lambda: job_state(tb, ctl, bob) == "COMPLETED", timeout=90, what=f"bob's job {bob}")
        seen = ok(tb, node, f"cat /var/tmp/kiln-jt-bob-{bob}.out")
        assert "alice" not in seen and seen.count("No such file") == 2 and seen.rstrip().endswith("bob"), seen
        assert ok(tb, node, f"cat {kept}/.{alice}/kiln-jt").strip() == "alice-secret"  # bob's write was his own
    finally:
        on(tb, ctl, f"scancel {alice}")
        on(tb, node, "rm -f /var/tmp/kiln-jt-bob-*.out")
    wait_for(lambda: on(tb, node, f"test -e {kept}").returncode != 0, timeout=90, what=f"{kept} removed at the job's end")

    severity, said = _slurm_check(tb, node)
    assert severity == "ok", said
    # slurmd started from a slurm.conf without JobContainerType: jobs there would share the node's /tmp
    ok(tb, node, "sed -i '/^JobContainerType=/d' /etc/slurm/slurm.conf && systemctl restart slurmd")
    try:
        severity, said = _slurm_check(tb, node)
        assert severity == "fail" and "without job_container/tmpfs" in said, said
        wait_for(lambda: "drain" in _state(tb, node), timeout=90, what=f"{node} draining itself (its health check)")
    finally:
        rc, data, text = deploy_json(tb.inventory, "--roles", "slurm", "--limit", node)
        assert rc == 0, text
    changed = next(h for h in data["hosts"] if h["host"] == node)["changed"]
    print(f"{node}: bob's job saw {seen!r}; the deploy that put JobContainerType back changed {changed}")
    assert "slurm: slurm.conf" in changed and "slurm: restart slurmd (if its files changed)" in changed, changed
    severity, said = _slurm_check(tb, node)
    assert severity == "ok", said
    wait_for(lambda: _state(tb, node) == "idle", timeout=120, what=f"{node} returned by its health check")
