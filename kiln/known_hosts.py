"""The host keys of some hosts, picked from a known_hosts file (OpenSSH's format, hashed or not).

kiln hands a node the keys it must trust (kiln-remediate on the controller checks each compute node's
key): only the lines of those hosts, from the inventory's own known_hosts, rewritten as
``HOST KEYTYPE KEY`` with the address the node connects to. Wildcard patterns, negations, revoked and
certificate-authority lines are never copied: a key is trusted for a host only when the file names
that host.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from kiln.inventory.formats import canonical_address


def _target(address: str, port: int) -> str:
    """known_hosts' host field for one address (canonical: never a pattern, a list or a zone)."""
    address = canonical_address(address)
    return address if port == 22 else f"[{address}]:{port}"


def _matches(pattern: str, names: set[str]) -> str | None:
    """The name of ``names`` a known_hosts host pattern stands for, or None."""
    if pattern.startswith("|1|"):
        try:
            _, _, salt, digest = pattern.split("|")
            salt_b, digest_b = base64.b64decode(salt), base64.b64decode(digest)
        except ValueError:
            return None
        for name in names:
            if hmac.compare_digest(hmac.new(salt_b, name.encode(), hashlib.sha1).digest(), digest_b):
                return name
        return None
    if any(c in pattern for c in "*?!"):
        return None
    return pattern if pattern in names else None


def keys_for(text: str, hosts: dict[str, list[tuple[str, int]]]) -> dict[str, list[str]]:
    """host name -> its ``KEYTYPE KEY`` entries, for each of ``hosts`` (name -> the (host, port) pairs it
    is known by: its name, its address, the name ssh connects to) that ``text`` knows."""
    wanted: dict[str, str] = {}
    for name, aliases in hosts.items():
        for host, port in aliases:
            wanted[_target(host, port)] = name
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 3 or fields[0].startswith(("#", "@")):
            continue
        for pattern in fields[0].split(","):
            found = _matches(pattern, set(wanted))
            if found is not None:
                entry = f"{fields[1]} {fields[2]}"
                keys = out.setdefault(wanted[found], [])
                if entry not in keys:
                    keys.append(entry)
    return out


def known_hosts_lines(text: str, hosts: dict[str, list[tuple[str, int]]], reach: dict[str, tuple[str, int]]) -> str:
    """A known_hosts file with only ``hosts``' keys, each under the address and port it is reached at
    (``reach``)."""
    keys = keys_for(text, hosts)
    lines = [f"{_target(*reach[name])} {entry}" for name in sorted(keys) for entry in keys[name]]
    return "\n".join(lines) + ("\n" if lines else "")
