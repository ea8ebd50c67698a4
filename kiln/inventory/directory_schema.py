"""``kiln_directory``: the LDAP directory that the teams marked ``directory: true`` come from.

SSSD on every node reads users and groups from it (roles/directory.py), so a user's uid and groups are
the directory's, the same on every node and on the NFS server, and kiln makes no local account for
them. kiln reads the directory only: it never writes entries, and it binds anonymously (a bind account
is not offered yet). The connection is always TLS and the server's certificate is always checked
against the CAs of ``ca_file``: ``ldap://`` URIs use StartTLS, ``ldaps://`` TLS from the first byte; there
is no setting that turns either off.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from pydantic import AfterValidator, Field, field_validator

from kiln.inventory.formats import FilePath
from kiln.inventory.strict import Strict

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
# ldap:// or ldaps://, a host name or IPv4 address (or [IPv6]), an optional port: no path, no query
LDAP_URI = re.compile(rf"^ldaps?://(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:.]+\])(?::[0-9]{{1,5}})?$", re.ASCII)
# attribute=value pairs, comma-separated, values of letters, digits, '_', '.', '-' (and inner spaces):
# no escapes, quotes or '+': the DN fills one line of sssd.conf and nothing else
_RDN = r"[A-Za-z][A-Za-z0-9-]{0,63}=[A-Za-z0-9_.-]+(?: [A-Za-z0-9_.-]+)*"
BASE_DN = re.compile(rf"^{_RDN}(?:,{_RDN}){{0,15}}$", re.ASCII)


def _ldap_uri(value: str) -> str:
    if not isinstance(value, str) or not LDAP_URI.match(value):
        raise ValueError(f"{value!r} is not an LDAP URI: ldap://HOST[:PORT] (StartTLS) or ldaps://HOST[:PORT]")
    port = value.rsplit(":", 1)[-1] if value.count(":") > 1 and not value.endswith("]") else None
    if port is not None and not 1 <= int(port) <= 65535:
        raise ValueError(f"{value!r}: port {port} is out of range (1-65535)")
    return value


def _base_dn(value: str) -> str:
    if not isinstance(value, str) or not BASE_DN.match(value):
        raise ValueError(f"{value!r} is not a base DN kiln takes: attribute=value pairs joined by ',' (e.g. "
                         "dc=example,dc=org), values of letters, digits, '_', '.', '-'")
    return value


LdapUri = Annotated[str, AfterValidator(_ldap_uri)]
BaseDn = Annotated[str, AfterValidator(_base_dn)]


class Directory(Strict):
    """Where directory teams' users and groups come from (SSSD, ``id_provider = ldap``, RFC 2307: a
    group's members are its ``memberUid`` values)."""

    uris: list[LdapUri] = Field(min_length=1, max_length=8, description="the directory's servers, tried in "
                                "order (SSSD's ldap_uri): ldap://HOST[:PORT] with StartTLS, or ldaps://HOST[:PORT]")
    base_dn: BaseDn = Field(description="where users and groups are searched (SSSD's ldap_search_base), e.g. "
                            "dc=example,dc=org")
    ca_file: FilePath = Field(description="a file of PEM certificates, relative to the inventory's parent directory (as "
                              "kiln_secrets_dir: every file inside the inventory is read as inventory): the "
                              "CA(s) that signed the servers' certificates; SSSD accepts a server only with a "
                              "certificate they signed, for the name in uris")
    min_id: int = Field(1000, ge=1000, le=2**31 - 2, description="the lowest uid and gid taken from the "
                        "directory (SSSD's min_id): an entry below it (root, a service account) is ignored")

    @property
    def start_tls(self) -> bool:
        """ldap:// URIs: TLS begins with StartTLS (ldaps://: from the first byte)."""
        return self.uris[0].startswith("ldap://")

    @field_validator("uris")
    @classmethod
    def _one_scheme(cls, value: list[str]) -> list[str]:
        if len({uri.split(":", 1)[0] for uri in value}) > 1:
            raise ValueError("mixes ldap:// and ldaps://: SSSD begins TLS one way for every server; use one scheme")
        return value

    def ca_certificates(self, inventory: Path) -> str:
        """The CA file's certificates as PEM, read beside the ``inventory`` directory and written back from what
        was parsed (only certificates reach the nodes, never text around them). Raises ValueError saying
        what is wrong with the file."""
        path = inventory.parent / self.ca_file
        try:
            data = path.read_bytes()
        except OSError as error:
            raise ValueError(f"{self.ca_file}: cannot be read ({error.strerror or error})") from None
        if b"PRIVATE KEY" in data:
            raise ValueError(f"{self.ca_file} holds a private key: give the CA's certificate only, and keep the "
                             "key out of the inventory")
        try:
            certificates = x509.load_pem_x509_certificates(data)
        except ValueError as error:
            raise ValueError(f"{self.ca_file} is not PEM certificates ({error})") from None
        return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certificates)
