"""The testbed's IPMI endpoint: for each node, a BMC that speaks IPMI v2.0 over LAN (RMCP+) on a UDP port of
its own, for kiln-remediate's IPMI path (checks/ipmi.py, ipmitool). pyghmi's BMC server does the protocol,
as OpenStack's VirtualBMC uses it; the power is the testbed's (kiln/testbed/bmc_service.py ``TestbedPower``),
as for the testbed's Redfish endpoint. It belongs to the testbed and is never called hardware proof.

What a BMC refuses it refuses: a wrong user or password (the RMCP+ session is not opened), an unknown
command. pyghmi's server offers cipher suite 3 only (HMAC-SHA1, AES-128): an inventory naming it gives
``cipher_suite: 3``. A chassis control is answered at once and carried out after, as BMCs do.
"""

from __future__ import annotations

import socket
import threading
from typing import Callable

from pyghmi.ipmi.bmc import Bmc

from kiln.testbed.redfish_service import Power

PORT_BASE = 6230  # node i of the testbed (1, 2, ...) on PORT_BASE + i


def port_of(index: int, base: int = PORT_BASE) -> int:
    return base + index


class NodeBmc(Bmc):
    """One node's BMC on ``address:port``."""

    def __init__(self, node: str, power: Power, user: str, password: str, address: str, port: int,
                 log: Callable[[str], None]):
        super().__init__({user: password}, port=port, address=address)
        self.node, self.power, self.log = node, power, log

    def _later(self, what: str, *steps: Callable[[str], None]) -> int:
        def carry_out() -> None:
            try:
                for step in steps:
                    step(self.node)
                self.log(f"{self.node}: IPMI {what} done, power {self.power.state(self.node)}")
            except Exception as e:  # the node's own failure to start: logged, as a BMC's event log would
                self.log(f"{self.node}: IPMI {what} failed: {e}")
        threading.Thread(target=carry_out, daemon=True).start()
        self.log(f"{self.node}: IPMI chassis {what} accepted")
        return 0

    def get_power_state(self) -> str:
        return "on" if self.power.state(self.node) == "On" else "off"

    def power_on(self) -> int:
        return self._later("power on", self.power.on) if self.get_power_state() == "off" else 0

    def power_off(self) -> int:
        return self._later("power off", self.power.off) if self.get_power_state() == "on" else 0

    def power_cycle(self) -> int:
        steps = (self.power.off, self.power.on) if self.get_power_state() == "on" else (self.power.on,)
        return self._later("power cycle", *steps)

    def power_reset(self) -> int:
        return self.power_cycle()

    def power_shutdown(self) -> int:
        return self.power_off()


def serve(nodes: list[str], power: Power, user: str, password: str, address: str,
          log: Callable[[str], None], base: int = PORT_BASE) -> dict[str, int]:
    """A BMC for each of ``nodes`` (port_of its place, 1-based), served by one thread; node -> port."""
    ports = {}
    for i, node in enumerate(nodes, start=1):
        NodeBmc(node, power, user, password, address, port_of(i, base), log)
        ports[node] = port_of(i, base)
    # pyghmi's I/O thread starts with the first socket and selects on the sockets there were then, for up to
    # 300 s: a datagram too short to be IPMI (it skips those) makes it look again, at every node's socket
    if ports:
        with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_DGRAM) as wake:
            wake.sendto(b"\x01", (address, port_of(1, base)))
    threading.Thread(target=Bmc.listen, daemon=True).start()
    return ports
