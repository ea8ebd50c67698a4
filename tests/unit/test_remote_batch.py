"""`kiln check` fetches a node's command outputs in a few batches: the results are exactly what running
each command alone gives, and so are the verdicts."""

from __future__ import annotations

import os
import subprocess

import pytest

from checks.node import Node, Result, bounded, local_node
from checks.suites import SUITES, run_suites
from kiln.check.remote import RemoteCheck, batched_suites, run_batch
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
    batched = batched_suites(node, "gpu01", EXPECT, list(SUITES))
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
                                                              "Enabled, Enabled, 0, No, 5, 5, 16, 16, 0x0000000000000001\n"),
                  gpu.FULL_QUERY: Result(0, "Driver Version                            : 525.147.05\n\n"
                                            "Attached GPUs                             : 1\nGPU 00000000:18:00.0\n"
                                            "    Product Name                          : NVIDIA H100 80GB HBM3\n")}
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


READ_HOME = bounded("cat /home/.kiln-shared-check", 3)  # a read of the marker, bounded as every storage command
# the last read before a node fails: the directory listed first (a client's cached view of it refreshed)
FRESH_HOME = bounded("ls -a /home >/dev/null 2>&1; cat /home/.kiln-shared-check", 3)


def _shared_storage_run(tmp_path, filesystems: dict[str, dict[str, str]], calls: list,
                        first_read: dict[str, str] | None = None, asked_again: dict[str, str] | None = None):
    """kiln check's storage suite on hgx001-003 of the example inventory, each node's batch really run
    here by sh, with each shared mount path mapped to the directory ``filesystems[node][path]``.
    ``first_read``: node -> what its batch's read of /home's marker prints instead (another kiln check's
    token, written between the first node's swap and this read); ``asked_again``: node -> the shell that
    replaces its later reads of /home's marker."""
    from kiln.inventory import load_cluster
    from tests.conftest import REPO

    cluster = load_cluster(REPO / "inventory" / "example")
    hosts = [cluster.hosts[n] for n in ("hgx001", "hgx002", "hgx003")]

    def fake(host):
        def run(script):
            calls.append((host.name, script))
            if host.name in (first_read or {}) and "@@kiln-out" in script:
                script = script.replace(f"\n{READ_HOME}\n".replace("'", "'\"'\"'"), f"\necho {first_read[host.name]}\n")
            if host.name in (asked_again or {}) and script in (READ_HOME, FRESH_HOME):
                script = asked_again[host.name]
            for path, directory in filesystems[host.name].items():
                script = script.replace(f"mountpoint -q {path} ", f"test -d {directory} ")
                script = script.replace(f"{path}/.kiln-shared-check", f"{directory}/.kiln-shared-check")
            out = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=60)
            return Result(out.returncode, out.stdout, out.stderr)
        return Node(host.name, run)

    with RemoteCheck(cluster, hosts, ["storage"]) as check:
        check.node = fake
        check.collect()
    return {n: [v for v in vs if v.id == "STORAGE_SHARED"] for n, vs in check.results.items()}


def test_shared_storage_fails_on_a_node_that_does_not_see_the_others_data(tmp_path):
    """/home and /lustre are one filesystem each on hgx001 and hgx002, but hgx003's /home is another:
    only hgx003 fails, for /home. The marker rides in each node's one batch: the first run (no marker yet)
    asks again only where a read could have come before the write; the next run asks again only to
    confirm hgx003's failure (with the writer, twice), nothing for the nodes that pass."""
    home, lustre, other = (tmp_path / d for d in ("home", "lustre", "other"))
    for d in (home, lustre, other):
        d.mkdir()
    shared = {"/home": str(home), "/lustre": str(lustre)}
    filesystems = {"hgx001": shared, "hgx002": shared, "hgx003": {"/home": str(other), "/lustre": str(lustre)}}
    for run in ("first", "second"):
        calls: list = []
        verdicts = _shared_storage_run(tmp_path, filesystems, calls)
        by_mount = {n: {v.message.split(":")[0]: v.severity for v in vs} for n, vs in verdicts.items()}
        assert by_mount == {"hgx001": {"/home": "ok", "/lustre": "ok"}, "hgx002": {"/home": "ok", "/lustre": "ok"},
                            "hgx003": {"/home": "fail", "/lustre": "ok"}}, (run, verdicts)
        assert "does not see what hgx001 wrote" in verdicts["hgx003"][0].message
        assert "(it read nothing (exit 1: cat: " in verdicts["hgx003"][0].message  # what each read, for the operator
        extra = [c for c in calls if "@@kiln-out" not in c[1]]
        if run == "second":  # the marker of the first run tells the passing readers apart at once
            assert sorted((n, c) for n, c in extra) == sorted([("hgx001", FRESH_HOME), ("hgx001", READ_HOME),
                                                               ("hgx003", FRESH_HOME), ("hgx003", READ_HOME)])
        else:
            assert {script for _, script in extra} <= {READ_HOME, FRESH_HOME, bounded("cat /lustre/.kiln-shared-check", 3),
                                                       bounded("ls -a /lustre >/dev/null 2>&1; cat /lustre/.kiln-shared-check", 3)}
            assert len(extra) <= 10  # at most the writer and both readers per filesystem, the failing one twice
    assert (home / ".kiln-shared-check").read_text().startswith("kiln-")
    assert not (other / ".kiln-shared-check").exists()
    # another kiln check's token on /home since: the readers that find it are asked again with the writer
    (home / ".kiln-shared-check").write_text("kiln-0123\n")
    calls = []
    # hgx002's batch reads a token neither this run's nor the one it replaced
    verdicts = _shared_storage_run(tmp_path, filesystems, calls, first_read={"hgx002": "kiln-someone-else"})
    home_verdicts = {n: next(v for v in vs if v.message.startswith("/home")).severity for n, vs in verdicts.items()}
    assert home_verdicts == {"hgx001": "ok", "hgx002": "ok", "hgx003": "fail"}
    assert sorted(n for n, c in calls if c == READ_HOME) == ["hgx001", "hgx002", "hgx003"]  # one round, together
    assert sorted(n for n, c in calls if c == FRESH_HOME) == ["hgx001", "hgx003"]  # the last, for the failing one


def test_shared_storage_asks_again_before_failing_a_node_whose_read_found_nothing(tmp_path):
    """An NFS client holding a cached handle of the marker the writer just replaced can fail that one read
    (nothing printed): hgx002, on the same /home, is asked again with the writer and passes."""
    home, lustre = tmp_path / "home", tmp_path / "lustre"
    home.mkdir()
    lustre.mkdir()
    shared = {"/home": str(home), "/lustre": str(lustre)}
    filesystems = {n: shared for n in ("hgx001", "hgx002", "hgx003")}
    _shared_storage_run(tmp_path, filesystems, [])  # a marker from an earlier run
    calls: list = []
    verdicts = _shared_storage_run(tmp_path, filesystems, calls, first_read={"hgx002": ""})
    assert {n: {v.message.split(":")[0]: v.severity for v in vs} for n, vs in verdicts.items()} == \
        {n: {"/home": "ok", "/lustre": "ok"} for n in ("hgx001", "hgx002", "hgx003")}, verdicts
    assert sorted(n for n, c in calls if c == READ_HOME) == ["hgx001", "hgx002"]


@pytest.mark.parametrize("slow", ["hgx001", "hgx002"])
def test_shared_storage_gives_no_verdict_where_a_read_asked_again_runs_out_of_time(tmp_path, slow):
    """hgx002's batch read found nothing; asked again, its read (or the writer's, hgx001) is cut off by its
    bound: hgx002 gets no STORAGE_SHARED verdict for /home (it cannot be told), the others pass."""
    home, lustre = tmp_path / "home", tmp_path / "lustre"
    home.mkdir()
    lustre.mkdir()
    shared = {"/home": str(home), "/lustre": str(lustre)}
    filesystems = {n: shared for n in ("hgx001", "hgx002", "hgx003")}
    _shared_storage_run(tmp_path, filesystems, [])
    verdicts = _shared_storage_run(tmp_path, filesystems, [], first_read={"hgx002": ""},
                                   asked_again={slow: "echo 'no answer in 3 s' >&2; exit 124"})
    by_mount = {n: {v.message.split(":")[0]: v.severity for v in vs} for n, vs in verdicts.items()}
    assert by_mount == {"hgx001": {"/home": "ok", "/lustre": "ok"}, "hgx002": {"/lustre": "ok"},
                        "hgx003": {"/home": "ok", "/lustre": "ok"}}, verdicts


def test_shared_storage_falls_back_to_a_writer_that_can_write(tmp_path):
    """hgx001's /home is not mounted (its mount point is no directory here): hgx002 writes instead, and
    hgx001 is the one that does not see it."""
    home, lustre, empty = tmp_path / "home", tmp_path / "lustre", tmp_path / "empty-mount-point"
    home.mkdir()
    lustre.mkdir()
    filesystems = {"hgx001": {"/home": str(empty), "/lustre": str(lustre)},
                   "hgx002": {"/home": str(home), "/lustre": str(lustre)},
                   "hgx003": {"/home": str(home), "/lustre": str(lustre)}}
    verdicts = _shared_storage_run(tmp_path, filesystems, [])
    home_verdicts = {n: next(v for v in vs if v.message.startswith("/home")) for n, vs in verdicts.items()}
    assert [home_verdicts[n].severity for n in ("hgx001", "hgx002", "hgx003")] == ["fail", "ok", "ok"]
    assert "does not see what hgx002 wrote" in home_verdicts["hgx001"].message
    assert not empty.exists()  # nothing was written under an empty mount point


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


def test_shared_storage_asks_only_a_few_writers_when_none_can_write(tmp_path, monkeypatch):
    """/home is not mounted on any node: no STORAGE_SHARED verdict for it (STORAGE_MOUNTED says why on each)
    and only WRITER_TRIES nodes are asked to write after the planned writer's batch, not every node."""
    import kiln.check.shared_storage as shared_storage
    monkeypatch.setattr(shared_storage, "WRITER_TRIES", 2)
    lustre, empty = tmp_path / "lustre", tmp_path / "not-mounted"
    lustre.mkdir()
    filesystems = {n: {"/home": str(empty), "/lustre": str(lustre)} for n in ("hgx001", "hgx002", "hgx003")}
    calls: list = []
    verdicts = _shared_storage_run(tmp_path, filesystems, calls)
    assert not [v for vs in verdicts.values() for v in vs if v.message.startswith("/home")]
    assert all(v.severity == "ok" for vs in verdicts.values() for v in vs)  # /lustre
    writes = [n for n, script in calls if "@@kiln-out" not in script and "/home/.kiln-shared-check" in script]
    assert writes == ["hgx001", "hgx002"]  # the first WRITER_TRIES reachable nodes, in order
    assert not empty.exists()


def test_pytest_reports_the_verdicts_with_its_own_terminal_output_off(tmp_path, capfd):
    """kiln check drives pytest for the JUnit report and exit code; pytest's progress dots stay off
    (kiln prints its own table), and the options pytest then no longer knows are not passed (exit 4)."""
    from checks.verdict import Verdict
    from kiln.inventory import load_cluster
    from tests.conftest import INVENTORIES
    cluster = load_cluster(INVENTORIES / "small")
    host = cluster.hosts["cpu01"]
    for verdict, code in (("ok", 0), ("fail", 1)):
        with RemoteCheck(cluster, [host], ["system"]) as check:
            check._check_host = lambda h, v=verdict: [Verdict("SYSTEM_SWAP", v, "swap", suite="system")]
            assert check.run_pytest(str(tmp_path / "junit.xml")) == code
        assert "<testcase" in (tmp_path / "junit.xml").read_text()
    out = capfd.readouterr().out
    assert "passed" not in out and "[100%]" not in out, out


def test_shared_storage_gives_no_verdict_where_the_marker_read_ran_out_of_time(tmp_path):
    """hgx003's read of /home's marker was cut off by its bound (a hung mount: STORAGE_RESPONDING says so):
    it gets no STORAGE_SHARED verdict for /home either way, and is not asked again (another wait)."""
    home, lustre = tmp_path / "home", tmp_path / "lustre"
    home.mkdir()
    lustre.mkdir()
    shared = {"/home": str(home), "/lustre": str(lustre)}
    calls: list = []
    verdicts = _shared_storage_run(tmp_path, {n: shared for n in ("hgx001", "hgx002", "hgx003")}, calls,
                                   first_read={"hgx003": "; exit 124"})
    by_mount = {n: {v.message.split(":")[0]: v.severity for v in vs} for n, vs in verdicts.items()}
    assert by_mount == {"hgx001": {"/home": "ok", "/lustre": "ok"}, "hgx002": {"/home": "ok", "/lustre": "ok"},
                        "hgx003": {"/lustre": "ok"}}
    assert not [c for n, c in calls if n == "hgx003" and c == READ_HOME]


@pytest.mark.parametrize("count", [2, 3, 4, 5, 8, 9])
def test_ring_phases_never_make_a_node_send_and_receive_at_once(count):
    from kiln.check.bandwidth import ring_phases
    phases = ring_phases(count)
    assert sorted(i for p in phases for i in p) == list(range(count))  # every pair once
    for phase in phases:
        senders, receivers = set(phase), {(i + 1) % count for i in phase}
        assert not senders & receivers, (count, phase)
    assert len(phases) == (2 if count % 2 == 0 else 3)
