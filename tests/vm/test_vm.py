"""On VMs with their own kernel: what Slurm's cgroup v2 limits, the initramfs and real reboots do.

Every test runs on the shared VM cluster (conftest.py). Each limit is shown twice where it can be: the
job that breaks it is stopped, and one within it is not (so a check that cannot fail would show)."""

from __future__ import annotations

import json
import re
import time

import pytest

from kiln.testbed.inventory import NFS_MOUNT
from tests.testbed.slurm_helpers import job_state, kiln, ok, on, wait_for


def _sbatch(tb, options: str, script: str) -> str:
    out = ok(tb, tb.controller, f"sbatch --parsable {options} --wrap {_quote(script)}")
    return out.strip().split(";")[0]


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _finished(tb, job: str, timeout: float = 240) -> str:
    """The job's final state, as accounting (slurmdbd) records it."""
    done = ("COMPLETED", "FAILED", "OUT_OF_MEMORY", "CANCELLED", "TIMEOUT", "NODE_FAIL")
    wait_for(lambda: job_state(tb, tb.controller, job).split()[0:1] and
             job_state(tb, tb.controller, job).split()[0] in done, timeout=timeout, interval=3,
             what=f"job {job} to end")

    def accounted() -> str:
        return on(tb, tb.controller, f"sacct -n -X -P -j {job} -o State").stdout.strip()
    return wait_for(lambda: accounted() if accounted().split(" ")[0] in done else "", timeout=60, interval=2,
                    what=f"job {job} in accounting")


@pytest.mark.proves("base", "slurm", tier="vm")
def test_vms_run_cgroup_v2_and_their_own_kernel(vms):
    for node in [vms.controller, *vms.computes]:
        assert ok(vms, node, "stat -fc %T /sys/fs/cgroup").strip() == "cgroup2fs"
    config = ok(vms, vms.controller, "scontrol show config")
    assert re.search(r"^JobAcctGatherType\s*=\s*jobacct_gather/cgroup", config, re.M), config
    cgroup_conf = ok(vms, vms.computes[0], "cat /etc/slurm/cgroup.conf")
    for line in ("CgroupPlugin=cgroup/v2", "ConstrainCores=yes", "ConstrainRAMSpace=yes", "ConstrainDevices=yes"):
        assert line in cgroup_conf, cgroup_conf


def test_a_job_over_its_memory_is_killed_by_the_cgroup_and_accounted_out_of_memory(vms):
    # 600 MiB written (so resident) against --mem=256M: the job's memory.max stops it
    over = _sbatch(vms, "-N1 --mem=256M -o /dev/null", "python3 -c \"b = b'x' * (600 << 20); print(len(b))\"")
    within = _sbatch(vms, "-N1 --mem=256M -o /dev/null", "python3 -c \"b = b'x' * (64 << 20); print(len(b))\"")
    assert _finished(vms, over).startswith("OUT_OF_MEMORY"), on(vms, vms.controller, f"sacct -j {over}").stdout
    assert _finished(vms, within).startswith("COMPLETED")


def test_a_one_cpu_job_is_confined_to_one_cpu(vms):
    script = "cat /sys/fs/cgroup$(cut -d: -f3 /proc/self/cgroup)/cpuset.cpus.effective; nproc"
    one = ok(vms, vms.controller, f"timeout 120 srun -N1 -n1 --cpus-per-task=1 sh -c {_quote(script)}").split()
    two = ok(vms, vms.controller, f"timeout 120 srun -N1 -n1 --cpus-per-task=2 sh -c {_quote(script)}").split()
    print(f"cpuset of a 1-CPU job: {one[0]} (nproc {one[1]}); of a 2-CPU job: {two[0]} (nproc {two[1]})")
    assert one[1] == "1" and re.fullmatch(r"\d+", one[0]), one
    assert two[1] == "2", two


@pytest.mark.proves("base", tier="vm")
def test_a_users_login_sessions_are_held_to_the_login_limits_and_roots_are_not(vms):
    """kiln_login_user_limits on the login host (the controller VM: 1 core, 50% of memory, 64 tasks for
    the VM testbed): alice's session runs in her user slice with those limits in its cgroup, and a 100-process
    loop stops at the task limit; root's session (kiln's own) starts all 100."""
    ctl = vms.controller
    key = vms.key.with_suffix(".pub").read_text().strip()
    ok(vms, ctl, f"install -d -o alice -g alice -m 700 /home/alice/.ssh && echo '{key}' > /home/alice/.ssh/authorized_keys"
                 " && chown alice:alice /home/alice/.ssh/authorized_keys")
    slice_dir = "/sys/fs/cgroup/user.slice/user-2101.slice"
    seen = on(vms, ctl, f"cat /proc/self/cgroup {slice_dir}/cpu.max {slice_dir}/pids.max {slice_dir}/memory.max",
              user="alice")  # alice logs in over ssh: sshd's pam_systemd puts her session in her user slice
    assert seen.returncode == 0, seen
    lines = seen.stdout.split("\n")
    assert lines[0].startswith("0::/user.slice/user-2101.slice/"), lines
    assert lines[1:3] == ["100000 100000", "64"] and lines[3] not in ("max", ""), lines
    # the sleeps' output away from ssh's channel, which would otherwise stay open until they end
    loop = "i=0; while [ $i -lt 100 ]; do sleep 120 >/dev/null 2>&1 & i=$((i+1)); done; echo started $i"
    try:
        alice = on(vms, ctl, f"sh -c {_quote(loop)}", timeout=120, user="alice")
        running = int(on(vms, ctl, "pgrep -c -u alice -x sleep").stdout.strip() or 0)
    finally:
        on(vms, ctl, "pkill -u alice -x sleep")
    assert "started 100" not in alice.stdout and "Cannot fork" in alice.stderr, alice
    assert 0 < running < 64, running
    root = ok(vms, ctl, f"sh -c {_quote(loop + '; pkill -P $$ -x sleep')}", timeout=120)
    assert "started 100" in root, root
    print(f"login limits: alice's loop stopped at {running} of 100 processes (TasksMax 64, with her shell); root's started 100")


@pytest.mark.proves("gpu gres", tier="vm")
def test_a_gpu_job_sees_only_its_stand_in_devices(vms):
    # The stand-in /dev/nvidiaN have no driver: a device the job may use fails to open with ENXIO (6),
    # one the cgroup's device filter denies with EPERM (1).
    probe = ("import errno\nfor i in range(4):\n    try:\n        open(f'/dev/nvidia{i}')\n        print(i, 0)\n"
             "    except OSError as e:\n        print(i, e.errno)\n")
    ok(vms, vms.controller, f"printf %s {_quote(probe)} > /srv/kiln-shared/gpu-probe.py")
    out = ok(vms, vms.controller, "timeout 120 srun -N1 --gres=gpu:1 sh -c "
             "'echo cuda $CUDA_VISIBLE_DEVICES; python3 /srv/kiln-shared/gpu-probe.py'")
    print(out)
    errors = dict(line.split() for line in out.splitlines() if not line.startswith("cuda"))
    assert sorted(errors.values()) == ["1", "1", "1", "6"], out
    two = ok(vms, vms.controller, "timeout 120 srun -N1 --gres=gpu:2 python3 /srv/kiln-shared/gpu-probe.py")
    assert sorted(dict(line.split() for line in two.splitlines()).values()) == ["1", "1", "6", "6"], two


@pytest.mark.proves("nvidia_driver", tier="vm")
def test_nouveau_is_blacklisted_in_the_initramfs_and_absent_after_a_slurm_reboot(vms):
    node = vms.computes[-1]
    initramfs = ok(vms, node, "lsinitramfs /boot/initrd.img-$(uname -r)")
    assert "etc/modprobe.d/kiln-nouveau.conf" in initramfs
    boot_id = ok(vms, node, "cat /proc/sys/kernel/random/boot_id").strip()
    started = time.monotonic()
    ok(vms, vms.controller, f"scontrol reboot nextstate=resume reason=kiln-vm-test {node}")
    wait_for(lambda: (on(vms, node, "cat /proc/sys/kernel/random/boot_id", timeout=20).stdout.strip() or boot_id)
             != boot_id, timeout=420, interval=5, what=f"{node} to boot again")
    wait_for(lambda: on(vms, vms.controller, f"sinfo -h -n {node} -o %T").stdout.strip() == "idle", timeout=240,
             interval=3, what=f"{node} back in service")
    print(f"{node}: scontrol reboot to idle in {time.monotonic() - started:.0f} s")
    assert ok(vms, vms.controller, f"timeout 120 srun -w {node} hostname").strip() == node
    assert "nouveau" not in ok(vms, node, "lsmod")
    # what udev does for a device's alias: the blacklist applies, nothing is loaded
    on(vms, node, "modprobe -b nouveau")
    assert "nouveau" not in ok(vms, node, "lsmod")
    assert ok(vms, node, "modprobe -n -v nouveau").strip(), "the kernel has a nouveau module to keep out"


def _monotonic(tb, node: str, unit: str, prop: str = "ActiveEnterTimestampMonotonic") -> int:
    return int(ok(tb, node, f"systemctl show -p {prop} --value {unit}").strip() or 0)


@pytest.mark.proves("images", "storage", tier="vm")
def test_a_production_image_waits_for_the_network_before_it_mounts_nfs(vms):
    """The VMs boot from images built for production (tests/vm/cluster.py): Debian's
    systemd-networkd-wait-online is active there (the testbed's container shortcut is in no image), and
    at boot the NFS mount of /etc/fstab comes only after network-online.target, which waited for the
    node's address. The node is the one the reboot test above rebooted (rebooted here if it was not)."""
    node = vms.computes[-1]
    mount = ok(vms, node, f"systemd-escape -p --suffix=mount {NFS_MOUNT}").strip()
    booted_with_it = _monotonic(vms, node, mount) < 300 * 1_000_000  # mounted at boot, not by a deploy since
    if not booted_with_it:
        boot_id = ok(vms, node, "cat /proc/sys/kernel/random/boot_id").strip()
        ok(vms, vms.controller, f"scontrol reboot nextstate=resume reason=kiln-vm-test {node}")
        wait_for(lambda: (on(vms, node, "cat /proc/sys/kernel/random/boot_id", timeout=20).stdout.strip() or boot_id)
                 != boot_id, timeout=420, interval=5, what=f"{node} to boot again")
        wait_for(lambda: on(vms, node, f"findmnt -n {NFS_MOUNT}", timeout=20).stdout.strip() != "", timeout=240,
                 interval=3, what=f"{NFS_MOUNT} mounted on {node}")
    assert ok(vms, node, "systemctl is-enabled systemd-networkd-wait-online.service").strip() == "enabled"
    assert ok(vms, node, "systemctl is-active systemd-networkd-wait-online.service").strip() == "active"
    assert on(vms, node, "systemctl cat kiln-cgroup-rw.service").returncode != 0  # the container unit: not here
    after = ok(vms, node, f"systemctl show -p After --value {mount}").split()
    assert "network-online.target" in after, after
    waited = _monotonic(vms, node, "systemd-networkd-wait-online.service")
    online = _monotonic(vms, node, "network-online.target")
    mounted = _monotonic(vms, node, mount)
    print(f"{node}: wait-online done {waited / 1e6:.2f} s, network-online {online / 1e6:.2f} s, "
          f"{NFS_MOUNT} mounted {mounted / 1e6:.2f} s after boot")
    assert 0 < waited <= online <= mounted, (waited, online, mounted)
    assert ok(vms, node, f"findmnt -n -o FSTYPE {NFS_MOUNT}").strip() == "nfs4"


JOB_TMP = "/var/lib/slurm/job-tmp"  # the VM testbed's kiln_slurm_job_tmp base_path


@pytest.mark.proves("slurm", "kiln check", tier="vm")
def test_each_job_has_its_own_tmp_and_shm_that_another_users_job_never_sees_and_that_go_when_it_ends(vms):
    """kiln_slurm_job_tmp (on in the VM testbed, job_container/tmpfs): alice's job writes /tmp and /dev/shm;
    the node's own hold none of it, a step of her job sees both, bob's job on the same node sees neither and
    writes its own; when alice's job ends, its directory below the base path is gone. SLURM_JOB_TMP passes
    (its failure, on a slurmd without the plugin, is in tests/unit/test_checks.py)."""
    ctl, node = vms.controller, vms.computes[0]
    alice = ok(vms, ctl, f"su - alice -c {_quote(f'sbatch --parsable -w {node} -n1 -t 5 -o /dev/null --wrap ' + _quote('echo alice-secret > /tmp/kiln-jt && echo alice-shm > /dev/shm/kiln-jt && sleep 300'))}").strip()
    kept = f"{JOB_TMP}/{node}/{alice}"  # Slurm 22.05: BasePath/NODE/JOB/.JOB is the job's /tmp, 0700 its user's
    try:
        wait_for(lambda: on(vms, node, f"test -s {kept}/.{alice}/kiln-jt").returncode == 0, timeout=120, interval=2,
                 what=f"alice's job {alice} writing its /tmp")
        assert ok(vms, node, f"stat -c '%U %a' {kept}/.{alice}").split() == ["alice", "700"]
        assert on(vms, node, "ls /tmp/kiln-jt /dev/shm/kiln-jt").returncode != 0  # the node's own: neither
        step = ok(vms, ctl, f"su - alice -c 'srun --jobid={alice} --overlap -w {node} cat /tmp/kiln-jt /dev/shm/kiln-jt'")
        assert step.split() == ["alice-secret", "alice-shm"], step
        bob = ok(vms, ctl, f"su - bob -c {_quote(f'sbatch --parsable -w {node} -n1 -t 5 -o /var/tmp/kiln-jt-bob-%j.out --wrap ' + _quote('ls -A /tmp /dev/shm; cat /tmp/kiln-jt /dev/shm/kiln-jt; echo bob > /tmp/kiln-jt && cat /tmp/kiln-jt'))}").strip()
        assert _finished(vms, bob) == "COMPLETED"
        seen = ok(vms, node, f"cat /var/tmp/kiln-jt-bob-{bob}.out")
        assert "alice" not in seen and seen.count("No such file") == 2 and seen.rstrip().endswith("bob"), seen
        assert ok(vms, node, f"cat {kept}/.{alice}/kiln-jt").strip() == "alice-secret"  # bob wrote his own
    finally:
        on(vms, ctl, f"scancel {alice}")
        on(vms, node, "rm -f /var/tmp/kiln-jt-bob-*.out")
    wait_for(lambda: on(vms, node, f"test -e {kept}").returncode != 0, timeout=120, interval=2,
             what=f"{kept} removed at the job's end")
    out = kiln("check", "-i", str(vms.inventory), "--suite", "slurm", "--json", "-", "--limit", node, timeout=600)
    checks = {c["id"]: (c["severity"], c["message"]) for c in json.loads(out.stdout)["nodes"][node]["checks"]}
    assert checks["SLURM_JOB_TMP"][0] == "ok", checks["SLURM_JOB_TMP"]
    print(f"{node}: bob's job saw {seen!r}; {checks['SLURM_JOB_TMP'][1]}")


def _logs_suite(vms) -> dict[str, dict[str, tuple[str, str]]]:
    out = kiln("check", "-i", str(vms.inventory), "--suite", "logs", "--json", "-", timeout=300)
    return {n: {c["id"]: (c["severity"], c["message"]) for c in v["checks"]}
            for n, v in json.loads(out.stdout)["nodes"].items()}


@pytest.mark.proves("base", "monitoring", "kiln check", tier="vm")
def test_auditd_records_a_change_to_slurms_files_and_a_refused_sudo_and_the_log_host_receives_them(vms):
    """On VMs the kernel audits (a container's cannot): auditd runs with kiln's rules on every node; a write
    to /etc/slurm on a compute node and bob's refused sudo on the controller are in the audit log under
    their key and type, and the node's audit record reaches the log host; AUDIT_RULES fails when the rules
    are deleted from the kernel and passes once augenrules loads them again."""
    node, ctl = vms.computes[0], vms.controller
    found = _logs_suite(vms)
    assert all(v["AUDIT_RULES"][0] == "ok" and v["LOG_SHIPPING"][0] == "ok" for v in found.values()), found
    print(f"{node}: {found[node]['AUDIT_RULES'][1]}")
    token = f"kiln-audit-{int(time.time())}"
    ok(vms, node, f"touch /etc/slurm/{token} && rm /etc/slurm/{token}")
    # --input-logs: ausearch reads standard input when it is not a terminal, as under ssh
    assert token in ok(vms, node, "ausearch --input-logs -k kiln-slurm -i 2>/dev/null | tail -n 40")
    on(vms, ctl, "echo not-my-password | runuser -u bob -- sudo -S -p '' true")
    refused = ok(vms, ctl, "ausearch --input-logs -m USER_AUTH -i 2>/dev/null | tail -n 20")
    assert "bob" in refused and "res=failed" in refused, refused

    written, said = time.monotonic(), []

    def shipped():
        out = kiln("logs", "-i", str(vms.inventory), node, "--grep", token, "--json", timeout=120)
        said[:] = [out.stderr.strip()[-300:]] if out.returncode else []
        return json.loads(out.stdout)["entries"] if out.returncode == 0 else []
    try:  # the VMs emulate their CPUs: each kiln logs takes seconds there
        entries = wait_for(shipped, timeout=120, interval=3, what=f"{node}'s audit record of {token} on the log host")
        print(f"{node}'s audit record on the log host {time.monotonic() - written:.0f} s after the write")
    except AssertionError:
        print(on(vms, node, f"journalctl -q --no-pager -o json _TRANSPORT=audit | grep {token} | tail -n 3").stdout)
        print(on(vms, ctl, "ls -la /var/log/journal/remote").stdout)
        print(kiln("logs", "-i", str(vms.inventory), node, "-n", "5").stdout, said)
        raise
    print(f"on the log host: {entries[0]['program'] or '?'}: {entries[0]['message'][:120]}")

    ok(vms, node, "auditctl -D")
    try:
        found = _logs_suite(vms)
        assert found[node]["AUDIT_RULES"][0] == "fail" and "no rule loaded under kiln-slurm" in found[node]["AUDIT_RULES"][1]
    finally:
        ok(vms, node, "augenrules --load")
    assert _logs_suite(vms)[node]["AUDIT_RULES"][0] == "ok"
