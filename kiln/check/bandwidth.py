"""The fabric bandwidth ring: ``ib_write_bw`` from each fabric node to the next, one link at a time per
node (``ring_phases``), each pair measured by ``measure_pair``.

perftest's server accepts one client and then exits, whether the run worked or not; a client started
before its server listens fails at once ("Couldn't connect"). So each try first makes sure a server is
listening on the pair's port (starting one if none is, waiting for its socket in ``ss``), then runs the
client once; a try that gives no result row (refused, or broken off after perftest's header by a
transport error) is retried against a fresh server. A pair that never gives
one fails with the last lines both ends printed, so the report says why (no listener, refused, a
transport error) rather than only that no figure came.
"""

from __future__ import annotations

import time

from checks.fabric import bandwidth_verdict
from checks.node import Node
from checks.parsers.infiniband import parse_ib_write_bw
from checks.verdict import CheckError, UnknownFormat, Verdict, fail
from kiln.shell import quote

PORT = 18515            # perftest's default TCP port for the exchange before the RDMA test
RUN_SECONDS = 90        # one ib_write_bw run, either end (a few thousand messages; minutes under emulation)
LISTEN_SECONDS = 20     # a server's socket should be listening within this on a busy node
TRIES = 4


def server_log(port: int) -> str:
    """Where the server on ``port`` writes: one file per port, so two rings (or two checks' runs) on
    different ports never read each other's server."""
    return f"/tmp/kiln-ib-write-bw-server-{int(port)}.log"


def ring_phases(count: int) -> list[list[int]]:
    """The ring's pairs (pair i: node i sends to node i+1) in phases where no node both sends and receives:
    even pairs, then odd ones, and in a ring of odd length the last pair (its server, node 0, sends in pair
    0) alone. Each link is measured one way with its two ends otherwise idle."""
    if count < 2:
        return [list(range(count))]
    last = [count - 1] if count % 2 else []
    phases = [[i for i in range(0, count - len(last), 2)], [i for i in range(1, count - len(last), 2)], last]
    return [p for p in phases if p]


def _listening(port: int) -> str:
    return f"ss -Hltn {quote(f'sport = :{port}')} | grep -q ."


def server_command(args: str, port: int = PORT, seconds: int = LISTEN_SECONDS, fresh: bool = False) -> str:
    """Start ``ib_write_bw`` as the server unless one already listens on ``port`` (``fresh``: end the
    server a failed try left on that port first), then wait until its socket
    listens. Exit 0 once it does; 1 after ``seconds``, printing the server's last lines."""
    listening, log = _listening(port), server_log(port)
    start = (f"(setsid timeout {RUN_SECONDS} ib_write_bw {args} -p {port} >{log} 2>&1 </dev/null &)")
    # only the server on this port (its command line ends in "-p PORT"; a client's ends in an address)
    stop = f"pkill -f -- {quote(f'ib_write_bw( .*)? -p {int(port)}$')} && sleep 0.5; " if fresh else ""
    return (f"{stop}{listening} || {start}; i=0; until {listening}; do i=$((i+1)); "
            f"if [ $i -ge {seconds * 5} ]; then tail -n 3 {log} 2>/dev/null; exit 1; fi; sleep 0.2; done")


def client_command(args: str, address: str, port: int = PORT) -> str:
    return f"timeout {RUN_SECONDS} ib_write_bw {args} -p {port} {quote(address)} 2>&1"


def _tail(text: str, lines: int = 2) -> str:
    kept = [line.strip() for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept) or "nothing"


def measure_pair(client: Node, server: Node, address: str, args: str, threshold_gbps: float, label: str,
                 port: int = PORT, tries: int = TRIES, listen_seconds: int = LISTEN_SECONDS,
                 pause: float = 1.0) -> Verdict:
    """One ring pair's FABRIC_BANDWIDTH verdict: ``client`` writes to ``server`` (reached at ``address``)
    with ``ib_write_bw args`` on TCP ``port``; ``label`` names the pair in the message ("a -> b via
    mlx5_0"). Up to ``tries`` runs, each against a server seen listening within ``listen_seconds``."""
    why = ""
    for attempt in range(tries):
        if attempt:
            time.sleep(pause)
        up = server.run(server_command(args, port, listen_seconds, fresh=attempt > 0))
        if up.rc != 0:
            why = f"no ib_write_bw server listened on {server.name} port {port} within {listen_seconds} s " \
                  f"(server: {_tail(up.stdout + up.stderr)})"
            continue
        out = client.run(client_command(args, address, port))
        if out.rc == 124:  # connected, but the run did not end in time: a stalled or crawling link
            return fail("FABRIC_BANDWIDTH", f"{label}: ib_write_bw did not finish within {RUN_SECONDS} s "
                        f"(client: {_tail(out.stdout + out.stderr)}): the link is stalled or far below its rate; "
                        "check both ends' ports (ibstat) and counters")
        try:
            parse_ib_write_bw(out.stdout)
        except UnknownFormat:
            return bandwidth_verdict(out.stdout, threshold_gbps, label)  # refused: another run reads the same
        except CheckError as e:  # no row: the peer did not connect, or the run broke off after its header
            log = server.run(f"tail -n 3 {server_log(port)} 2>/dev/null")
            why = f"{e}; client: {_tail(out.stdout + out.stderr)}; server: {_tail(log.stdout)}"
            continue
        return bandwidth_verdict(out.stdout, threshold_gbps, label)
    return fail("FABRIC_BANDWIDTH", f"{label}: ib_write_bw gave no result in {tries} tries ({why}): check both "
                "ends' ports (ibstat) and that the server's address is reachable on the fabric")
