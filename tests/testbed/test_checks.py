"""kiln's node checks on the deployed testbed: `kiln check` over SSH, each injected fault reported with its
id, and Slurm's HealthCheckProgram draining and resuming nodes.

The GPUs and HCAs here are the simulators of kiln/testbed/simulators (real formats, no hardware): this proves
the checks and the drain logic, never the GPUs. Faults: `kiln testbed inject NODE FAULT`.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from checks.suites import OPT_IN, SUITES
from kiln.testbed.inventory import HEALTH_CHECK_INTERVAL, TESTBED_VERSIONS
from tests.testbed.slurm_helpers import copy_inventory, job_state, kiln, ok, on, submit, wait_for

pytestmark = pytest.mark.testbed

# fault -> (kiln check exit code, the ids that must be reported failing (or warning, for exit 0))
FAULTS = {
    "gpu-lost": (1, {"GPU_LOST", "GPU_COUNT", "GPU_XID_79"}),
    "ecc-uncorrected": (1, {"GPU_ECC_UNCORRECTED"}),
    "remap-pending": (1, {"GPU_REMAP_PENDING"}),
    "xid-79": (1, {"GPU_XID_79"}),
    "xid-13": (0, set()),  # an application's own Xid: never a node fault
    "nvlink-down": (1, {"GPU_NVLINK_INACTIVE"}),
    "ib-port-down": (1, {"FABRIC_PORT_DOWN"}),
    "ib-rate-low": (1, {"FABRIC_RATE"}),
    "mount-missing": (1, {"STORAGE_MOUNTED"}),
    "clock-throttle": (0, {"GPU_THROTTLE"}),
    "driver-mismatch": (1, {"GPU_DRIVER_VERSION"}),
    "nccl-slow": (0, set()),  # only a job across nodes shows it: test_cluster_nccl_check_finds_the_slow_pair
}


def check_json(tb, tmp_path, *args, inventory=None):
    out = kiln("check", "-i", str(inventory or tb.inventory), "--json", str(tmp_path / "check.json"), *args, timeout=300)
    data = json.loads((tmp_path / "check.json").read_text())
    return out, data


@pytest.fixture(scope="module")
def nodes(slurm):
    return slurm


@pytest.fixture(autouse=True)
def healthy_again(request):
    """After each test every compute node is healthy and back in service: HealthCheckProgram runs every
    few seconds and may have drained a node while a fault was injected; one run now resumes it."""
    yield
    tb = request.getfixturevalue("nodes")
    for node in tb.computes:
        on(tb, node, "kiln-sim clear; kiln-node-check >/dev/null")
    wait_for(lambda: on(tb, tb.controller, "sinfo -h -N -o '%N %T'").stdout.count("idle") == len(tb.computes),
             timeout=60, what="every compute node idle again")


def with_bandwidth_check(tb, tmp_path):
    """The testbed inventory with the opt-in node-to-node ib_write_bw ring on (threshold 350 Gb/s; the
    simulated links report 390 when healthy)."""
    return copy_inventory(tb.inventory, tmp_path / "inv", {"kiln_check_ib_bandwidth_gbps": 350})


@pytest.mark.proves("kiln check", "storage", tier="nspawn")
def test_check_passes_on_the_healthy_testbed_and_writes_reports(nodes, tmp_path):
    out, data = check_json(nodes, tmp_path, "--junit", str(tmp_path / "j.xml"), "--html", str(tmp_path / "r.html"),
                           inventory=with_bandwidth_check(nodes, tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert set(data["nodes"]) == {nodes.controller, *nodes.computes}
    assert data["summary"]["fail"] == 0
    warned = {n: [c["id"] for c in v["checks"] if c["severity"] == "warn"] for n, v in data["nodes"].items()}
    assert not any(warned.values()), warned    # a healthy testbed is all OK (the README's demo ends so)
    compute = {c["id"] for c in data["nodes"][nodes.computes[0]]["checks"]}
    assert {"GPU_COUNT", "GPU_DRIVER_VERSION", "FABRIC_PORT_DOWN", "FABRIC_BANDWIDTH", "STORAGE_MOUNTED",
            "STORAGE_SHARED", "SLURM_GRES", "SLURM_REGISTERED", "SYSTEM_SWAP", "SYSTEM_KERNEL_SAME"} <= compute
    junit = (tmp_path / "j.xml").read_text()
    default = [s for s in SUITES if s not in OPT_IN]  # the workload suite runs only when named
    assert junit.count("<testcase") == (1 + len(nodes.computes)) * len(default) and 'failures="0"' in junit
    page = (tmp_path / "r.html").read_text()
    assert all(n in page for n in nodes.computes) and "GPU_ECC_UNCORRECTED" in page and "<script" not in page
    assert "verdict" in out.stdout and "summary: 5 ok, 0 warn, 0 failed" in out.stdout
    assert re.search(rf"^{nodes.name}\[02-05\]\s+OK\s", out.stdout, re.M), out.stdout  # the computes fold
    assert "....." not in out.stdout                                          # no pytest progress dots


@pytest.mark.parametrize("fault", list(FAULTS))
def test_each_injected_fault_is_reported_with_its_id(nodes, tmp_path, fault):
    node = nodes.computes[0]
    code, ids = FAULTS[fault]
    assert kiln("testbed", "inject", "--name", nodes.name, node, fault).returncode == 0
    try:
        out, data = check_json(nodes, tmp_path, "--limit", node, "--suite", "gpu,fabric,storage")
        assert out.returncode == code, out.stdout
        checks = data["nodes"][node]["checks"]
        failed = {c["id"] for c in checks if c["severity"] == "fail"}
        warned = {c["id"] for c in checks if c["severity"] == "warn"}
        assert failed == (ids if code else set()), out.stdout
        assert code or ids <= warned, out.stdout
    finally:
        assert kiln("testbed", "clear", "--name", nodes.name, node).returncode == 0


def test_node_to_node_bandwidth_below_threshold_fails(nodes, tmp_path):
    node = nodes.computes[0]
    assert kiln("testbed", "inject", "--name", nodes.name, node, "ib-rate-low").returncode == 0
    try:
        out, data = check_json(nodes, tmp_path, "--limit", "compute", "--suite", "fabric",
                               inventory=with_bandwidth_check(nodes, tmp_path))
        assert out.returncode == 1
        bandwidth = {n: [c for c in v["checks"] if c["id"] == "FABRIC_BANDWIDTH"][0] for n, v in data["nodes"].items()}
        assert bandwidth[node]["severity"] == "fail" and "below 350" in bandwidth[node]["message"]
        assert bandwidth[nodes.computes[1]]["severity"] == "ok"
    finally:
        assert kiln("testbed", "clear", "--name", nodes.name, node).returncode == 0


def node_fields(tb, node):
    line = ok(tb, tb.controller, f"scontrol show node {node} -o")
    state = line.split("State=")[1].split()[0]
    reason = line.split("Reason=")[1].split(" [")[0] if "Reason=" in line else ""
    return state, reason


@pytest.mark.proves("health", tier="nspawn")
def test_health_check_drains_a_failing_node_and_resumes_it(nodes):
    node = nodes.computes[1]
    ok(nodes, node, "kiln-sim inject ecc-uncorrected --gpu 2")
    try:
        # HealthCheckNodeState=CYCLE runs it on each node once per interval: drained within one interval,
        # plus the run itself and this test's 1 s polls
        start = time.monotonic()
        wait_for(lambda: "DRAIN" in node_fields(nodes, node)[0], timeout=3 * HEALTH_CHECK_INTERVAL + 15,
                 what=f"{node} drained by the health check")
        took = time.monotonic() - start
        assert took <= HEALTH_CHECK_INTERVAL + 8, f"drained after {took:.1f} s, the interval is {HEALTH_CHECK_INTERVAL} s"
        state, reason = node_fields(nodes, node)
        assert reason.startswith("kiln: GPU_ECC_UNCORRECTED gpu2"), reason
    finally:
        ok(nodes, node, "kiln-sim clear")
    wait_for(lambda: "DRAIN" not in node_fields(nodes, node)[0], timeout=3 * HEALTH_CHECK_INTERVAL + 15,
             what=f"{node} resumed after the fault cleared")
    # metrics for node_exporter
    prom = ok(nodes, node, "cat /var/lib/prometheus/node-exporter/kiln.prom")
    assert 'kiln_check_ok{check="GPU_ECC_UNCORRECTED",suite="gpu",severity="ok"} 1' in prom


def test_a_node_drained_by_a_person_is_never_resumed(nodes):
    node = nodes.computes[1]
    ok(nodes, nodes.controller, f"scontrol update nodename={node} state=drain reason='fan replacement, ticket 7'")
    try:
        ok(nodes, node, "kiln-sim inject xid-79")
        on(nodes, node, "kiln-node-check")  # one run now, as slurmd would
        assert node_fields(nodes, node) [1] == "fan replacement, ticket 7"
        ok(nodes, node, "kiln-sim clear")
        out = on(nodes, node, "kiln-node-check")
        assert out.returncode == 0 and "left drained by a person" in out.stdout, out.stdout
        state, reason = node_fields(nodes, node)
        assert "DRAIN" in state and reason == "fan replacement, ticket 7"
    finally:
        ok(nodes, node, "kiln-sim clear")
        ok(nodes, nodes.controller, f"scontrol update nodename={node} state=resume")


def test_prolog_and_epilog_drain_a_broken_node_and_requeue_its_job(nodes, tmp_path):
    """kiln_slurm_check_prolog / _epilog on, HealthCheckProgram off (so only they act). A job sent to a node
    whose GPU broke: the prolog drains the node with kiln's reason (Slurm keeps it, not "Prolog error") and
    the job is requeued, not held; once the fault is gone and the node-local check resumed the node, the job
    runs. A fault that appears during a job: the epilog drains the node with kiln's reason, the job itself
    completed. Afterwards the shared testbed is deployed back as it was."""
    inventory = copy_inventory(nodes.inventory, tmp_path / "inventory", changes={
        "kiln_slurm_check_prolog": True, "kiln_slurm_check_epilog": True, "kiln_slurm_health_check": False})
    node, jobs = nodes.computes[2], []
    try:
        out = kiln("deploy", "-i", str(inventory), "--roles", "health,slurm")
        assert out.returncode == 0, out.stdout + out.stderr
        conf = ok(nodes, node, "cat /etc/slurm/slurm.conf")
        assert "Prolog=/usr/local/sbin/kiln-node-check-prolog" in conf and "HealthCheckProgram" not in conf
        ok(nodes, node, "kiln-sim inject ecc-uncorrected --gpu 1")
        job = submit(nodes, nodes.controller, f"-w {node} -o /dev/null --wrap true")
        jobs.append(job)

        def requeued() -> bool:  # COMPLETING while the node's epilog runs, then PENDING
            show = ok(nodes, nodes.controller, f"scontrol show job {job} -o")
            return "Restarts=1" in show and "JobState=PENDING" in show
        wait_for(requeued, timeout=60, what=f"job {job} requeued by the prolog")
        state, reason = node_fields(nodes, node)
        assert "DRAIN" in state and reason.startswith("kiln: GPU_ECC_UNCORRECTED gpu1"), (state, reason)
        show = ok(nodes, nodes.controller, f"scontrol show job {job} -o")
        assert "JobState=PENDING" in show and "Priority=0 " not in show and "Held" not in show, show
        ok(nodes, node, "kiln-sim clear")
        assert "slurm: resumed" in ok(nodes, node, "kiln-node-check")  # the next health check run, by hand
        # Slurm makes a requeued job wait about 2 min (its EligibleTime); an operator can start it now
        ok(nodes, nodes.controller, f"scontrol update jobid={job} starttime=now")
        wait_for(lambda: job_state(nodes, nodes.controller, job) == "COMPLETED", timeout=60, what=f"job {job} done")

        marker = "/var/tmp/kiln-epilog-test.out"
        on(nodes, node, f"rm -f {marker}")
        job = submit(nodes, nodes.controller, f"-w {node} -o {marker} --wrap 'echo started; sleep 5'")
        jobs.append(job)
        # RUNNING in squeue while the prolog still checks the node: a fault injected then is the prolog's
        # (drain and requeue). The job's own first line means the prolog has passed.
        wait_for(lambda: "started" in on(nodes, node, f"cat {marker}").stdout, timeout=60,
                 what=f"job {job} past its prolog")
        ok(nodes, node, "kiln-sim inject remap-pending")
        try:  # the job's 5 s, then the epilog's checks and drain; CI's two busy cores can stretch both
            wait_for(lambda: job_state(nodes, nodes.controller, job) == "COMPLETED", timeout=180, what=f"job {job} done")
        except AssertionError as e:
            show = on(nodes, nodes.controller, f"scontrol show job {job} -o; sinfo -N -o '%N %T %E'").stdout
            raise AssertionError(f"{e}: {show[:1500]}") from None
        wait_for(lambda: "DRAIN" in node_fields(nodes, node)[0], timeout=30, what=f"{node} drained by the epilog")
        assert node_fields(nodes, node)[1].startswith("kiln: GPU_REMAP_PENDING"), node_fields(nodes, node)
    finally:
        on(nodes, nodes.controller, f"scancel {' '.join(jobs)}")  # none may run on into later tests
        ok(nodes, node, "kiln-sim clear; kiln-node-check >/dev/null || true")
        out = kiln("deploy", "-i", str(nodes.inventory), "--roles", "health,slurm")
        assert out.returncode == 0, out.stdout + out.stderr
    assert "Prolog=" not in ok(nodes, node, "cat /etc/slurm/slurm.conf")


def test_node_local_run_is_fast_and_needs_no_kiln(nodes):
    node = nodes.computes[0]
    out = on(nodes, node, "kiln-node-check --no-drain --json")
    assert out.returncode == 0, out.stdout + out.stderr
    data = json.loads(out.stdout)
    assert data["seconds"] < 5 and all(v["severity"] != "fail" for v in data["verdicts"])
    assert on(nodes, node, "python3 -c 'import kiln'").returncode != 0  # only the checks package is there


def test_real_nvidia_smi_without_a_gpu_says_driver_not_loaded(nodes, tmp_path):
    """Debian's own nvidia-smi (535.261.03-1 from non-free, installed and held by the nvidia_driver role)
    on a node with no GPU: exit 9, reported as "driver not loaded", not a crash and not a pass."""
    node = nodes.computes[1]
    version = ok(nodes, node, "dpkg-query -W -f='${Version}' nvidia-smi")
    assert version == TESTBED_VERSIONS["nvidia_driver"], version
    ok(nodes, node, "mv /usr/local/bin/nvidia-smi /usr/local/bin/nvidia-smi.sim")
    try:
        real = on(nodes, node, "/usr/bin/nvidia-smi")
        assert real.returncode == 9, real.stdout + real.stderr
        out, data = check_json(nodes, tmp_path, "--limit", node, "--suite", "gpu")
        assert out.returncode == 1
        (verdict,) = data["nodes"][node]["checks"]
        assert verdict["id"] == "GPU_NVIDIA_SMI" and "driver is not loaded" in verdict["message"], verdict
    finally:
        ok(nodes, node, "mv /usr/local/bin/nvidia-smi.sim /usr/local/bin/nvidia-smi")


def test_cluster_nccl_check_finds_the_slow_pair(nodes, tmp_path):
    """kiln check --nccl-cluster: one Slurm job over the four compute nodes (simulated all_reduce_perf, one task
    per stand-in GPU), passing; with one node slow, the job fails and halving names the pair holding it."""
    tb = nodes
    inventory = copy_inventory(tb.inventory, tmp_path / "inv", {
        "kiln_check_nccl_cluster_busbw_gbps": {2: 100.0}, "kiln_slurm_mpi": "none",
        "kiln_check_nccl_cluster_program": "all_reduce_perf"})
    out = kiln("check", "-i", str(inventory), "--nccl-cluster", timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "NCCL_CLUSTER_BUSBW ok: all_reduce_perf over 4 nodes: 180.0 GB/s" in out.stdout
    slow = tb.computes[2]
    ok(tb, slow, "kiln-sim inject nccl-slow")
    out = kiln("check", "-i", str(inventory), "--nccl-cluster", timeout=300)
    assert out.returncode == 1, out.stdout + out.stderr
    pair = ",".join(tb.computes[2:4])
    assert "NCCL_CLUSTER_BUSBW fail: all_reduce_perf over 4 nodes: 30.0 GB/s" in out.stdout
    assert f"slow: {pair}:" in out.stdout and f"  {','.join(tb.computes[:2])}: 180.0 GB/s" in out.stdout

