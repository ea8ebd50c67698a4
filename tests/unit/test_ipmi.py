"""kiln-remediate's IPMI path (checks/ipmi.py), for BMCs without Redfish: the real ipmitool (Debian's) against
the testbed's IPMI endpoint (kiln/testbed/ipmi_service.py: pyghmi's RMCP+ server) on this machine's
loopback, its power a stand-in that records what it was told; and the inventory's rules for an IPMI BMC."""

from __future__ import annotations

import shutil
import time

import pytest
from pydantic import ValidationError

from checks import ipmi
from kiln.inventory.remediation_schema import Bmc
from tests.ports import free_port

PORT = free_port("127.0.0.2", udp=True, count=2)  # the two nodes' IPMI endpoints (UDP)


class Power:
    def __init__(self):
        self.states, self.calls = {"n1": "Off", "n2": "On"}, []

    def state(self, node: str) -> str:
        return self.states[node]

    def on(self, node: str) -> None:
        self.calls.append(("on", node))
        self.states[node] = "On"

    def off(self, node: str) -> None:
        self.calls.append(("off", node))
        self.states[node] = "Off"


@pytest.fixture(scope="module")
def bmcs():
    if shutil.which("ipmitool") is None:
        pytest.skip("ipmitool is not installed (apt-get install ipmitool): the IPMI path runs the real client")
    from kiln.testbed.ipmi_service import serve
    power, log = Power(), []
    # bound to 127.0.0.2, not the address pyghmi wakes its own I/O thread on (as the testbed's bridge address)
    assert serve(["n1", "n2"], power, "kiln", "s3cret-pw", "127.0.0.2", log.append, base=PORT - 1) == \
        {"n1": PORT, "n2": PORT + 1}
    return power, log


def _config(port: int) -> dict:
    return {"protocol": "ipmi", "host": "127.0.0.2", "port": port, "user": "kiln", "cipher_suite": 3}


def test_a_node_that_is_off_is_powered_on_and_one_that_is_on_is_cycled(bmcs, tmp_path):
    power, log = bmcs
    password = tmp_path / "bmc.password"
    password.write_text("s3cret-pw\n")
    # the second node's BMC first: every node's socket is served from the start, not only the first's
    assert ipmi.power_cycle_node(_config(PORT + 1), str(password)) == "PowerCycle"
    assert ipmi.power_cycle_node(_config(PORT), str(password)) == "On"
    deadline = time.monotonic() + 10
    while len(power.calls) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sorted(power.calls) == [("off", "n2"), ("on", "n1"), ("on", "n2")], (power.calls, log)
    assert "n1: IPMI chassis power on accepted" in log


def test_a_wrong_password_or_cipher_suite_is_refused_by_the_bmc_and_said_with_ipmitools_words(bmcs, tmp_path):
    power, _ = bmcs
    before = list(power.calls)
    wrong = tmp_path / "wrong"
    wrong.write_text("not-it\n")
    with pytest.raises(ipmi.IpmiError, match=rf"BMC 127.0.0.2:{PORT} \(IPMI\): ipmitool chassis power status exited 1: .+"
                                             r": check the BMC's address, user, password"):
        ipmi.power_cycle_node(_config(PORT), str(wrong))
    password = tmp_path / "bmc.password"
    password.write_text("s3cret-pw\n")
    with pytest.raises(ipmi.IpmiError, match=r"RMCP\+ session"):  # a cipher suite the BMC does not offer
        ipmi.power_cycle_node({**_config(PORT), "cipher_suite": 17}, str(password))
    longer = tmp_path / "long"
    longer.write_text("x" * 21 + "\n")
    with pytest.raises(ipmi.IpmiError, match="longer than 20 bytes, the most IPMI v2.0 takes"):
        ipmi.power_cycle_node(_config(PORT), str(longer))
    with pytest.raises(ipmi.IpmiError, match="cannot read its password"):
        ipmi.power_cycle_node(_config(PORT), str(tmp_path / "missing"))
    assert power.calls == before


def test_the_password_travels_in_the_environment_never_on_the_command_line():
    seen = {}

    def run(args, **kwargs):
        seen["args"], seen["env"] = args, kwargs["env"]
        import subprocess
        return subprocess.CompletedProcess(args, 0, "Chassis Power is on\n", "")
    # the stand-in prints the status line for the cycle too, which is not what a cycle prints
    with pytest.raises(ipmi.IpmiError, match="chassis power cycle printed 'Chassis Power is on'"):
        import tempfile
        with tempfile.NamedTemporaryFile("w") as f:
            f.write("pw-123\n")
            f.flush()
            ipmi.power_cycle_node({"host": "bmc1", "user": "kiln"}, f.name, run=run)
    assert "pw-123" not in " ".join(seen["args"]) and seen["env"]["IPMI_PASSWORD"] == "pw-123"
    assert seen["args"][:9] == ["ipmitool", "-I", "lanplus", "-C", "17", "-H", "bmc1", "-p", "623"]


def test_the_power_status_reader_refuses_what_is_not_its_line():
    assert ipmi.parse_power_status("Chassis Power is off\n") == "off"
    for text in ("", "Chassis Power is unknown", "Chassis Power is on\nChassis Power is off\n",
                 "Error: Unable to establish IPMI v2 / RMCP+ session\n"):
        with pytest.raises(ipmi.IpmiError):
            ipmi.parse_power_status(text)


def test_an_ipmi_bmc_in_the_inventory_takes_no_certificate_and_a_redfish_one_no_cipher_suite():
    b = Bmc(protocol="ipmi", host="10.0.0.5", user="kiln", cipher_suite=3)
    assert (b.port_number, b.address) == (623, "10.0.0.5:623")
    assert Bmc(host="bmc1", user="kiln", fingerprint="ab" + ":ab" * 31).port_number == 443
    for bad in ({"protocol": "ipmi", "fingerprint": "ab" + ":ab" * 31}, {"protocol": "ipmi", "system": "/redfish/v1/Systems/1"},
                {"protocol": "ipmi", "cipher_suite": 1}, {"protocol": "telnet"},
                {"fingerprint": "ab" + ":ab" * 31, "cipher_suite": 17}):
        with pytest.raises(ValidationError):
            Bmc(host="10.0.0.5", user="kiln", **bad)
