"""The storage suite never hangs: every command that touches a mount is bounded, mounts are probed at once,
and whatever cannot die is abandoned without holding the runner's pipes.

A hung mount is played by stand-in ``mountpoint`` and ``df`` programs (first on PATH) that never return for
one path; the rest of the probe (sh, timeout, touch, rm) is the real thing on real directories. The real
hung NFS mount is shown on the VM tier (tests/vm/test_vm_storage.py)."""

from __future__ import annotations

import os
import re
import time

import pytest

from checks.node import NO_ANSWER, Node, bounded, local_node
from checks.parsers.mounts import parse_dd_rate, parse_probe
from checks.storage import run
from checks.verdict import CheckError

HANG = "sleep 300"


@pytest.fixture
def hung_tools(tmp_path, monkeypatch):
    """``mountpoint`` and ``df`` that answer for every directory as if it were a mount point, and never
    answer for the paths listed in ``tmp_path/hung``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    hung = tmp_path / "hung"
    hung.write_text("")
    (bin_dir / "mountpoint").write_text(f"#!/bin/sh\ngrep -qxF \"$2\" {hung} && exec {HANG}\ntest -d \"$2\"\n")
    (bin_dir / "df").write_text(f"#!/bin/sh\nfor p; do :; done\ngrep -qxF \"$p\" {hung} && exec {HANG}\n"
                                "echo 'Mounted on Use% IUse%'; echo \"$p 7% 1%\"\n")
    for tool in ("mountpoint", "df"):
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return hung


def _findmnt(paths):
    import json
    entries = [{"target": p, "source": "nfs01:/export" + p, "fstype": "nfs4", "options": "rw,hard,vers=4.2"}
               for p in paths]
    return json.dumps({"filesystems": entries})


def test_bounded_ends_a_command_that_does_not(tmp_path):
    node = local_node("n1", timeout=60)
    start = time.monotonic()
    out = node.run(bounded(HANG, 2))
    assert out.rc == NO_ANSWER and "no answer in 2 s" in out.stderr
    assert time.monotonic() - start < 4
    out = node.run(bounded("echo out; echo err >&2; exit 3", 2))
    assert (out.rc, out.stdout, out.stderr) == (3, "out\n", "err\n")


def test_bounded_abandons_what_escapes_its_process_group(tmp_path):
    """A process that left the group (setsid: SIGKILL of the group misses it, as it misses a process in
    uninterruptible sleep) keeps running, and still the caller gets its answer in time: it holds only
    bounded's files, never the caller's pipes."""
    pid_file = tmp_path / "pid"
    node = local_node("n1", timeout=60)
    start = time.monotonic()
    out = node.run(bounded(f"setsid sh -c 'echo $$ > {pid_file}; exec {HANG}' & wait", 2))
    assert out.rc == NO_ANSWER
    assert time.monotonic() - start < 5
    os.kill(int(pid_file.read_text()), 9)


def test_hung_mounts_fail_responding_in_one_timeout_not_one_each(tmp_path, hung_tools):
    """Three NFS mounts, two of them hung: both fail STORAGE_RESPONDING and the healthy one passes, in about
    one storage_timeout (the mounts are probed at once), and nothing is written under the healthy one."""
    dirs = [tmp_path / name for name in ("home", "scratch", "data")]
    for d in dirs:
        d.mkdir()
    hung_tools.write_text(f"{dirs[0]}\n{dirs[2]}\n")
    mounts = [{"path": str(d), "type": "nfs", "source": f"nfs01:/export{d}", "options": "hard", "warn_percent": 80,
               "fail_percent": 95} for d in dirs]
    answers = {"findmnt --json --list -o TARGET,SOURCE,FSTYPE,OPTIONS": _findmnt([str(d) for d in dirs]),
               "cat /etc/fstab": "".join(f"{m['source']} {m['path']} nfs4 hard 0 0\n" for m in mounts)}
    real = local_node("n1", timeout=60)

    def run_command(command):
        from checks.node import Result
        return Result(0, answers[command]) if command in answers else real.run(command)

    from checks.node import Node
    start = time.monotonic()
    verdicts = run(Node("n1", run_command), {"node": "n1", "storage": mounts, "storage_timeout": 2})
    seconds = time.monotonic() - start
    failed = sorted((v.id, v.message.split(" ")[0]) for v in verdicts if v.failed)
    assert failed == sorted([("STORAGE_RESPONDING", str(dirs[0])), ("STORAGE_RESPONDING", str(dirs[2]))])
    assert "did not answer within 2 s" in next(v for v in verdicts if v.failed).message
    assert seconds < 5, seconds  # one timeout (2 s) and a second of grace, not two
    assert not [v for v in verdicts if v.severity != "ok" and str(dirs[1]) in v.message]
    assert not list(dirs[1].iterdir())  # the write probe removed its file


def test_probe_report_parser():
    assert parse_probe("@@kiln-mount 0 0\nMounted on Use% IUse%\n/a 3% 1%\n@@kiln-mount 1 124\nno answer in 10 s\n") \
        == {0: (0, "Mounted on Use% IUse%\n/a 3% 1%"), 1: (124, "no answer in 10 s")}
    assert parse_probe("") == {}
    for bad in ("stray line\n@@kiln-mount 0 0\n", "@@kiln-mount x 0\n", "@@kiln-mount 0\n"):
        with pytest.raises(CheckError):
            parse_probe(bad)


@pytest.mark.parametrize("line, rate", [
    ("268435456 bytes (268 MB, 256 MiB) copied, 1.25 s, 215 MB/s", 214.7),  # coreutils >= 8.24
    ("33554432 bytes (34 MB) copied, 0.5 s, 67.1 MB/s", 67.1),               # older coreutils
    ("1048576 bytes (1.0 MB, 1.0 MiB) copied, 2.5e-05 s, 41.9 GB/s", 41943.0),
])
def test_dd_rate_from_bytes_and_seconds(line, rate):
    assert parse_dd_rate(line) == pytest.approx(rate, rel=0.01)


@pytest.mark.parametrize("bad", ["dd: error writing '/x': No space left on device", "0 bytes copied, 0.1 s, 0 B/s", ""])
def test_dd_rate_refuses_what_is_no_summary(bad):
    with pytest.raises(CheckError):
        parse_dd_rate(bad)


def _throughput_run(tmp_path, floor):
    from checks.node import Node, Result
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    mount = {"path": str(data), "type": "nfs", "source": "nas1:/data", "options": "rw", "warn_percent": 80,
             "fail_percent": 95, "min_throughput_mbps": floor}
    real = local_node("n1", timeout=120)
    answers = {"findmnt --json --list -o TARGET,SOURCE,FSTYPE,OPTIONS": _findmnt([str(data)]),
               "cat /etc/fstab": f"nas1:/data {data} nfs4 rw 0 0\n"}

    def run_command(command):
        return Result(0, answers[command]) if command in answers else real.run(command)
    verdicts = run(Node("n1", run_command), {"node": "n1", "storage": [mount], "storage_timeout": 5,
                                              "storage_throughput_mib": 8})
    return [v for v in verdicts if v.id == "STORAGE_THROUGHPUT"], data


def test_throughput_reports_a_figure_and_fails_below_its_floor(tmp_path, hung_tools):
    """A real 8 MiB file written (fdatasync) and read back on a real directory: a pass with figures at a
    floor of 1 MB/s, a fail with the same kind of figures at one no disk reaches; nothing left behind."""
    [passed], data = _throughput_run(tmp_path, 1)
    assert passed.severity == "ok" and re.match(rf"{data}: write \d+ MB/s, read \d+ MB/s \(floor 1 MB/s\)$",
                                                passed.message), passed
    [failed], _ = _throughput_run(tmp_path, 1_000_000)
    assert failed.severity == "fail" and "below the floor of 1000000 MB/s" in failed.message
    assert re.match(rf"{data}: write \d+ MB/s, read \d+ MB/s", failed.message)
    assert not list(data.iterdir())


def test_throughput_bound_follows_the_floor_and_a_cut_off_test_is_below_it():
    """A mount meeting its floor is never cut off (the bound is the write and read at the floor, at least at
    10 MB/s, plus the mount's timeout); one that is cut off fails naming the bound and the floor."""
    from checks.node import Node, Result
    from checks.storage import throughput_command, throughput_seconds
    expect = {"node": "n1", "storage_timeout": 10, "storage_throughput_mib": 16,
              "storage": [{"path": "/nfs", "type": "nfs", "source": "nas1:/data", "options": "rw",
                           "min_throughput_mbps": 1}]}
    assert throughput_seconds(expect, {"min_throughput_mbps": 1}) == 10 + 34      # 32 MiB at 1 MB/s
    assert throughput_seconds(expect, {"min_throughput_mbps": 100_000}) == 10 + 4  # at 10 MB/s
    slow = throughput_command("/nfs", "n1", 16, 44)

    def run_command(command):
        if command == slow:
            return Result(NO_ANSWER, "", "no answer in 44 s")
        if command.startswith("findmnt"):
            return Result(0, _findmnt(["/nfs"]))
        if command == "cat /etc/fstab":
            return Result(0, "nas1:/data /nfs nfs4 rw 0 0\n")
        return Result(0, "@@kiln-mount 0 0\nMounted on Use% IUse%\n/nfs 3% 1%\n")
    [verdict] = [v for v in run(Node("n1", run_command), expect) if v.id == "STORAGE_THROUGHPUT"]
    assert verdict.severity == "fail" and verdict.message.startswith(
        "/nfs: the test file was not written and read back within 44 s, below the floor of 1 MB/s"), verdict


def test_a_throughput_test_cut_off_at_its_bound_leaves_no_test_file(tmp_path):
    """The real command on a real directory, its bound too short for its writes (a slow mount): the node
    gets NO_ANSWER and the test file is gone all the same."""
    from checks.storage import throughput_command
    data = tmp_path / "data"
    data.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mountpoint").write_text("#!/bin/sh\ntest -d \"$2\"\n")
    # a dd that writes its file, then is slow: the bound cuts it off with the file on the mount
    (bin_dir / "dd").write_text("#!/bin/sh\nfor a; do case $a in of=*) : > \"${a#of=}\";; esac; done\nexec sleep 30\n")
    for tool in ("mountpoint", "dd"):
        (bin_dir / tool).chmod(0o755)
    node = local_node("n1", timeout=60)
    started = time.monotonic()
    out = node.run(f"PATH={bin_dir}:$PATH; " + throughput_command(str(data), "n1", 8, 2))
    assert out.rc == NO_ANSWER, out
    assert time.monotonic() - started < 10
    assert not list(data.iterdir())


def test_health_check_never_runs_the_throughput_test():
    """The health role's expectations turn it off, whatever the inventory says."""
    from dataclasses import replace

    from kiln.inventory import load_cluster
    from roles.health import configure
    from tests.conftest import INVENTORIES
    cluster = load_cluster(INVENTORIES / "storage")
    assert cluster.setting("check_storage_throughput_mib") == 256

    class Capture:
        def __init__(self):
            self.cluster, self.node, self.written = cluster, replace(cluster.hosts["cpu01"]), {}

        def put(self, path, content, **_):
            self.written[path] = content
    ctx = Capture()
    configure(ctx)
    import json
    assert json.loads(ctx.written["/etc/kiln/node-checks.json"])["storage_throughput_mib"] == 0


def test_every_runner_gives_commands_the_c_locale(monkeypatch):
    """Parsers read tools' English output: a node's own LANG (de_DE: 'Eingehängt auf', 'Mo Dez') must
    not reach them. The local runner sets the environment, the remote batch exports it first."""
    from checks.node import local_node
    from kiln.check.remote import run_batch
    monkeypatch.setenv("LANG", "de_DE.UTF-8")
    monkeypatch.setenv("LC_ALL", "de_DE.UTF-8")
    node = local_node("here")
    assert node.run("echo $LC_ALL $LANG").stdout.split() == ["C", "C"]
    seen = []
    batch = Node("n", lambda command: (seen.append(command), node.run(command))[1])
    results = run_batch(batch, ["echo $LC_ALL"])
    assert results["echo $LC_ALL"].stdout.strip() == "C"
    assert "LC_ALL=C LANG=C; export LC_ALL LANG" in seen[0]
