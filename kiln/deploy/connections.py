"""kiln deploy's ssh connections (pyinfra's paramiko connector): bounded when a node dies, cheap when idle."""

from __future__ import annotations

import paramiko
from pyinfra.api.state import BaseStateCallback

# paramiko's transport wakes every _active_check_timeout seconds while its connection is idle (0.1 s:
# ten wake-ups a second per connection); 1,000 connections waiting on slow nodes then cost kiln more
# CPU than its work. Data still wakes it at once, and closing the socket ends its wait; nothing else
# needs the wake-up (keepalives are the kernel's, below).
IDLE_WAKEUP_S = 5.0


def quiet_idle_connections() -> None:
    paramiko.Transport._active_check_timeout = IDLE_WAKEUP_S


def close(hosts) -> None:
    """Close ``hosts``' ssh connections. pyinfra's disconnect leaves them open until the process ends
    (its ssh connector only forgets its SFTP session), so a deploy in waves would hold every wave's
    connections, and keep each alive, to the end."""
    for host in hosts:
        client = getattr(getattr(host, "connector", None), "client", None)
        if client is not None:
            client.close()


# A node that dies while kiln works on it sends no TCP reset: without these, the ssh connection would
# wait for the kernel's retransmission timeout (about 15 minutes). The kernel probes a connection idle
# for KEEPALIVE_S (TCP keepalive: no work for kiln, unlike ssh-level keepalive messages, which paramiko
# encrypts, sends and reads back in Python for every connection), and the socket gives up when data or
# probes stay unacknowledged for USER_TIMEOUT_MS.
KEEPALIVE_S, USER_TIMEOUT_MS, PROBE_TIMEOUT_S = 5, 20_000, 5


def keep_alive(sock) -> None:
    """Kernel keepalive probes every KEEPALIVE_S on an idle ``sock``; unanswered for USER_TIMEOUT_MS
    (probes or data), the connection fails."""
    import socket
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPALIVE_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, USER_TIMEOUT_MS // 1000 // KEEPALIVE_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, USER_TIMEOUT_MS)


def bound_connection(host) -> None:
    """Keepalives and a TCP user timeout on ``host``'s connection: a dead node is noticed in seconds."""
    client = getattr(host.connector, "client", None)
    transport = client.get_transport() if client is not None else None
    if transport is None:
        return  # not ssh (an image build's chroot)
    try:
        keep_alive(transport.sock)
    except (OSError, AttributeError):
        pass  # not a TCP socket (a proxy command's pipe)


def reachable(host) -> bool:
    """Whether ``host`` still answers: its ssh transport alive, and a new TCP connection to its port."""
    import socket
    client = getattr(host.connector, "client", None)
    transport = client.get_transport() if client is not None else None
    if transport is None:
        return True  # not ssh: nothing was lost
    if not transport.is_active():
        return False
    try:
        peer = transport.getpeername()
        with socket.create_connection(peer[:2], timeout=PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False


class ConnectErrors(BaseStateCallback):
    def __init__(self) -> None:
        self.errors: dict[str, str] = {}

    def host_connect_error(self, state, host, error):
        self.errors[host.name] = str(error)
