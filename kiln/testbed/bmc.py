"""The testbed's BMC for its nodes (containers and VMs): the testbed's Redfish endpoint
(kiln/testbed/redfish_service.py) serving every node of the testbed, whose power is the testbed's own (a
power cycle is the power loss of ``kiln testbed inject NODE power-loss``, then ``kiln testbed start NODE``).

Started by ``kiln testbed up`` (either kind) in a session of its own, stopped by its pid like the apt
proxy; listens on the testbed bridge's host address, port ``PORT``, where nodes (kiln-remediate on the
controller) reach it. Its certificate is its own, self-signed, made once under the testbed's state; the
inventory pins its fingerprint. Its password is made once too, and placed where the testbed inventory's
kiln secrets are (``bmc.password``), as a site gives its BMC password to the operator.

    python -m kiln.testbed.bmc_service TESTBED_NAME
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets as random
import subprocess
import sys
import time
from pathlib import Path

from kiln.secrets import write_new_private
from kiln.testbed.host import TestbedError, pid_alive, read_pid, stop_recorded

PORT = 8623
USER = "kiln"
PASSWORD_LENGTH = 20
MARKER = "kiln.testbed.bmc_service"  # the process: python -m MARKER TESTBED


class TestbedBmc:
    __test__ = False

    def __init__(self, state: Path, address: str, testbed: str):
        self.dir, self.address, self.testbed = state / "bmc", address, testbed

    @property
    def pidfile(self) -> Path:
        return self.dir / "bmc.pid"

    @property
    def cert(self) -> Path:
        return self.dir / "cert.pem"

    @property
    def key(self) -> Path:
        return self.dir / "key.pem"

    @property
    def password_file(self) -> Path:
        return self.dir / "password"

    def credentials(self) -> tuple[str, str]:
        """(its certificate's SHA-256 fingerprint, its password), made on first use and kept."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        from checks.redfish import fingerprint_of
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not (self.cert.exists() and self.key.exists()):
            key = ec.generate_private_key(ec.SECP256R1())
            name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, f"kiln testbed {self.testbed} BMC")])
            now = datetime.datetime.now(datetime.timezone.utc)
            cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                    .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
                    .not_valid_after(now + datetime.timedelta(days=3650))
                    .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(self.address))]),
                                   critical=False)
                    .sign(key, hashes.SHA256()))
            write_new_private(self.key, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
            self.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        if not self.password_file.exists() or len(self.password_file.read_text().strip()) > PASSWORD_LENGTH:
            # 20 characters (120 bits): the most IPMI v2.0 takes, as the testbed's IPMI endpoint shares it
            self.password_file.unlink(missing_ok=True)
            write_new_private(self.password_file, random.token_urlsafe(15).encode())
        der = x509.load_pem_x509_certificate(self.cert.read_bytes()).public_bytes(serialization.Encoding.DER)
        return fingerprint_of(der), self.password_file.read_text().strip()

    def place_password(self, secrets_dir: Path) -> None:
        """The password where kiln reads the cluster's BMC password (``bmc.password``)."""
        from kiln.secrets import BMC_PASSWORD
        _, password = self.credentials()
        secrets_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        target = secrets_dir / BMC_PASSWORD
        if not target.exists() or target.read_text().strip() != password:
            target.unlink(missing_ok=True)
            write_new_private(target, (password + "\n").encode())

    def running(self) -> bool:
        return pid_alive(read_pid(self.pidfile), MARKER)

    def serves(self) -> list[str]:
        try:
            return (self.dir / "listening").read_text().split()[1:]
        except OSError:
            return []

    def start(self, nodes: list[str]) -> None:
        """Serve ``nodes``: started, or started again when it serves others."""
        if self.running() and sorted(self.serves()) == sorted(nodes) and not self._password_changed():
            return
        self.stop()  # a stale pid file from a crashed run, or another set of nodes
        self.credentials()
        with open(self.dir / "bmc.log", "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", MARKER, self.testbed], start_new_session=True,
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd="/",
                                    env=dict(os.environ, PYTHONPATH=_kiln_path()))
        self.pidfile.write_text(f"{proc.pid}\n")
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            if (self.dir / "listening").exists():
                return
            time.sleep(0.1)
        raise TestbedError(f"the testbed's BMC did not start on {self.address}:{PORT}; see {self.dir / 'bmc.log'}")

    def _password_changed(self) -> bool:
        """The password was made anew after the running BMC read it (a testbed from an older kiln)."""
        try:
            return self.password_file.stat().st_mtime > (self.dir / "listening").stat().st_mtime
        except OSError:
            return True

    def stop(self) -> None:
        stop_recorded(self.pidfile, MARKER)
        (self.dir / "listening").unlink(missing_ok=True)


def _kiln_path() -> str:
    return str(Path(__file__).resolve().parents[2])
