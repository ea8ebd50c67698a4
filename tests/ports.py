"""A free TCP port on this machine for a test's own listener, chosen outside the kernel's ephemeral range.

A port taken from ``bind(("127.0.0.1", 0))`` lies inside that range. A client that connects to it before its
server listens (a second rank at a rendezvous, a client started beside its server) can be given that very
port as its own source port and connect to itself (TCP simultaneous open): it then waits on itself until its
timeout. Below the range no outgoing connection is ever given the port.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOWEST = 10000


def ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _free(host: str, port: int, kind: int) -> bool:
    with socket.socket(socket.AF_INET, kind) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def free_port(host: str = "127.0.0.1", udp: bool = False, count: int = 1) -> int:
    """A port (the first of ``count`` in a row) nothing on ``host`` listens on or holds now, below the
    ephemeral range: TCP, or UDP with ``udp``. Random, so concurrent test runs on one machine do not meet."""
    high = ephemeral_low() - count
    kind = socket.SOCK_DGRAM if udp else socket.SOCK_STREAM
    for _ in range(500):
        port = random.randrange(LOWEST, high)
        if all(_free(host, p, kind) for p in range(port, port + count)):
            return port
    raise RuntimeError(f"no {count} free port(s) on {host} between {LOWEST} and {high}")
