"""The fabric bandwidth ring's pair measurement (kiln/check/bandwidth.py), run here against the testbed's
ib_write_bw simulator, which listens and connects as perftest does (its server takes one client on its
TCP port; a client with no server listening prints perftest's "Couldn't connect")."""

from __future__ import annotations

import os
import signal
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from checks.node import local_node
from kiln.check.bandwidth import measure_pair, server_command
from kiln.testbed.simulate import SIMULATORS
from tests.ports import free_port

pytestmark = pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2) to see the server listen")



@pytest.fixture(autouse=True)
def server_logs_in_tmp_path(tmp_path, monkeypatch):
    """The servers' logs in the test's own directory, not this machine's /tmp: nothing is left behind."""
    from kiln.check import bandwidth
    monkeypatch.setattr(bandwidth, "server_log", lambda port: str(tmp_path / f"ib-write-bw-server-{int(port)}.log"))


@pytest.fixture
def sim(tmp_path, monkeypatch):
    state = tmp_path / "state.json"
    env = dict(os.environ, KILN_SIM_STATE=str(state))
    subprocess.run([str(SIMULATORS / "kiln-sim"), "init", "--gpus", "1", "--model", "h100", "--driver", "x",
                    "--hcas", "1", "--rate", "400"], check=True, env=env)
    monkeypatch.setenv("KILN_SIM_STATE", str(state))
    monkeypatch.setenv("PATH", f"{SIMULATORS}:{os.environ['PATH']}")
    yield env
    # the servers this test started (tests run side by side: another test's stay)
    mine = f"KILN_SIM_STATE={state}".encode()
    for proc in Path("/proc").iterdir():
        try:
            ours = proc.name.isdigit() and int(proc.name) != os.getpid()
            if ours and mine in (proc / "environ").read_bytes().split(b"\0"):
                os.kill(int(proc.name), signal.SIGTERM)
        except OSError:
            continue


def test_a_pair_is_measured_once_its_server_listens(sim):
    node = local_node("here", timeout=60)
    verdict = measure_pair(node, node, "127.0.0.1", "--report_gbits", 350, "a -> b via mlx5_0", port=free_port())
    assert verdict.severity == "ok" and verdict.message.startswith("a -> b via mlx5_0: 39"), verdict


def test_a_slow_link_fails_below_the_threshold(sim):
    subprocess.run([str(SIMULATORS / "kiln-sim"), "inject", "ib-rate-low"], check=True, env=sim)
    node = local_node("here", timeout=60)
    verdict = measure_pair(node, node, "127.0.0.1", "--report_gbits", 350, "a -> b", port=free_port())
    assert verdict.severity == "fail" and "Gb/s, below 350: check the path" in verdict.message, verdict


def test_a_server_that_never_listens_fails_the_pair_with_its_own_words(tmp_path, monkeypatch):
    broken = tmp_path / "ib_write_bw"
    broken.write_text("#!/bin/sh\necho 'Failed to open device mlx5_0'\nexit 1\n")
    broken.chmod(broken.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    node = local_node("here", timeout=60)
    verdict = measure_pair(node, node, "127.0.0.1", "", 1, "a -> b", port=free_port(), tries=2, listen_seconds=1,
                           pause=0)
    assert verdict.severity == "fail", verdict
    assert "ib_write_bw gave no result in 2 tries" in verdict.message
    assert "no ib_write_bw server listened on here port" in verdict.message
    assert "Failed to open device mlx5_0" in verdict.message, verdict.message


def test_a_client_that_cannot_connect_is_retried_and_its_last_lines_reported(sim):
    node = local_node("here", timeout=60)
    # the server listens on one port, the client is sent to another: every try is refused
    port = free_port()

    class WrongPort:
        name = "here"

        @staticmethod
        def run(command):
            return node.run(command.replace(f"-p {port} 127.0.0.1", f"-p {free_port()} 127.0.0.1"))
    verdict = measure_pair(WrongPort, node, "127.0.0.1", "", 1, "a -> b", port=port, tries=2, pause=0)
    assert verdict.severity == "fail" and "gave no result in 2 tries" in verdict.message, verdict
    assert "client: Couldn't connect to 127.0.0.1:" in verdict.message, verdict.message


def test_a_server_left_listening_is_used_and_a_fresh_one_replaces_it():
    assert server_command("-F", 18515).startswith("ss -Hltn 'sport = :18515' | grep -q . || ")
    assert server_command("-F", 18515, fresh=True).startswith("pkill -f -- 'ib_write_bw( .*)? -p 18515$' && sleep 0.5; ss ")


HEADER = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"


def _scripted_client(outputs):
    """A node whose ib_write_bw client runs give ``outputs`` in turn (a Result, or what a run that exits 0
    prints); every other command succeeds."""
    from checks.node import Result
    calls = []

    class Node:
        name = "here"

        @staticmethod
        def run(command):
            calls.append(command)
            if command.startswith("timeout "):
                out = outputs[sum(c.startswith("timeout ") for c in calls) - 1]
                return out if isinstance(out, Result) else Result(0, out)
            return Result(0, "")
    return Node, calls


def test_a_run_that_does_not_finish_in_time_fails_at_once_saying_so():
    """A client that connected but was cut off by its bound (perftest printed its header, no row): the pair
    fails saying so, without three more runs of the same length."""
    from checks.node import Result
    node, calls = _scripted_client([Result(124, HEADER)] * 4)
    verdict = measure_pair(node, node, "10.0.0.2", "-F", 1, "a -> b via rxe0", pause=0)
    assert verdict.severity == "fail" and "ib_write_bw did not finish within 90 s" in verdict.message, verdict
    assert sum(c.startswith("timeout ") for c in calls) == 1


def test_a_run_broken_off_after_its_header_is_retried_and_the_next_figure_counts():
    """perftest prints its header, then a transport error ends the run with no row: that try is lost, not
    the pair; a fresh server and a second run give the figure."""
    broken = HEADER + " Completion with error at client\n Failed status 12: wc_id 0 syndrom 0x81\n"
    node, calls = _scripted_client([broken, HEADER + " 65536      200              3.10               3.05      0.005\n"])
    verdict = measure_pair(node, node, "10.0.0.2", "-F", 0.001, "a -> b via rxe0", pause=0)
    assert verdict.severity == "ok" and verdict.message == "a -> b via rxe0: 0.0256 Gb/s", verdict
    assert sum(c.startswith("pkill -f -- 'ib_write_bw") for c in calls) == 1  # the second try's fresh server


def test_a_pair_that_never_gives_a_row_names_why_from_both_ends():
    figureless = HEADER + " 65536      200              inf               -nan      0.005\n"
    node, calls = _scripted_client([figureless] * 4)
    verdict = measure_pair(node, node, "10.0.0.2", "-F", 1, "a -> b via rxe0", pause=0)
    assert verdict.severity == "fail" and "gave no result in 4 tries" in verdict.message, verdict
    assert "a result row with no figure ('65536      200              inf               -nan      0.005')" in \
        verdict.message, verdict.message


def test_output_in_a_layout_kiln_does_not_read_is_refused_at_once_not_rerun():
    other = " #bytes     #iterations    BW peak[Kb/sec]    BW average[Kb/sec]   MsgRate[Mpps]\n 65536 200 9 9 0.1\n"
    node, calls = _scripted_client([other] * 4)
    verdict = measure_pair(node, node, "10.0.0.2", "-F", 1, "a -> b via rxe0", pause=0)
    assert verdict.severity == "fail" and "names no BW average unit kiln reads: not read" in verdict.message
    assert sum(c.startswith("timeout ") for c in calls) == 1
