"""The keys of network-bound disk encryption (roles/disk_encryption.py), kept with kiln's secrets:

    tang/kiln-sig.jwk, tang/kiln-exc.jwk   the tang servers' signing and exchange keys (P-521 JWKs, as
                                            tangd keeps them), the same on every controller
    luks/HOST.VOLUME                        each encrypted volume's recovery passphrase: its first LUKS key
                                            slot, what an operator types to open it by hand when no tang
                                            server will ever answer again; it never stays on the node

kiln makes tang's keys itself so that it knows their thumbprint: every node binds its volume to the
signing key it expects (clevis's ``thp``), never to whatever answers at the tang server's address.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets as random
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import ec

SIGNING, EXCHANGE = "kiln-sig.jwk", "kiln-exc.jwk"
_USES = {SIGNING: ("ES512", ["sign", "verify"]), EXCHANGE: ("ECMR", ["deriveKey"])}
P521_BYTES = 66


class DiskKeysError(Exception):
    pass


@dataclass(frozen=True)
class DiskKeys:
    tang_keys: dict[str, bytes]                    # file name -> the JWK as tangd reads it
    thumbprint: str                                # RFC 7638 SHA-256 thumbprint of the signing key
    passphrases: dict[str, str] = field(default_factory=dict)  # "HOST.VOLUME" -> recovery passphrase

    def __repr__(self) -> str:
        return "DiskKeys(<masked>)"

    def passphrase(self, host: str, volume: str) -> str:
        return self.passphrases[f"{host}.{volume}"]

    def hidden(self) -> list[str]:
        """What must never reach a log: the passphrases and the private parts of tang's keys."""
        return [*self.passphrases.values(), *(json.loads(k)["d"] for k in self.tang_keys.values())]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def new_jwk(name: str) -> bytes:
    """A new P-521 key for tangd, as ``jose jwk gen -i '{"alg":"ES512"}'`` (or ECMR) writes one."""
    alg, ops = _USES[name]
    key = ec.generate_private_key(ec.SECP521R1())
    numbers = key.private_numbers()
    public = numbers.public_numbers
    jwk = {"alg": alg, "crv": "P-521", "d": _b64(numbers.private_value.to_bytes(P521_BYTES, "big")),
           "key_ops": ops, "kty": "EC", "x": _b64(public.x.to_bytes(P521_BYTES, "big")),
           "y": _b64(public.y.to_bytes(P521_BYTES, "big"))}
    return json.dumps(jwk, separators=(",", ":")).encode()


def thumbprint(jwk: bytes) -> str:
    """RFC 7638's SHA-256 thumbprint of an EC JWK (``jose jwk thp -a S256``): clevis's ``thp``."""
    key = json.loads(jwk)
    required = {k: key[k] for k in ("crv", "kty", "x", "y")}
    return _b64(hashlib.sha256(json.dumps(required, separators=(",", ":"), sort_keys=True).encode()).digest())


def check_jwk(path: Path, data: bytes) -> None:
    """A kept key is one tangd can use for its purpose, or ``DiskKeysError`` naming the file."""
    alg, ops = _USES[path.name]
    try:
        key = json.loads(data)
        ok = (key.get("kty") == "EC" and key.get("crv") == "P-521" and key.get("alg") == alg
              and set(key.get("key_ops", [])) == set(ops)
              and all(isinstance(key.get(k), str) and key[k] for k in ("d", "x", "y")))
    except (ValueError, AttributeError):
        ok = False
    if not ok:
        raise DiskKeysError(f"{path} is not a P-521 {alg} JWK for tang: delete it to make a new one (every node's "
                            "volume must then be bound again: run kiln deploy while the old key still serves)")


def kept_token(directory: Path, name: str, read, write_new, create: bool) -> str | None:
    """A random token (256 bits, URL-safe base64) kept as ``name`` (``luks/HOST.VOLUME``) in the secrets
    ``directory``: read back (``read(path)``), or made and written where missing (``write_new``, the directories
    of ``name`` made 0700; only with ``create``: a dry run's is never written). None: the kept file is no token
    kiln made (fewer than 32 letters, digits, '-', '_')."""
    path = directory / name
    if path.exists():
        token = read(path).decode().strip()
        made = len(token) >= 32 and token.isascii() and token.replace("-", "").replace("_", "").isalnum()
        return token if made else None
    token = random.token_urlsafe(32)
    if create:
        for parent in reversed(Path(name).parents[:-1]):  # luks, or kerberos then kerberos/host
            (directory / parent).mkdir(mode=0o700, exist_ok=True)
        write_new(path, token.encode())
    return token


def recovery_name(host: str, volume: str) -> str:
    return f"{host}.{volume}"


def disk_keys(directory: Path, volumes: list[tuple[str, str]], read, write_new, create: bool) -> DiskKeys | None:
    """Tang's keys and a recovery passphrase for each (host, volume), read from the secrets ``directory``,
    made and kept where missing (``write_new(path, bytes)``); ``read(path)`` reads one kept file (it checks
    owner and mode). With ``create=False`` (dry runs) what is missing is made up and never written. None
    when no host has an encrypted volume."""
    if not volumes:
        return None
    keys = {}
    for name in (SIGNING, EXCHANGE):
        path = directory / "tang" / name
        if path.exists():
            keys[name] = read(path)
            check_jwk(path, keys[name])
        else:
            keys[name] = new_jwk(name)
            if create:
                path.parent.mkdir(mode=0o700, exist_ok=True)
                write_new(path, keys[name])
    passphrases = {}
    for host, volume in volumes:
        phrase = kept_token(directory, f"luks/{recovery_name(host, volume)}", read, write_new, create)
        if phrase is None:
            raise DiskKeysError(f"{directory / 'luks' / recovery_name(host, volume)} is not a passphrase kiln made (32 or more letters, digits, '-', '_'): "
                                "restore it from your backup; a volume whose recovery passphrase is lost opens "
                                "only through tang")
        passphrases[recovery_name(host, volume)] = phrase
    return DiskKeys(tang_keys=keys, thumbprint=thumbprint(keys[SIGNING]), passphrases=passphrases)
