"""Every check passes on a healthy node and FAILS on the fault it targets.

GPU and fabric tools are the simulators under kiln/testbed/simulators (the real tools' formats, driven by a
state file, with the same faults ``kiln testbed inject`` sets); other commands are answered from a table.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from checks.node import Node, Result
from checks.parsers.mounts import parse_probe
from checks.slurm import JOB_TMP_PLUGIN
from checks.storage import _probed, probe_command
from checks.suites import run_suites
from kiln.testbed.simulate import SIMULATORS
from tests.conftest import REPO
EXPECT = {
    "node": "gpu01",
    "gpu": {"count": 4, "model": "h100", "driver": "535.261.03", "nvswitch": True, "rdma": True, "dcgm_level": 1,
            "kernel_log": "kiln-sim kernel-log --since=-2h"},
    "fabric": {"type": "infiniband", "hca_count": 2, "rate_gbps": 400, "hcas": [], "kernel_log": "true"},
    "storage": [{"path": "/scratch", "type": "tmpfs", "source": "tmpfs", "options": "rw", "warn_percent": 80,
                 "fail_percent": 95}],
    "slurm": {"node": "gpu01", "gpus": 4, "compute": True, "job_tmp": "/var/lib/slurm/job-tmp"},
    "system": {"kernel": "6.1.0-28-amd64", "memlock_unlimited": True, "time_sync": True},
}
PROBE = probe_command(EXPECT["storage"], "gpu01")
JOB_TMP = JOB_TMP_PLUGIN  # how many of slurmd's mappings are job_container/tmpfs's


def probe_report(rc: int, text: str) -> Result:
    """What the storage probe prints for the one mount of EXPECT (checks.parsers.mounts.parse_probe)."""
    return Result(0, f"@@kiln-mount 0 {rc}\n{text}")


HEALTHY = {
    "systemctl is-active nvidia-fabricmanager": Result(0, "active\n"),
    "test -d /sys/module/nvidia_peermem": Result(0, ""),
    "findmnt --json --list -o TARGET,SOURCE,FSTYPE,OPTIONS": Result(0, '{"filesystems": [{"target": "/scratch", '
                                                                       '"source": "tmpfs", "fstype": "tmpfs", "options": "rw,nosuid,size=65536k"}]}'),
    "cat /etc/fstab": Result(0, "tmpfs /scratch tmpfs rw,size=64m 0 0\n"),
    PROBE: probe_report(0, "Mounted on Use% IUse%\n/scratch 3% 1%\n"),
    "systemctl is-active slurmd": Result(0, "active\n"),
    "munge -n | unmunge >/dev/null": Result(0, ""),
    # job_container/tmpfs is one mapping of slurmd's on a testbed node (Slurm 22.05)
    JOB_TMP: Result(0, "1\n"),
    "scontrol -o show node gpu01": Result(0, "NodeName=gpu01 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 Gres=gpu:h100:4 "
                                             "NodeAddr=gpu01 State=IDLE ThreadsPerCore=1 Partitions=batch\n"),
    "uname -r": Result(0, "6.1.0-28-amd64\n"),
    "swapon --show --noheadings": Result(0, ""),
    "cat /proc/$(pidof -s slurmd || echo self)/limits": Result(0, "Max locked memory         unlimited            unlimited            bytes\n"),
    "timedatectl show -p NTPSynchronized --value": Result(0, "yes\n"),
}


class SimNode(Node):
    def __init__(self, state, answers):
        self.answers = answers
        env = dict(os.environ, KILN_SIM_STATE=str(state), PATH=f"{SIMULATORS}:{os.environ['PATH']}")

        def run(command):
            if command in self.answers:
                return self.answers[command]
            out = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, env=env, timeout=30)
            return Result(out.returncode, out.stdout, out.stderr)
        super().__init__("gpu01", run)


@pytest.fixture
def node(tmp_path):
    state = tmp_path / "state.json"
    env = dict(os.environ, KILN_SIM_STATE=str(state))
    subprocess.run([str(SIMULATORS / "kiln-sim"), "init", "--gpus", "4", "--model", "h100", "--driver", "535.261.03",
                    "--nvlinks", "18", "--hcas", "2", "--rate", "400"], check=True, env=env)
    n = SimNode(state, dict(HEALTHY))
    n.inject = lambda fault, gpu=0: subprocess.run([str(SIMULATORS / "kiln-sim"), "inject", fault, "--gpu", str(gpu)],
                                                   check=True, env=env)

    def change(edit):
        """Edit the simulated hardware's state directly (faults kiln testbed inject does not offer)."""
        data = json.loads(state.read_text())
        edit(data)
        state.write_text(json.dumps(data))
    n.change = change
    return n


def failing(verdicts, severity="fail"):
    return sorted({v.id for v in verdicts if v.severity == severity})


def test_healthy_node_passes_every_check(node):
    verdicts = run_suites(node, EXPECT)
    assert failing(verdicts) == [] and failing(verdicts, "warn") == []
    ids = {v.id for v in verdicts}
    for expected in ("GPU_COUNT", "GPU_DRIVER_VERSION", "GPU_ECC_UNCORRECTED", "GPU_REMAPPED_ROWS",
                     "GPU_NVLINK_INACTIVE", "GPU_XID", "GPU_FABRIC_MANAGER", "GPU_FABRIC", "GPU_PEERMEM", "GPU_DCGM_DIAG",
                     "FABRIC_PORT_DOWN", "FABRIC_RATE", "STORAGE_MOUNTED", "SLURM_GRES", "SYSTEM_KERNEL"):
        assert expected in ids


@pytest.mark.parametrize("fault, failed", [
    ("gpu-lost", ["GPU_COUNT", "GPU_LOST", "GPU_XID_79"]),
    ("ecc-uncorrected", ["GPU_ECC_UNCORRECTED"]),
    ("remap-pending", ["GPU_REMAP_PENDING"]),
    ("xid-79", ["GPU_XID_79"]),
    ("xid-48", ["GPU_XID_48"]),
    ("nvlink-down", ["GPU_NVLINK_INACTIVE"]),
    ("ib-port-down", ["FABRIC_PORT_DOWN"]),
    ("ib-rate-low", ["FABRIC_RATE"]),
    ("driver-mismatch", ["GPU_DRIVER_VERSION"]),
    ("fabric-incomplete", ["GPU_FABRIC"]),
])
def test_each_fault_fails_its_check(node, fault, failed):
    node.inject(fault)
    assert failing(run_suites(node, EXPECT)) == failed


def _gpu(field, value, index=1):
    return lambda s: s["gpus"][index].update({field: value})


def _hca(**values):
    return lambda s: s["hcas"][1].update(values)


@pytest.mark.parametrize("edit, failed, warned", [
    (_gpu("name", "NVIDIA A100-SXM4-80GB"), ["GPU_MODEL"], []),
    (_gpu("persistence", "Disabled"), ["GPU_PERSISTENCE"], []),
    (_gpu("ecc", "Disabled"), ["GPU_ECC_MODE"], []),
    (_gpu("retired_pending", "Yes"), ["GPU_RETIRED_PAGES_PENDING"], []),
    (_gpu("remap_failure", "Yes"), ["GPU_REMAP_FAILURE"], []),
    (_gpu("pcie_width", 8), ["GPU_PCIE_WIDTH"], []),
    (_gpu("pcie_gen", 4), [], ["GPU_PCIE_GEN"]),
    (lambda s: s.update(dcgm_fail=["Persistence Mode"]), ["GPU_DCGM_DIAG"], []),
    (lambda s: s["hcas"].pop(), ["FABRIC_HCA_COUNT"], []),
    (_hca(phys="Polling"), ["FABRIC_PORT_LINK"], []),
    (_hca(layer="Ethernet"), ["FABRIC_LINK_LAYER"], []),
    (lambda s: s.update(hcas=[]), ["FABRIC_IBSTAT"], []),
])
def test_each_hardware_state_fault_fails_its_check(node, edit, failed, warned):
    node.change(edit)
    verdicts = run_suites(node, EXPECT)
    assert failing(verdicts) == failed
    assert [w for w in failing(verdicts, "warn") if w != "GPU_PEERMEM"] == warned


def test_unreadable_nvidia_smi_output_fails(node):
    node.answers[("nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,persistence_mode,ecc.mode.current,"
                  "ecc.errors.uncorrected.volatile.total,retired_pages.pending,pcie.link.gen.current,pcie.link.gen.max,"
                  "pcie.link.width.current,pcie.link.width.max,clocks_event_reasons.active --format=csv,noheader,nounits")] = \
        Result(0, "0, NVIDIA H100 80GB HBM3, 00000000:18:00.0\n")  # cut short
    assert failing(run_suites(node, EXPECT, ["gpu"])) == ["GPU_NVIDIA_SMI_UNREADABLE"]


def test_link_flaps_warn(node):
    expect = dict(EXPECT, fabric=dict(EXPECT["fabric"], kernel_log="flaps"))
    node.answers["flaps"] = Result(0, "Aug 17 06:18:01 n1 systemd-networkd[5]: ib6: lost carrier\n" * 6)
    verdicts = run_suites(node, expect, ["fabric"])
    assert failing(verdicts) == [] and failing(verdicts, "warn") == ["FABRIC_LINK_FLAPS"]


def test_storage_from_the_wrong_source_fails(node):
    mount = {"path": "/scratch", "type": "nfs", "source": "nfs01:/export/scratch", "options": "rw",
             "warn_percent": 80, "fail_percent": 95}
    node.answers["findmnt --json --list -o TARGET,SOURCE,FSTYPE,OPTIONS"] = Result(0, (
        '{"filesystems": [{"target": "/scratch", "source": "nfs02:/export/scratch", "fstype": "nfs4", '
        '"options": "rw,hard"}]}'))
    node.answers["cat /etc/fstab"] = Result(0, "nfs01:/export/scratch /scratch nfs rw 0 0\n")
    assert failing(run_suites(node, dict(EXPECT, storage=[mount]), ["storage"])) == ["STORAGE_SOURCE"]


def test_node_to_node_bandwidth_verdict(tmp_path):
    """The ring pair's verdict on a client's output (the simulator's client and server, which need a
    listening socket, are run by tests/unit/test_bandwidth_ring.py)."""
    from checks.fabric import bandwidth_verdict
    env = dict(os.environ, KILN_SIM_STATE=str(tmp_path / "s.json"))
    subprocess.run([str(SIMULATORS / "kiln-sim"), "init", "--gpus", "1", "--model", "h100", "--driver", "x",
                    "--hcas", "1", "--rate", "400"], check=True, env=env)
    row = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n" \
          " 65536      5000             48750.00            24425.00\t\t     0.372696\n"
    verdict = bandwidth_verdict(row, 350, "a -> b")
    assert verdict.severity == "fail" and "204.9 Gb/s, below 350" in verdict.message  # 24425 MiB/s
    assert bandwidth_verdict(row.replace("24425.00", "48750.00"), 350, "a -> b").severity == "ok"
    assert bandwidth_verdict("Couldn't connect\n", 350, "a -> b").severity == "fail"


def test_application_xid_does_not_fail(node):
    node.inject("xid-13")
    verdicts = run_suites(node, EXPECT)
    assert failing(verdicts) == []
    assert "application Xids [13]" in next(v.message for v in verdicts if v.id == "GPU_XID")


def test_clock_throttle_warns(node):
    node.inject("clock-throttle")
    verdicts = run_suites(node, EXPECT)
    assert failing(verdicts) == [] and failing(verdicts, "warn") == ["GPU_THROTTLE"]


def test_driver_not_loaded_is_explained(node):
    node.answers["nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,persistence_mode,ecc.mode.current,"
                 "ecc.errors.uncorrected.volatile.total,retired_pages.pending,pcie.link.gen.current,pcie.link.gen.max,"
                 "pcie.link.width.current,pcie.link.width.max,clocks_event_reasons.active --format=csv,noheader,nounits"] = \
        Result(9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
    verdicts = run_suites(node, EXPECT, ["gpu"])
    assert [(v.id, v.severity) for v in verdicts] == [("GPU_NVIDIA_SMI", "fail")]
    assert "driver is not loaded" in verdicts[0].message


def test_old_driver_field_name_is_retried(node):
    prefix = ("nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,persistence_mode,ecc.mode.current,"
              "ecc.errors.uncorrected.volatile.total,retired_pages.pending,pcie.link.gen.current,pcie.link.gen.max,"
              "pcie.link.width.current,pcie.link.width.max,")
    node.answers[prefix + "clocks_event_reasons.active --format=csv,noheader,nounits"] = \
        Result(2, 'Field "clocks_event_reasons.active" is not a valid field to query.\n')
    assert failing(run_suites(node, EXPECT, ["gpu"])) == []


@pytest.mark.parametrize("command, result, failed", [
    ("systemctl is-active nvidia-fabricmanager", Result(3, "inactive\n"), ["GPU_FABRIC_MANAGER"]),
    ("findmnt --json --list -o TARGET,SOURCE,FSTYPE,OPTIONS", Result(0, '{"filesystems": []}'), ["STORAGE_MOUNTED"]),
    ("findmnt --json --list -o TARGET,SOURCE,FSTYPE,OPTIONS", Result(0, '{"filesystems": [{"target": "/scratch", '
     '"source": "tmpfs", "fstype": "tmpfs", "options": "ro,nosuid"}]}'), ["STORAGE_OPTIONS"]),
    ("findmnt --json --list -o TARGET,SOURCE,FSTYPE,OPTIONS", Result(0, '{"filesystems": [{"target": "/scratch", '
     '"source": "/dev/sdb1", "fstype": "ext4", "options": "rw"}]}'), ["STORAGE_TYPE"]),
    ("findmnt --json --list -o TARGET,SOURCE,FSTYPE,OPTIONS", Result(1, '{"filesystems": [{"targ'),
     ["STORAGE_FINDMNT_UNREADABLE"]),
    (PROBE, probe_report(4, "Mounted on Use% IUse%\n/scratch 3% 1%\n"), ["STORAGE_WRITABLE"]),
    (PROBE, probe_report(0, "Mounted on Use% IUse%\n/scratch 97% 1%\n"), ["STORAGE_FULL"]),
    (PROBE, probe_report(124, "no answer in 10 s"), ["STORAGE_RESPONDING"]),
    (PROBE, probe_report(5, "df: /scratch: Stale file handle"), ["STORAGE_RESPONDING"]),
    (PROBE, probe_report(3, ""), ["STORAGE_MOUNTED"]),
    (PROBE, Result(255, "", "mktemp: No space left on device"), ["STORAGE_PROBE_UNREADABLE"]),
    ("systemctl is-active slurmd", Result(3, "failed\n"), ["SLURM_SLURMD"]),
    ("munge -n | unmunge >/dev/null", Result(1, "", "unmunge: Error: Invalid credential"), ["SLURM_MUNGE"]),
    ("scontrol -o show node gpu01", Result(0, "NodeName=gpu01 Gres=gpu:h100:3 State=IDLE\n"), ["SLURM_GRES"]),
    # slurm.conf says 4, slurmd registered 3: Slurm drains it (INVALID_REG) with its own reason
    ("scontrol -o show node gpu01", Result(0, "NodeName=gpu01 Gres=gpu:h100:4 State=IDLE+DRAIN+INVALID_REG "
                                              "Reason=gres/gpu count reported lower than configured (3 < 4) "
                                              "[slurm@2026-12-03T10:00:00]\n"), ["SLURM_GRES"]),
    ("scontrol -o show node gpu01", Result(0, "NodeName=gpu01 Gres=gpu:h100:4 State=DOWN+NOT_RESPONDING\n"),
     ["SLURM_REGISTERED"]),
    ("scontrol -o show node gpu01", Result(1, "", "Node gpu01 not found"), ["SLURM_REGISTERED"]),
    # slurmd started without job_container/tmpfs: grep counts none (and exits 1)
    (JOB_TMP, Result(1, "0\n"), ["SLURM_JOB_TMP"]),
    (JOB_TMP, Result(2, "", "grep: /proc/self/maps: Permission denied"), ["SLURM_JOB_TMP"]),
    # a node line kiln cannot read whole (a key twice) is no pass: SLURM_REGISTERED fails naming it
    ("scontrol -o show node gpu01", Result(0, "NodeName=gpu01 State=IDLE State=IDLE Gres=gpu:h100:4\n"),
     ["SLURM_REGISTERED"]),
    ("uname -r", Result(0, "6.1.0-30-amd64\n"), ["SYSTEM_KERNEL"]),
    ("swapon --show --noheadings", Result(0, "/swapfile file 2G 0B -2\n"), ["SYSTEM_SWAP"]),
    ("cat /proc/$(pidof -s slurmd || echo self)/limits", Result(0, "Max locked memory         8388608              "
                                                                  "8388608              bytes\n"), ["SYSTEM_MEMLOCK"]),
])
def test_each_node_fault_fails_its_check(node, command, result, failed):
    assert command in node.answers
    node.answers[command] = result
    assert failing(run_suites(node, EXPECT)) == failed


def test_the_mount_probe_run_for_real_names_touchs_error_and_leaves_no_file(tmp_path):
    """The probe's shell itself, on this machine: a writable mount passes and keeps no test file; a mount
    root cannot write to fails STORAGE_WRITABLE with touch's own error; two probes at once (the node's
    health check and an operator's check) use files of their own."""
    if os.geteuid() != 0:
        pytest.skip("needs root: mounts a read-only tmpfs to probe")
    ro = tmp_path / "ro"
    ro.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)], check=True)
    try:
        mounts = [{"path": "/dev/shm", "type": "tmpfs", "source": "tmpfs"},
                  {"path": str(ro), "type": "tmpfs", "source": "tmpfs"}]
        command = probe_command(mounts, "gpu01")
        assert "-$$" in command
        runs = [subprocess.Popen(["/bin/sh", "-c", command], stdout=subprocess.PIPE, text=True) for _ in range(4)]
        outputs = [r.communicate(timeout=30)[0] for r in runs]
        for out in outputs:
            parts = parse_probe(out)
            assert [v for v in _probed(mounts[0], parts[0], Result(0, out), 10) if v.severity != "ok"] == []
            [verdict] = _probed(mounts[1], parts[1], Result(0, out), 10)
            assert verdict.id == "STORAGE_WRITABLE" and "Read-only file system" in verdict.message, verdict
        assert not list(Path("/dev/shm").glob(".kiln-write-check-*"))
    finally:
        subprocess.run(["umount", str(ro)], check=True)


def test_warn_only_faults(node):
    node.answers[PROBE] = probe_report(0, "Mounted on Use% IUse%\n/scratch 85% 1%\n")
    node.answers["timedatectl show -p NTPSynchronized --value"] = Result(0, "no\n")
    node.answers["cat /etc/fstab"] = Result(0, "")
    node.answers["test -d /sys/module/nvidia_peermem"] = Result(1, "")
    verdicts = run_suites(node, EXPECT)
    assert failing(verdicts) == []
    assert failing(verdicts, "warn") == ["GPU_PEERMEM", "STORAGE_FSTAB", "STORAGE_FULL", "SYSTEM_TIME_SYNC"]


def test_drained_by_a_person_is_reported_not_failed(node):
    node.answers["scontrol -o show node gpu01"] = Result(0, "NodeName=gpu01 Gres=gpu:h100:4 State=IDLE+DRAIN "
                                                            "Reason=bad fan, ticket 123 [ops@2026-11-29T10:00:00]\n")
    verdicts = run_suites(node, EXPECT, ["slurm"])
    assert failing(verdicts) == [] and failing(verdicts, "warn") == ["SLURM_DRAINED_BY_PERSON"]
    assert "'bad fan, ticket 123'" in next(v.message for v in verdicts if v.id == "SLURM_DRAINED_BY_PERSON")


def test_a_crashing_suite_fails_on_that_node_only(node):
    node.answers["uname -r"] = None  # a runner bug: no Result
    verdicts = run_suites(node, EXPECT, ["system", "slurm"])
    assert failing(verdicts) == ["SYSTEM_CHECK_CRASHED"]
    assert any(v.suite == "slurm" and v.severity == "ok" for v in verdicts)


def test_nothing_expected_nothing_checked(node):
    assert run_suites(node, {"system": {"memlock_unlimited": False, "time_sync": False}}, ["gpu", "fabric", "storage",
                                                                                          "slurm"]) == []


# --- the node-local runner's Slurm decisions ---

from checks.node_local import drain_or_resume, textfile  # noqa: E402
from checks.verdict import Verdict  # noqa: E402


class SlurmNode(Node):
    def __init__(self, show):
        self.commands = []

        def run(command):
            self.commands.append(command)
            if command.startswith("scontrol -o show node"):
                return Result(0, show)
            return Result(0, "")
        super().__init__("gpu01", run, local=True)


FAILED = [Verdict("GPU_ECC_UNCORRECTED", "fail", "gpu3: 2 uncorrected volatile ECC errors", "gpu")]
PASSED = [Verdict("GPU_COUNT", "ok", "4 GPUs", "gpu")]


def test_a_failure_drains_with_a_kiln_reason():
    node = SlurmNode("NodeName=gpu01 State=IDLE Gres=gpu:h100:4\n")
    assert drain_or_resume(node, "gpu01", FAILED) == "drained"
    assert node.commands[-1] == ("scontrol update nodename=gpu01 state=drain "
                                 "reason='kiln: GPU_ECC_UNCORRECTED gpu3: 2 uncorrected volatile ECC errors'")


def test_a_pass_resumes_only_what_kiln_drained():
    node = SlurmNode("NodeName=gpu01 State=IDLE+DRAIN Reason=kiln: GPU_ECC_UNCORRECTED gpu3 [root@2026-11-29]\n")
    assert drain_or_resume(node, "gpu01", PASSED) == "resumed"
    assert node.commands[-1] == "scontrol update nodename=gpu01 state=resume"
    person = SlurmNode("NodeName=gpu01 State=IDLE+DRAIN Reason=replacing fan, ticket 99 [ops@2026-11-29]\n")
    assert drain_or_resume(person, "gpu01", PASSED) == "left drained by a person"
    assert drain_or_resume(person, "gpu01", FAILED) == "left drained by a person"
    assert not any("update" in c for c in person.commands)


def test_a_drain_slurmctld_refused_is_reported_and_logged_not_claimed(monkeypatch):
    """scontrol update failing (slurmctld busy or away) is not "drained": the action says why, and the
    node's log has a line (the next health check tries again)."""
    import checks.node_local as node_local
    logged = []
    monkeypatch.setattr(node_local, "log", logged.append)

    class Refused(SlurmNode):
        def __init__(self):
            super().__init__("NodeName=gpu01 State=IDLE\n")
            show = self.run

            def run(command):
                if command.startswith("scontrol update"):
                    self.commands.append(command)
                    return Result(1, "", "slurm_update error: Unable to contact slurm controller (connect failure)")
                return show(command)
            self.run = run
    action = drain_or_resume(Refused(), "gpu01", FAILED)
    assert action == "not drained (scontrol: slurm_update error: Unable to contact slurm controller (connect failure))"
    assert logged == [f"{action}: gpu01: kiln: GPU_ECC_UNCORRECTED gpu3: 2 uncorrected volatile ECC errors"]


def test_no_second_drain_for_the_same_reason_and_nothing_when_healthy():
    node = SlurmNode("NodeName=gpu01 State=MIXED+DRAIN Reason=kiln: GPU_ECC_UNCORRECTED gpu3: 2 uncorrected "
                     "volatile ECC errors [root@2026-11-29T10:00:00]\n")
    assert drain_or_resume(node, "gpu01", FAILED).startswith("nothing")
    healthy = SlurmNode("NodeName=gpu01 State=ALLOCATED\n")
    assert drain_or_resume(healthy, "gpu01", PASSED) == "nothing"
    assert not any("update" in c for c in node.commands + healthy.commands)


def test_exit_codes_by_mode(tmp_path, monkeypatch):
    """As the Prolog a failure exits 1 (Slurm requeues the job); as the Epilog it exits 0 (kiln drained the
    node itself; Slurm would drain it again as "Epilog error"); by hand and as HealthCheckProgram, 1."""
    import json

    import checks.node_local as node_local
    expect = tmp_path / "node-checks.json"
    # 99 GPUs fails on any machine (with no nvidia-smi: GPU_NVIDIA_SMI; with one: GPU_COUNT)
    expect.write_text(json.dumps({"gpu": {"count": 99, "kernel_log": "true"}, "local_suites": ["gpu"]}))
    codes = {}
    for mode in ("health", "prolog", "epilog"):
        codes[mode] = node_local.main(["--mode", mode, "--expect", str(expect), "--textfile", str(tmp_path),
                                       "--no-drain", "--json", "--lock", str(tmp_path / "lock")])
    assert codes == {"health": 1, "prolog": 1, "epilog": 0}
    expect.write_text(json.dumps({"gpu": {"count": 0}, "local_suites": ["gpu"]}))  # nothing to fail
    assert node_local.main(["--mode", "prolog", "--expect", str(expect), "--textfile", str(tmp_path), "--no-drain",
                            "--lock", str(tmp_path / "lock")]) == 0


def test_one_node_check_at_a_time(tmp_path, monkeypatch, capsys):
    """Slurm starts a health check every interval even while the last one runs (and kills it at 60 s): its
    run (--wait 0, kiln-node-check-health) that finds another running checks nothing and leaves Slurm alone,
    and says so in JSON when asked for JSON; a person's run and a Prolog wait for the lock."""
    import fcntl
    import json

    import checks.node_local as node_local
    expect = tmp_path / "node-checks.json"
    expect.write_text(json.dumps({"gpu": {"count": 99, "kernel_log": "true"}, "local_suites": ["gpu"]}))
    lock = tmp_path / "lock"
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another run holds it
        monkeypatch.setattr(node_local, "run_suites", lambda *a, **k: pytest.fail("a second run checked"))
        assert node_local.main(["--mode", "health", "--wait", "0", "--expect", str(expect), "--textfile",
                                str(tmp_path), "--lock", str(lock)]) == 0
        assert "another kiln-node-check is still running" in capsys.readouterr().out
        assert node_local.main(["--wait", "0", "--json", "--expect", str(expect), "--lock", str(lock)]) == 0
        busy = json.loads(capsys.readouterr().out)
        assert busy["checked"] is False and "still running" in busy["reason"]
        assert not (tmp_path / "kiln.prom").exists()  # the running one writes the metrics
        monkeypatch.setattr(node_local, "LOCK_WAIT", {"health": 1, "prolog": 1, "epilog": 1})
        started = time.monotonic()
        assert node_local.main(["--expect", str(expect), "--textfile", str(tmp_path), "--lock", str(lock)]) == 0
        assert time.monotonic() - started >= 1  # a person's run waited for the lock (1 s here), then gave up
        assert node_local.main(["--mode", "prolog", "--expect", str(expect), "--textfile", str(tmp_path),
                                "--lock", str(lock)]) == 0  # waited 1 s, then let the job start
    monkeypatch.undo()
    assert node_local.main(["--mode", "health", "--expect", str(expect), "--textfile", str(tmp_path), "--no-drain",
                            "--lock", str(lock)]) == 1  # free again: it checks


def test_prometheus_textfile(tmp_path):
    textfile(FAILED + PASSED, str(tmp_path), 0.25)
    text = (tmp_path / "kiln.prom").read_text()
    assert 'kiln_check_ok{check="GPU_ECC_UNCORRECTED",suite="gpu",severity="fail"} 0' in text
    assert 'kiln_check_ok{check="GPU_COUNT",suite="gpu",severity="ok"} 1' in text
    assert "kiln_check_duration_seconds 0.25" in text and "# TYPE kiln_check_ok gauge" in text


def test_checks_run_on_python_3_9():
    """The node-local runner uses the node's system python3 (Rocky 9 has 3.9): no newer syntax in checks/."""
    import ast
    for path in (REPO / "checks").rglob("*.py"):
        ast.parse(path.read_text(), filename=str(path), feature_version=(3, 9))


NVLINK_DIR = REPO / "tests" / "recorded" / "captured" / "nvidia-smi-nvlink-status"


@pytest.mark.parametrize("capture, model, failing", [
    ("gpuexp-linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.nvlink-s", "h100", []),
    ("azhc-good_nvlink_status.txt", "a100", []),
    ("kiln-made-b200-all-inactive-mixed-case.txt", "b200", ["GPU_NVLINK_INACTIVE"]),
    ("azhc-bad_nvlink_status.txt", "a100", ["GPU_NVLINK_INACTIVE"]),
    ("kiln-made-h100-twelve-links.txt", "h100", ["GPU_NVLINK_COUNT"]),
    ("kiln-made-h100-gpu-without-links.txt", "h100", ["GPU_NVLINK_COUNT"]),
])
def test_nvlink_status_and_count_on_recorded_outputs(capture, model, failing):
    from checks.gpu import check_nvlink, expected_nvlinks
    text = (NVLINK_DIR / capture).read_text()
    node = Node("gpu01", lambda command: Result(0, text, ""))
    verdicts = check_nvlink(node, expected_nvlinks({"model": model, "nvswitch": True}))
    assert sorted(v.id for v in verdicts if v.failed) == failing, verdicts
    assert {v.id for v in verdicts} == {"GPU_NVLINK_INACTIVE", "GPU_NVLINK_COUNT"}


def test_the_inventory_overrides_the_models_nvlink_count():
    from checks.gpu import check_nvlink, expected_nvlinks
    text = (NVLINK_DIR / "kiln-made-h100-twelve-links.txt").read_text().split("GPU 1")[0]
    node = Node("gpu01", lambda command: Result(0, text, ""))
    assert expected_nvlinks({"model": "h100", "nvlinks": 18}) == 18  # bridged cards: on by the setting
    assert not [v for v in check_nvlink(node, expected_nvlinks({"model": "h100", "nvlinks": 18})) if v.failed]
    assert expected_nvlinks({"model": "l40s", "nvswitch": True}) is None
    assert expected_nvlinks({"model": "h100", "nvlinks": 0}) == 0
    assert expected_nvlinks({"model": "h100"}) is None  # a PCIe H100 without NVSwitch: not checked by default
    assert expected_nvlinks({"model": "h100", "nvswitch": True}) == 18


def test_host_programs_of_another_version_warn_and_a_host_without_them_is_not_judged(tmp_path):
    """SYSTEM_KILN_PROGRAMS: the VERSION line the deploy wrote beside the host programs against this kiln's."""
    from checks import system
    from checks.version import installed, package_files, version_line
    from kiln.check.expectations import host_programs
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "a.py").write_text("A = 1\n")
    (package / "sub" / "b.py").write_text("B = 2\n")
    (package / "test_nodes.py").write_text("x\n")  # the pytest entry is not installed on hosts
    line = version_line("0.1.0", package_files(package))
    assert list(package_files(package)) == ["pkg/a.py", "pkg/sub/b.py"]
    (package / "a.py").write_text("A = 3\n")
    assert version_line("0.1.0", package_files(package)) != line  # one module changed: another version
    (package / "VERSION").write_text(line + "\n")
    assert installed(package) == line and installed(tmp_path) == ""
    wanted = host_programs()
    assert wanted.startswith("kiln-host-programs ") and wanted == host_programs()

    def verdicts(answer: str) -> list:
        node = Node("n1", lambda c: Result(0, answer if c == system.HOST_PROGRAMS else "", ""), local=True)
        return [v for v in system.run(node, {"system": {"host_programs": wanted, "memlock_unlimited": False,
                                                        "time_sync": False}}) if v.id == "SYSTEM_KILN_PROGRAMS"]
    assert [v.severity for v in verdicts(wanted + "\n")] == ["ok"]
    stale = verdicts("kiln-host-programs 0.0.9 0123456789ab\n")
    assert [v.severity for v in stale] == ["warn"] and "kiln deploy" in stale[0].message
    assert verdicts("") == []  # no host programs on this host: nothing to compare


def test_an_ecc_mode_change_pending_warns_and_the_fabric_read_from_nvidia_smi_q(node):
    """nvidia-smi -q as the stand-in prints it: an ECC mode that changes at the next reset warns; the
    fabric's registration shows per GPU."""
    node.change(lambda s: s["gpus"][2].update(ecc_pending="Disabled"))
    verdicts = run_suites(node, EXPECT)
    [pending] = [v for v in verdicts if v.id == "GPU_ECC_MODE_PENDING"]
    assert pending.severity == "warn" and "ECC is Enabled, Disabled after the next reset" in pending.message
    assert [v.message for v in verdicts if v.id == "GPU_FABRIC"] == ["4 GPUs registered with the NVLink fabric"]


CAPTURED_Q = REPO / "tests" / "recorded" / "captured" / "nvidia-smi-q"


@pytest.mark.parametrize("name, edit, expected", [
    ("gpud-nvidia-smi-query.535.161.08.out.0.valid", None, [("GPU_FABRIC", "ok")]),
    ("gpuexp-linux-x86_64__nvidia-h200__590.48.01.load.q", None, [("GPU_FABRIC", "ok")]),
    ("gpud-nvidia-smi-query.535.154.05.out.0.valid", None, []),  # RTX 4090s: in no fabric (N/A)
    ("gpud-nvidia-smi-query.535.161.08.out.0.valid",
     lambda t: t.replace("State                             : Completed", "State                             : In Progress", 1),
     [("GPU_FABRIC", "fail")]),
    ("gpuexp-linux-x86_64__nvidia-h200__590.48.01.load.q",
     lambda t: t.replace("Summary                                    : N/A", "Summary                                    : Unhealthy", 1),
     [("GPU_FABRIC", "fail")]),
    ("gpuexp-linux-x86_64__nvidia-h200__590.48.01.load.q",
     lambda t: t.replace("Status                                         : Success", "Status                                         : Failure", 1),
     [("GPU_FABRIC", "fail")]),
    ("gpud-nvidia-smi-query.535.129.03.out.0.valid.a10",
     lambda t: t.replace("Pending                           : Enabled", "Pending                           : Disabled", 1),
     [("GPU_ECC_MODE_PENDING", "warn")]),
    ("gpud-nvidia-smi-query.535.183.01.out.0.invalid", None, [("GPU_NVIDIA_SMI_UNREADABLE", "fail")]),  # cut short
])
def test_the_full_query_checks_on_real_outputs(name, edit, expected):
    from checks.gpu import FULL_QUERY, check_full_query
    text = (CAPTURED_Q / name).read_text()
    if edit:
        changed = edit(text)
        assert changed != text, "the edit must change the recorded output"
        text = changed
    verdicts = check_full_query(Node("gpu01", lambda command: Result(0, text) if command == FULL_QUERY else None))
    assert sorted({(v.id, v.severity) for v in verdicts}) == expected, verdicts
