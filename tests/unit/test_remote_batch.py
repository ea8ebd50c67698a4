"""`kiln check` fetches a node's command outputs in a few batches: the results are exactly what running
each command alone gives, and so are the verdicts."""

from __future__ import annotations

import os
import subprocess

from checks.node import Node, Result, local_node
from checks.suites import run_suites
from kiln.check.remote import batched_suites, run_batch
from tests.unit.test_checks import EXPECT, SIMULATORS


def test_batch_keeps_each_commands_own_result():
    commands = ["echo out; echo err >&2; exit 3", "printf 'no newline'", "true", "printf 'a\\n\\nb\\n'",
                "echo '@@kiln-rc 0 7'", "cat /nonexistent", "echo x # a comment", "echo '@@kiln-err'; echo '@@kiln-err' >&2",
                "pwd"]
    results = run_batch(local_node("here"), commands)
    assert (results[commands[0]].rc, results[commands[0]].stdout, results[commands[0]].stderr) == (3, "out\n", "err\n")
    assert results[commands[1]].stdout == "no newline" and results[commands[2]].rc == 0
    assert results[commands[3]].stdout == "a\n\nb\n"
    assert results[commands[4]].stdout == "@@kiln-rc 0 7\n"  # a marker-like line inside output is data
    assert results[commands[5]].rc == 1 and "No such file" in results[commands[5]].stderr
    assert (results[commands[6]].rc, results[commands[6]].stdout) == (0, "x\n")
    assert (results[commands[7]].stdout, results[commands[7]].stderr) == ("@@kiln-err\n", "@@kiln-err\n")
    assert results[commands[8]].stdout == subprocess.run("pwd", capture_output=True, text=True).stdout


def test_batched_verdicts_equal_one_by_one(tmp_path):
    env = dict(os.environ, KILN_SIM_STATE=str(tmp_path / "state.json"), PATH=f"{SIMULATORS}:{os.environ['PATH']}")
    subprocess.run(["kiln-sim", "init", "--gpus", "4", "--model", "h100", "--driver", "535.261.03", "--nvlinks", "18",
                    "--hcas", "2"], check=True, env=env)
    subprocess.run(["kiln-sim", "inject", "ecc-uncorrected"], check=True, env=env)
    calls = []

    def run(command):  # this machine, with the simulators: the same answers batched or one by one
        calls.append(command)
        out = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, env=env, timeout=60)
        return Result(out.returncode, out.stdout, out.stderr)
    node = Node("gpu01", run)
    batched = batched_suites(node, "gpu01", EXPECT, ["gpu", "fabric", "storage", "slurm", "system"])
    rounds = len(calls)
    calls.clear()
    single = run_suites(node, EXPECT)
    # the same verdicts (a shell's error text may word a missing tool differently)
    assert [(v.id, v.severity) for v in batched] == [(v.id, v.severity) for v in single]
    assert "GPU_ECC_UNCORRECTED" in {v.id for v in batched if v.failed}
    assert rounds == 1 < len(calls)  # the suites declare every command a healthy node is asked: one round trip


def test_a_fallback_command_costs_one_more_round_trip():
    """A driver older than 535.54 rejects the clock-event field by its new name: the old name is fetched in a
    second batch, and the verdicts are those of a healthy node."""
    from checks import gpu
    old_driver = {gpu.query_command(gpu.EVENTS_NEW): Result(2, "", 'Field "clocks_event_reasons.active" is not a valid field to query.\n'),
                  gpu.query_command(gpu.EVENTS_OLD): Result(0, "0, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 525.147.05, "
                                                              "Enabled, Enabled, 0, No, 5, 5, 16, 16, 0x0000000000000001\n")}
    batches = []

    def run(script):
        batches.append(script)
        return Result(0, "".join(f"@@kiln-out {i}\n{old_driver.get(c, Result(0, '')).stdout}\n@@kiln-rc {i} "
                                 f"{old_driver.get(c, Result(0, '')).rc}\n" for i, c in enumerate(wanted(script))) + "@@kiln-err\n")

    def wanted(script):  # the batch's commands, in order
        import re
        import shlex
        return re.findall(r"\(\n(.*?)\n\) 2>", shlex.split(script)[2], re.S)
    expect = {"node": "gpu01", "gpu": {"count": 1, "model": "h100", "driver": "525.147.05"}}
    verdicts = batched_suites(Node("gpu01", run), "gpu01", expect, ["gpu"])
    assert len(batches) == 2 and gpu.query_command(gpu.EVENTS_OLD) in batches[1]
    assert not [v for v in verdicts if v.failed] and "GPU_DRIVER_VERSION" in {v.id for v in verdicts}


def test_an_unreachable_node_costs_one_round_and_says_why():
    calls = []

    def run(command):  # what the ssh backend gives when ssh itself fails
        calls.append(command)
        return Result(255, "", "ssh: connect to host 10.0.0.9 port 22: No route to host\n")
    verdicts = batched_suites(Node("gpu09", run), "gpu09", EXPECT, ["gpu", "fabric", "storage", "slurm", "system"])
    assert len(calls) == 1  # the first round is the connection probe
    (v,) = verdicts
    assert v.id == "NODE_UNREACHABLE" and v.failed and "No route to host" in v.message and "known_hosts" in v.message


def test_kernel_outliers():
    from kiln.check.remote import kernel_outliers
    verdicts = kernel_outliers({"a": "6.1.0-28-amd64", "b": "6.1.0-28-amd64", "c": "6.1.0-30-amd64"})
    assert [verdicts[n].severity for n in "abc"] == ["ok", "ok", "fail"]
    assert "2 of 3 nodes run 6.1.0-28-amd64" in verdicts["c"].message
    assert kernel_outliers({}) == {}


def test_shared_storage_fails_on_a_node_that_does_not_see_the_others_data():
    """/home is one filesystem on hgx001 and hgx002 but a different one on hgx003: only hgx003 fails."""
    import re

    from kiln.check.remote import RemoteCheck
    from kiln.inventory import load_cluster
    from tests.conftest import REPO

    cluster = load_cluster(REPO / "inventory" / "example")
    hosts = [cluster.hosts[n] for n in ("hgx001", "hgx002", "hgx003")]
    filesystems = {"hgx001": {}, "hgx002": None, "hgx003": {}}
    filesystems["hgx002"] = filesystems["hgx001"]  # the same shared files

    def fake(host):
        files = filesystems[host.name]

        def run(command):
            if command.startswith("echo kiln > "):
                files[command.split("> ", 1)[1].strip("'")] = "kiln"
            elif command.startswith("cat "):
                return Result(0, files.get(command[4:].strip("'"), ""))
            elif command.startswith("rm -f "):
                files.pop(command[6:].strip("'"), None)
            return Result(0, "")
        return Node(host.name, run)

    check = RemoteCheck(cluster, hosts, ["storage"])
    check.node = fake
    check.results = {h.name: [] for h in hosts}
    check._shared_storage()
    check.close()
    home = {n: [v for v in vs if "/home" in v.message] for n, vs in check.results.items()}
    assert [home[n][0].severity for n in ("hgx001", "hgx002", "hgx003")] == ["ok", "ok", "fail"]
    assert re.search(r"does not see what hgx001 wrote", home["hgx003"][0].message)
    assert filesystems["hgx001"] == {}  # the marker is removed


def test_testbed_faults_are_the_simulators_faults():
    out = subprocess.run([str(SIMULATORS / "kiln-sim"), "faults"], capture_output=True, text=True, check=True)
    from kiln.testbed.simulate import FAULTS
    assert tuple(out.stdout.split()) == FAULTS


def test_temporary_directories_of_killed_runs_are_swept(tmp_path, monkeypatch):
    import tempfile
    from kiln.check.remote import RemoteCheck
    from kiln.inventory import load_cluster
    from tests.conftest import INVENTORIES
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = tmp_path / "kiln-check-dead"
    dead.mkdir()
    (dead / "pid").write_text("999999999\n")
    alive = tmp_path / "kiln-check-alive"
    alive.mkdir()
    (alive / "pid").write_text(f"{os.getpid()}\n")
    young = tmp_path / "kiln-check-young"  # no pid file yet (being made by another run): kept
    young.mkdir()
    cluster = load_cluster(INVENTORIES / "small")
    with RemoteCheck(cluster, list(cluster.hosts.values())[:1], ["system"]) as check:
        assert check.tmp.parent == tmp_path
    assert not dead.exists() and alive.exists() and young.exists() and not check.tmp.exists()
