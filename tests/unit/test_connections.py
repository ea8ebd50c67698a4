"""kiln's ssh connections notice a node that dies without a word (power loss sends no TCP reset) within
the bound the deploy promises: kernel keepalive probes and a TCP user timeout, no work in kiln."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time

import pytest

from kiln.deploy.connections import KEEPALIVE_S, USER_TIMEOUT_MS, keep_alive

NS, HOST_IF, NODE_IF = "kiln-ka-test", "kt-ka-host", "kt-ka-node"
HOST_IP, NODE_IP = "10.213.254.1", "10.213.254.2"


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=30)


@pytest.fixture
def node_namespace():
    """A network namespace joined by a veth pair: a 'node' whose link can go silent."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to make a network namespace that can go silent")
    subprocess.run(["ip", "netns", "del", NS], capture_output=True)  # left by a crashed run
    subprocess.run(["ip", "link", "del", HOST_IF], capture_output=True)
    try:
        sh("ip", "netns", "add", NS)
        sh("ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", NODE_IF)
        sh("ip", "link", "set", NODE_IF, "netns", NS)
        sh("ip", "addr", "add", f"{HOST_IP}/30", "dev", HOST_IF)
        sh("ip", "link", "set", HOST_IF, "up")
        sh("ip", "netns", "exec", NS, "ip", "addr", "add", f"{NODE_IP}/30", "dev", NODE_IF)
        sh("ip", "netns", "exec", NS, "ip", "link", "set", NODE_IF, "up")
        sh("ip", "netns", "exec", NS, "ip", "link", "set", "lo", "up")
        yield
    finally:
        subprocess.run(["ip", "netns", "del", NS], capture_output=True)
        subprocess.run(["ip", "link", "del", HOST_IF], capture_output=True)


def test_the_socket_options_are_the_kernels_keepalive_and_user_timeout():
    with socket.socket() as sock:
        keep_alive(sock)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == KEEPALIVE_S
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == USER_TIMEOUT_MS


def test_a_peer_that_goes_silent_fails_the_connection_within_the_bound(node_namespace):
    """An idle connection (kiln waits on another host, or on a long command that prints nothing) to a
    node whose link goes dead: the read fails within keepalive idle time + user timeout (+ slack)."""
    listener = subprocess.Popen(
        ["ip", "netns", "exec", NS, "python3", "-c",
         "import socket,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
         f"s.bind(('{NODE_IP}', 2222)); s.listen(); c,_=s.accept(); time.sleep(300)"])
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                sock = socket.create_connection((NODE_IP, 2222), timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        keep_alive(sock)
        sock.settimeout(KEEPALIVE_S + USER_TIMEOUT_MS / 1000 + 30)  # without keepalives: a timeout, and the bound fails
        sh("ip", "netns", "exec", NS, "ip", "link", "set", NODE_IF, "down")  # silent: no reset, no reply
        started = time.monotonic()
        with pytest.raises(OSError) as failed:
            sock.recv(1)
        seconds = time.monotonic() - started
        print(f"silent peer noticed after {seconds:.1f} s ({failed.value!r})")
        assert seconds <= KEEPALIVE_S + USER_TIMEOUT_MS / 1000 + 5
        sock.close()
    finally:
        listener.kill()
        listener.wait()
