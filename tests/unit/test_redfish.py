"""kiln's Redfish client (checks/redfish.py) against the testbed's Redfish endpoint
(kiln/testbed/redfish_service.py), both real: HTTPS with a certificate made here, basic auth, the
resources and error bodies of DMTF Redfish. The power behind it is an in-memory stand-in."""

from __future__ import annotations

import datetime
import ipaddress
import time

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from checks.redfish import Redfish, RedfishError, fingerprint_of, host_and_port
from kiln.testbed.redfish_service import RedfishService
from tests.ports import free_port


def certificate(tmp_path, name: str) -> tuple[str, str, str]:
    """A self-signed certificate for 127.0.0.1, as a BMC has: (cert file, key file, SHA-256 fingerprint)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_file), str(key_file), fingerprint_of(cert.public_bytes(serialization.Encoding.DER))


class Power:
    def __init__(self, **states):
        self.states, self.log = dict(states), []

    def state(self, node):
        return self.states[node]

    def on(self, node):
        self.log.append(("on", node))
        self.states[node] = "On"

    def off(self, node):
        self.log.append(("off", node))
        self.states[node] = "Off"


@pytest.fixture
def bmc(tmp_path):
    cert, key, print_ = certificate(tmp_path, "bmc")
    power = Power(gpu01="On")
    service = RedfishService(["gpu01"], power, "admin", "s3cret", cert, key).start()
    yield service, power, cert, print_
    service.stop()


def wait_until(condition, seconds=5.0):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return condition()


def test_a_running_node_is_power_cycled_through_a_bmc_trusted_by_its_ca(bmc):
    service, power, cert, _ = bmc
    client = Redfish(service.address, "admin", "s3cret", ca_file=cert)
    assert client.power_state() == "On"
    assert client.power_cycle() == "PowerCycle"
    assert service.resets == [("gpu01", "PowerCycle")]
    assert wait_until(lambda: power.log == [("off", "gpu01"), ("on", "gpu01")]), power.log
    assert client.system_path == "/redfish/v1/Systems/gpu01"


def test_a_node_that_is_off_is_powered_on(bmc):
    service, power, cert, _ = bmc
    power.states["gpu01"] = "Off"
    assert Redfish(service.address, "admin", "s3cret", ca_file=cert).power_cycle() == "On"
    assert wait_until(lambda: power.states["gpu01"] == "On")


def test_a_bmc_without_power_cycle_gets_force_restart_and_nothing_it_does_not_list(tmp_path):
    cert, key, _ = certificate(tmp_path, "old-bmc")
    power = Power(gpu01="On")
    service = RedfishService(["gpu01"], power, "admin", "pw", cert, key, reset_types=["On", "ForceOff", "ForceRestart"]).start()
    try:
        assert Redfish(service.address, "admin", "pw", ca_file=cert).power_cycle() == "ForceRestart"
        assert wait_until(lambda: len(power.log) == 2), power.log  # the BMC carries a reset out after its answer
        power.states["gpu01"] = "Off"
        service.reset_types = ["ForceOff"]
        with pytest.raises(RedfishError, match="is Off and offers none of On"):
            Redfish(service.address, "admin", "pw", ca_file=cert).power_cycle()
    finally:
        service.stop()
    assert service.resets == [("gpu01", "ForceRestart")]


def test_a_pinned_fingerprint_is_checked_before_the_credentials_are_sent(bmc, tmp_path):
    service, _, _, print_ = bmc
    assert Redfish(service.address, "admin", "s3cret", fingerprint=print_.upper()).power_state() == "On"
    asked = len(service.requests)
    other = certificate(tmp_path, "impostor")[2]
    with pytest.raises(RedfishError, match="not the pinned .*nothing was sent"):
        Redfish(service.address, "admin", "s3cret", fingerprint=other).power_state()
    assert len(service.requests) == asked  # no request reached the server


def test_a_certificate_nobody_vouches_for_is_refused(bmc, tmp_path):
    service, _, _, _ = bmc
    other_ca = certificate(tmp_path, "other-ca")[0]
    with pytest.raises(RedfishError, match="certificate is not trusted"):
        Redfish(service.address, "admin", "s3cret", ca_file=other_ca).power_state()
    assert service.requests == []


def test_trust_must_be_given_one_way_and_a_fingerprint_must_be_one():
    with pytest.raises(RedfishError, match="CA file or its SHA-256 fingerprint"):
        Redfish("bmc1", "admin", "pw")
    with pytest.raises(RedfishError, match="CA file or its SHA-256 fingerprint"):
        Redfish("bmc1", "admin", "pw", ca_file="/x", fingerprint="ab:" * 31 + "ab")
    with pytest.raises(RedfishError, match="is not a SHA-256 fingerprint"):
        Redfish("bmc1", "admin", "pw", fingerprint="ab:cd")


def test_wrong_credentials_unknown_reset_types_and_missing_systems_say_what_the_bmc_said(bmc):
    service, power, cert, _ = bmc
    with pytest.raises(RedfishError, match="refused the credentials \\(HTTP 401\\)"):
        Redfish(service.address, "admin", "wrong", ca_file=cert).power_state()
    client = Redfish(service.address, "admin", "s3cret", ca_file=cert)
    with pytest.raises(RedfishError, match="HTTP 400 .*ResetType .*not supported"):
        client._call("POST", "/redfish/v1/Systems/gpu01/Actions/ComputerSystem.Reset", {"ResetType": "Nmi"})
    with pytest.raises(RedfishError, match="HTTP 400 .*requires the parameter ResetType"):
        client._call("POST", "/redfish/v1/Systems/gpu01/Actions/ComputerSystem.Reset", {})
    with pytest.raises(RedfishError, match="HTTP 404"):
        Redfish(service.address, "admin", "s3cret", ca_file=cert, system="/redfish/v1/Systems/gpu99").power_state()
    with pytest.raises(RedfishError, match="not a Redfish path"):
        client._call("GET", "/admin")
    assert power.log == []


def test_a_bmc_with_several_systems_needs_the_nodes_named(tmp_path):
    cert, key, _ = certificate(tmp_path, "chassis")
    service = RedfishService(["a", "b"], Power(a="On", b="On"), "admin", "pw", cert, key).start()
    try:
        with pytest.raises(RedfishError, match="lists 2 systems: name the node's"):
            Redfish(service.address, "admin", "pw", ca_file=cert).power_state()
        assert Redfish(service.address, "admin", "pw", ca_file=cert, system="/redfish/v1/Systems/b").power_state() == "On"
    finally:
        service.stop()


def test_a_bmc_that_does_not_answer_says_so(tmp_path):
    port = free_port()
    cert = certificate(tmp_path, "gone")[0]
    with pytest.raises(RedfishError, match="did not answer"):
        Redfish(f"127.0.0.1:{port}", "admin", "pw", ca_file=cert, timeout=2).power_state()


@pytest.mark.parametrize("address, expected", [
    ("bmc1", ("bmc1", 443)), ("bmc1:8443", ("bmc1", 8443)), ("[fe80::1]", ("fe80::1", 443)),
    ("[fe80::1]:8443", ("fe80::1", 8443)), ("fe80::1", ("fe80::1", 443)), ("10.0.0.5:623", ("10.0.0.5", 623))])
def test_addresses(address, expected):
    assert host_and_port(address) == expected


@pytest.mark.parametrize("address", ["bmc1:", "bmc 1", "[fe80::1", "bmc1:99999999", "bmc1:70000", "a/b:1"])
def test_addresses_that_are_not_one_are_refused(address):
    with pytest.raises(RedfishError, match="is not host, host:port"):
        host_and_port(address)
