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


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing on ``host`` listens on or holds now, below the ephemeral range."""
    high = ephemeral_low()
    for _ in range(500):
        port = random.randrange(LOWEST, high)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port on {host} between {LOWEST} and {high}")
