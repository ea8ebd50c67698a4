"""The waits a deploy runs on a node after it starts a daemon (roles/operations.py ``answers`` and
``settled``), run here for real with sh: a service is judged by what it serves, within a bound."""

from __future__ import annotations

import socket
import subprocess
import threading
import time

from roles.operations import answers, logs_of, settled, tcp_answers
from tests.ports import free_port



def listen_after(port: int, seconds: float) -> threading.Event:
    """A TCP listener on ``port`` that opens ``seconds`` from now and accepts until the event is set."""
    done = threading.Event()

    def serve():
        time.sleep(seconds)
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen()
            s.settimeout(0.2)
            while not done.is_set():
                try:
                    s.accept()[0].close()
                except OSError:
                    pass
    threading.Thread(target=serve, daemon=True).start()
    return done


def run(command: str, path_dir=None) -> tuple[int, str, float]:
    env = None
    if path_dir is not None:
        import os
        env = dict(os.environ, PATH=f"{path_dir}:{os.environ['PATH']}")
    start = time.monotonic()
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60, env=env)
    return out.returncode, out.stderr, time.monotonic() - start


def test_the_wait_ends_when_the_port_opens():
    port = free_port()
    done = listen_after(port, 2.5)
    try:
        rc, err, took = run(answers("slurmdbd on localhost", tcp_answers("127.0.0.1", port), 20, "slurmctld was not started"))
    finally:
        done.set()
    assert rc == 0, err
    assert 2.0 <= took < 10


def test_a_port_that_never_opens_fails_within_the_bound_naming_the_service():
    port = free_port()
    rc, err, took = run(answers(f"slurmdbd on localhost:{port}", tcp_answers("127.0.0.1", port), 3,
                                "slurmctld was not started", "echo last-log-line >&2"))
    assert rc == 1
    assert err.splitlines()[-1] == f"slurmdbd on localhost:{port} did not answer within 3 s, so slurmctld was not started"
    assert "last-log-line" in err
    assert took < 10


def fake_tools(tmp_path, active: bool):
    """systemctl and journalctl stand-ins: the unit is (or is not) active; its journal has one line."""
    (tmp_path / "systemctl").write_text(f"#!/bin/sh\nexit {0 if active else 3}\n")
    (tmp_path / "journalctl").write_text("#!/bin/sh\necho 'slurmdbd: reading the database'\n")
    for tool in ("systemctl", "journalctl"):
        (tmp_path / tool).chmod(0o755)
    return tmp_path


def test_an_active_daemon_that_never_listens_fails_with_its_log_lines(tmp_path):
    port = free_port()
    command = settled("slurmdbd", ready=tcp_answers("127.0.0.1", port), ready_within=3, log_file=str(tmp_path / "none.log"))
    rc, err, took = run(command, fake_tools(tmp_path, active=True))
    assert rc == 1
    assert err.splitlines()[-1] == "slurmdbd is active but slurmdbd did not answer within 3 s"
    assert "slurmdbd: reading the database" in err
    assert took < 10


def test_an_active_daemon_passes_once_it_listens(tmp_path):
    port = free_port()
    done = listen_after(port, 2)
    try:
        rc, err, took = run(settled("slurmdbd", ready=tcp_answers("127.0.0.1", port), ready_within=20),
                            fake_tools(tmp_path, active=True))
    finally:
        done.set()
    assert rc == 0, err
    assert took >= 1.5


def test_a_daemon_that_stops_fails_at_once_with_its_log_lines(tmp_path):
    rc, err, took = run(settled("slurmdbd", ready="false", ready_within=30), fake_tools(tmp_path, active=False))
    assert rc == 1
    assert err.splitlines()[-1] == "slurmdbd stopped after its start" and "reading the database" in err
    assert took < 5


def test_without_a_ready_probe_staying_active_for_its_seconds_passes(tmp_path):
    rc, err, took = run(settled("munge", seconds=1.5), fake_tools(tmp_path, active=True))
    assert rc == 0, err
    assert 1.5 <= took < 5


def test_log_words_quote_the_unit_and_file():
    assert logs_of("a b", "/var/log/x y.log") == "journalctl -u 'a b' -n 15 --no-pager -o cat >&2; tail -n 15 '/var/log/x y.log' >&2 2>/dev/null"
