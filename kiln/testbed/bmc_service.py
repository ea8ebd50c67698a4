"""The testbed BMC's process (kiln/testbed/bmc.py starts and stops it): the testbed's Redfish endpoint
serving the testbed's nodes, whose power is the testbed's own, and an IPMI endpoint for each node
(kiln/testbed/ipmi_service.py) on the same power.

    python -m kiln.testbed.bmc_service TESTBED_NAME
"""

from __future__ import annotations

import sys

from kiln.testbed import ipmi_service
from kiln.testbed.bmc import PORT, USER
from kiln.testbed.redfish_service import RedfishService
from kiln.testbed.testbed import Testbed


class TestbedPower:
    """The Power backend (redfish_service.Power) of the testbed's nodes."""

    __test__ = False

    def __init__(self, testbed):
        self.testbed = testbed

    def _node(self, name: str):
        return next(n for n in self.testbed.recorded_nodes() if n.name == name)

    def state(self, node: str) -> str:
        return "On" if self.testbed.kind().running(self._node(node)) else "Off"

    def off(self, node: str) -> None:
        self.testbed.power_loss(node)

    def on(self, node: str) -> None:
        self.testbed.start(node)


def main(name: str) -> None:
    testbed = Testbed(name=name, progress=lambda m: print(m, flush=True))
    bmc = testbed.bmc
    _, password = bmc.credentials()
    service = RedfishService([n.name for n in testbed.recorded_nodes()], TestbedPower(testbed), USER, password,
                             str(bmc.cert), str(bmc.key), host=bmc.address, port=PORT,
                             log=lambda line: print(line, flush=True))
    ipmi = ipmi_service.serve(service.nodes, TestbedPower(testbed), USER, password, bmc.address,
                              log=lambda line: print(line, flush=True))
    (bmc.dir / "listening").write_text(" ".join([service.address, *service.nodes]) + "\n")
    print(f"serving Redfish for {', '.join(service.nodes)} on https://{service.address}, and IPMI (RMCP+) on "
          f"{', '.join(f'{n} {bmc.address}:{p}' for n, p in ipmi.items())}", flush=True)
    service.server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1])
