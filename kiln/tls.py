"""The cluster's certificate authority and each host's TLS certificate, kept with kiln's secrets.

kiln makes one CA per cluster (EC P-256, ten years) and, signed by it, one certificate per host for the
listeners kiln runs there (today the monitoring ones: node_exporter, Prometheus, Alertmanager,
dcgm-exporter): the host's name and inventory address as subject alternative names, valid
``kiln_tls_certificate_days`` days. Every client kiln configures (Prometheus' scrapes, kiln's own readers on
the operator's side and on hosts) trusts this CA alone and checks the name, so a host that is not the
inventory's cannot answer for it.

Files, in ``<secrets>/<cluster>/tls/`` (0700; each file 0600 as every secret): ``ca.key``, ``ca.crt``,
``hosts/NAME.key``, ``hosts/NAME.crt``. A host's certificate is made anew when it is missing, unreadable,
not the CA's, names other names or addresses than the inventory gives the host, or expires within
``kiln_tls_renew_days``; ``kiln deploy`` does that, so a cluster deployed at least that often never sees a
certificate expire (and the KilnCertificateExpiresSoon alert says when one is close). A dry run makes up what
it would write, in memory only.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
DIRECTORY = "tls"


class TlsError(Exception):
    pass


@dataclass(frozen=True)
class HostCertificate:
    cert: bytes  # PEM
    key: bytes = field(repr=False)  # PEM, PKCS#8, unencrypted: the listener reads it unattended

    def __repr__(self) -> str:
        return "HostCertificate(<key masked>)"


@dataclass(frozen=True)
class ClusterTls:
    ca: bytes  # the CA certificate, PEM: what every client trusts
    hosts: dict[str, HostCertificate]

    def host(self, name: str) -> HostCertificate:
        try:
            return self.hosts[name]
        except KeyError:
            raise TlsError(f"no TLS certificate for host {name!r}: kiln deploy makes one for every host") from None


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def new_ca(cluster_name: str, now: datetime.datetime | None = None) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) of a new CA for ``cluster_name``."""
    now = now or _now()
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kiln"),
                      x509.NameAttribute(NameOID.COMMON_NAME, f"kiln cluster CA {cluster_name}")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def _alt_names(name: str, addresses: list[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = [x509.DNSName(name)]
    for a in addresses:
        try:
            entry: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(a))
        except ValueError:
            entry = x509.DNSName(a)
        if entry not in out:
            out.append(entry)
    return out


def new_host_certificate(ca_cert: bytes, ca_key: bytes, name: str, addresses: list[str], days: int,
                         now: datetime.datetime | None = None) -> HostCertificate:
    """A certificate for host ``name`` (and each of ``addresses``: IPs as IP names, others as DNS names),
    signed by the CA, for TLS servers and clients."""
    now = now or _now()
    ca = x509.load_pem_x509_certificate(ca_cert)
    signer = serialization.load_pem_private_key(ca_key, password=None)
    key = _key()
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=True, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectAlternativeName(_alt_names(name, addresses)), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.public_key()), critical=False)
            .sign(signer, hashes.SHA256()))
    return HostCertificate(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


_STILL_USABLE = ("names other names or addresses than the inventory's",)


def expires(cert_pem: bytes) -> datetime.datetime:
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc


def why_renew(host: HostCertificate, ca_cert: bytes, name: str, addresses: list[str], renew_days: int,
              now: datetime.datetime | None = None) -> str | None:
    """Why ``host`` must be made anew (None: it is still good)."""
    now = now or _now()
    try:
        cert = x509.load_pem_x509_certificate(host.cert)
        key = serialization.load_pem_private_key(host.key, password=None)
        ca = x509.load_pem_x509_certificate(ca_cert)
    except ValueError:
        return "unreadable"
    if cert.public_key().public_numbers() != key.public_key().public_numbers():
        return "its key is another certificate's"
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return "not signed by the cluster's CA"
    try:
        names = list(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
    except x509.ExtensionNotFound:
        names = []
    if sorted(map(repr, names)) != sorted(map(repr, _alt_names(name, addresses))):
        return "names other names or addresses than the inventory's"
    left = cert.not_valid_after_utc - now
    if left < datetime.timedelta(days=renew_days):
        return f"expires in {max(left.days, 0)} days (renewed {renew_days} days ahead)"
    return None


def _replace_private(path: Path, data: bytes) -> None:
    """``path`` holds ``data``, 0600 from creation, swapped in whole (a crash leaves the old or the new)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.unlink()
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _read(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise TlsError(f"cannot read {path}: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        return f.read(1 << 20)


def _private_dir(path: Path, create: bool) -> None:
    if path.is_symlink():
        raise TlsError(f"{path} is a symbolic link: kiln keeps its CA only in a real directory")
    if create:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(path, 0o700)


def cluster_tls(cluster_name: str, directory: Path, hosts: dict[str, list[str]], days: int, renew_days: int,
                create: bool = True, now: datetime.datetime | None = None) -> ClusterTls:
    """The CA and a current certificate for each of ``hosts`` (name -> addresses) in ``directory`` (the
    cluster's secrets directory). With ``create`` what is missing or due is made and kept; without, a kept
    certificate is used as it is while it is whole and the CA's, and what is missing is made up in memory and
    never written (a dry run shows the change)."""
    tls = directory / DIRECTORY
    _private_dir(tls, create)
    ca_cert, ca_key = _read(tls / "ca.crt") if tls.exists() else None, _read(tls / "ca.key") if tls.exists() else None
    if (ca_cert is None) != (ca_key is None):
        raise TlsError(f"{tls} holds only one of ca.crt and ca.key: put the other back, or remove both to make a new "
                       "CA (every host's certificate is then made anew)")
    if ca_cert is None:
        ca_cert, ca_key = new_ca(cluster_name, now)
        if create:
            _replace_private(tls / "ca.key", ca_key)
            _replace_private(tls / "ca.crt", ca_cert)
    else:
        try:
            x509.load_pem_x509_certificate(ca_cert)
            serialization.load_pem_private_key(ca_key, password=None)
        except ValueError:
            raise TlsError(f"{tls}/ca.crt or ca.key is not a PEM certificate or key: remove both to make a new CA "
                           "(every host's certificate is then made anew)") from None
    if create:
        _private_dir(tls / "hosts", create)
    out = {}
    for name, addresses in sorted(hosts.items()):
        cert, key = _read(tls / "hosts" / f"{name}.crt"), _read(tls / "hosts" / f"{name}.key")
        current = HostCertificate(cert, key) if cert and key else None
        # without ``create`` (a dry run, kiln patch, kiln drift) a kept certificate stays as long as it is whole
        # and the CA's: what would be made up in memory is never kept, and a patched node would get a
        # certificate no deploy knows
        due = why_renew(current, ca_cert, name, addresses, renew_days if create else -CA_DAYS, now) if current else "missing"
        if due and (create or due not in _STILL_USABLE):
            current = new_host_certificate(ca_cert, ca_key, name, addresses, days, now)
            if create:
                _replace_private(tls / "hosts" / f"{name}.key", current.key)
                _replace_private(tls / "hosts" / f"{name}.crt", current.cert)
        out[name] = current
    return ClusterTls(ca_cert, out)


def ca_file(secrets_directory: Path) -> Path:
    """Where the operator's side finds the CA certificate to trust (kiln alerts, kiln patch's silences)."""
    return secrets_directory / DIRECTORY / "ca.crt"
