"""The keys of kiln's Kerberos realm (roles/kerberos.py), kept with kiln's secrets, and the keytabs made
from them:

    kerberos/host/HOST      the machine principal host/HOST of an NFS client (root's mounts, rpc.gssd)
    kerberos/nfs/HOST       the service principal nfs/HOST of an NFS server
    kerberos/users/USER     a cluster user's principal USER: what the user's jobs reach NFS with

Each file holds a random password (256 bits). The KDC sets each principal's key from it (``addprinc -pw``);
kiln derives the same key itself (RFC 3962's string-to-key for aes256-cts-hmac-sha1-96: PBKDF2-HMAC-SHA1
with the realm and the principal's parts as salt, 4096 iterations, then RFC 3961's key derivation) and
writes each host's keytab (MIT's keytab format, version 0x502) with it, so no key ever travels from the KDC
to a node: every keytab is made on the operator's side, like every other file kiln places, and its key
version is the one the KDC is set to (``KVNO``).
"""

from __future__ import annotations

import hashlib
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from kiln.disk_keys import kept_token

ENCTYPE = "aes256-cts-hmac-sha1-96"
ENCTYPE_NUMBER = 18  # RFC 3962
ITERATIONS = 4096  # RFC 3962's default string-to-key parameter, what MIT's KDC uses without a policy
KVNO = 1  # kiln sets every principal's key version to 1 (modprinc -kvno 1) after it sets the key
NT_PRINCIPAL = 1
KEYTAB_VERSION = 0x0502


class KerberosKeysError(Exception):
    pass


def nfold(data: bytes, size: int) -> bytes:
    """RFC 3961's n-fold of ``data`` to ``size`` bytes: copies rotated right by 13 bits each, laid end to end
    to the least common multiple of both lengths, added in ``size``-byte blocks with end-around carry."""
    length = len(data)
    lcm = length * size // math.gcd(length, size)
    bits = length * 8
    value = int.from_bytes(data, "big")
    stream = b""
    for i in range(lcm // length):
        shift = (13 * i) % bits
        rotated = ((value >> shift) | (value << (bits - shift))) & ((1 << bits) - 1)
        stream += rotated.to_bytes(length, "big")
    modulus = (1 << (size * 8)) - 1
    total = 0
    for start in range(0, lcm, size):
        total += int.from_bytes(stream[start:start + size], "big")
        total = (total & modulus) + (total >> (size * 8))  # ones' complement: the carry comes round
    total = (total & modulus) + (total >> (size * 8))
    return total.to_bytes(size, "big")


def _aes_block(key: bytes, block: bytes) -> bytes:
    encryptor = Cipher(algorithms.AES(key), modes.ECB()).encryptor()  # noqa: S305 - one block: RFC 3961's DR
    return encryptor.update(block) + encryptor.finalize()


def derive(key: bytes, constant: bytes) -> bytes:
    """RFC 3961's DK(key, constant) for AES: DR's blocks chained from the n-folded constant (one AES block
    each, so CBC-CTS with a zero IV is plain AES), as many as the key's length; random-to-key is identity."""
    block = nfold(constant, 16)
    out = b""
    while len(out) < len(key):
        block = _aes_block(key, block)
        out += block
    return out[:len(key)]


def string_to_key(password: str, salt: str, iterations: int = ITERATIONS) -> bytes:
    """aes256-cts-hmac-sha1-96's key from a password (RFC 3962, section 4)."""
    tkey = hashlib.pbkdf2_hmac("sha1", password.encode(), salt.encode(), iterations, 32)
    return derive(tkey, b"kerberos")


def split(principal: str) -> tuple[list[str], str]:
    """A principal's name parts and realm: ``nfs/host@REALM`` -> (["nfs", "host"], "REALM")."""
    name, _, realm = principal.partition("@")
    return name.split("/"), realm


def salt(principal: str) -> str:
    """The default ("normal") salt: the realm, then every name part, with nothing between."""
    parts, realm = split(principal)
    return realm + "".join(parts)


def _counted(data: bytes) -> bytes:
    return struct.pack(">H", len(data)) + data


def keytab(entries: list[tuple[str, bytes]], timestamp: int = 0) -> bytes:
    """A keytab file (MIT's format 0x502, as ``ktutil`` writes it) holding each (principal, key) at ``KVNO``,
    aes256-cts-hmac-sha1-96."""
    out = struct.pack(">H", KEYTAB_VERSION)
    for principal, key in entries:
        parts, realm = split(principal)
        body = (struct.pack(">H", len(parts)) + _counted(realm.encode())
                + b"".join(_counted(p.encode()) for p in parts)
                + struct.pack(">IIB", NT_PRINCIPAL, timestamp, KVNO & 0xFF)
                + struct.pack(">H", ENCTYPE_NUMBER) + _counted(key) + struct.pack(">I", KVNO))
        out += struct.pack(">i", len(body)) + body
    return out


def read_keytab(data: bytes) -> list[tuple[str, int, int, bytes]]:
    """(principal, kvno, enctype, key) of each entry of a keytab file (the reverse of ``keytab``; for tests)."""
    if struct.unpack(">H", data[:2])[0] != KEYTAB_VERSION:
        raise KerberosKeysError("not a keytab of format 0x502")
    entries, at = [], 2
    while at < len(data):
        (size,) = struct.unpack(">i", data[at:at + 4])
        body, at = data[at + 4:at + 4 + size], at + 4 + size
        (count,), pos = struct.unpack(">H", body[:2]), 2
        strings = []
        for _ in range(count + 1):
            (n,) = struct.unpack(">H", body[pos:pos + 2])
            strings.append(body[pos + 2:pos + 2 + n].decode())
            pos += 2 + n
        _, _, _, enctype = struct.unpack(">IIBH", body[pos:pos + 11])
        (n,) = struct.unpack(">H", body[pos + 11:pos + 13])
        key = body[pos + 13:pos + 13 + n]
        kvno = struct.unpack(">I", body[pos + 13 + n:pos + 17 + n])[0] if len(body) >= pos + 17 + n else body[pos + 8]
        entries.append(("/".join(strings[1:]) + "@" + strings[0], kvno, enctype, key))
    return entries


@dataclass(frozen=True)
class RealmKeys:
    realm: str
    passwords: dict[str, str] = field(default_factory=dict)  # principal -> password

    def __repr__(self) -> str:
        return f"RealmKeys({self.realm}, <masked>)"

    def key(self, principal: str) -> bytes:
        return string_to_key(self.passwords[principal], salt(principal))

    def keytab(self, *principals: str) -> bytes:
        return keytab([(p, self.key(p)) for p in principals])

    def hidden(self) -> list[str]:
        """What must never reach a log: every password."""
        return list(self.passwords.values())


def secret_name(principal: str) -> str:
    """Where a principal's password is kept under the secrets directory: kerberos/host/HOST, kerberos/nfs/HOST,
    kerberos/users/USER."""
    parts, _ = split(principal)
    return "kerberos/" + ("/".join(parts) if len(parts) == 2 else f"users/{parts[0]}")


def realm_keys(directory: Path, realm: str, principals: list[str], read, write_new, create: bool) -> RealmKeys | None:
    """A password for each principal, read from the secrets ``directory``, made and kept where missing
    (``write_new(path, bytes)``); ``read(path)`` reads one kept file (it checks owner and mode). With
    ``create=False`` (dry runs) what is missing is made up and never written. None without principals."""
    if not principals:
        return None
    passwords = {}
    for principal in principals:
        password = kept_token(directory, secret_name(principal), read, write_new, create)
        if password is None:
            raise KerberosKeysError(f"{directory / secret_name(principal)} is not a password kiln made (32 or more "
                                    "letters, digits, '-', '_'): delete it to make a new one (the next kiln deploy "
                                    "sets the new key on the KDC and in every keytab)")
        passwords[principal] = password
    return RealmKeys(realm=realm, passwords=passwords)
