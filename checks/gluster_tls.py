"""GlusterFS over TLS as kiln set it (``kiln_storage_gluster_tls``; roles/gluster_tls.py), part of the storage
suite: on every host that speaks TLS to a volume kiln serves, /var/lib/glusterd/secure-access (TLS on
glusterd's management path and every client's volume-file fetch); on the volume's server, each volume's
``client.ssl`` and ``server.ssl`` on and ``auth.ssl-allow`` the inventory's hosts that mount it, as glusterd
keeps them (/var/lib/glusterd/vols/NAME/info, ``key=value`` lines). A volume turned back to clear text, or
opened to another host, fails STORAGE_GLUSTER_TLS.

Expectations (``expect["gluster_tls"]``, empty where the host speaks no GlusterFS TLS): ``secure_access`` (the
path), ``volumes``: {name: {option: value}}.
"""

from __future__ import annotations

import shlex

from checks.node import Node
from checks.verdict import CheckError, Verdict, fail, ok

VOLS = "/var/lib/glusterd/vols"
MARK = "@@kiln-gluster "


def command(tls: dict) -> str:
    """One command: whether secure-access is there, then each volume's info file (or that it has none)."""
    secure = shlex.quote(tls["secure_access"])
    parts = [f"if [ -e {secure} ]; then echo '{MARK}secure-access yes'; else echo '{MARK}secure-access no'; fi"]
    for name in tls.get("volumes", {}):
        info = shlex.quote(f"{VOLS}/{name}/info")
        parts.append(f"echo {shlex.quote(MARK + 'volume ' + name)}; cat {info} 2>/dev/null || echo '{MARK}no-info'")
    return "; ".join(parts)


def parse(text: str) -> tuple[bool, dict[str, dict[str, str] | None]]:
    """(secure-access present, volume -> its info file's options, None where it has no info file)."""
    secure: bool | None = None
    volumes: dict[str, dict[str, str] | None] = {}
    current: str | None = None
    for line in text.splitlines():
        if line.startswith(MARK):
            what = line[len(MARK):]
            if what.startswith("secure-access "):
                secure = what.endswith(" yes")
            elif what.startswith("volume "):
                current = what[len("volume "):]
                volumes[current] = {}
            elif what == "no-info" and current is not None:
                volumes[current] = None
        elif current is not None and volumes.get(current) is not None and "=" in line:
            key, _, value = line.partition("=")
            volumes[current][key.strip()] = value.strip()
    if secure is None:
        raise CheckError(f"no secure-access line in {text[:200]!r}")
    return secure, volumes


def commands(expect: dict) -> list[str]:
    tls = expect.get("gluster_tls") or {}
    return [command(tls)] if tls else []


def run(node: Node, expect: dict) -> list[Verdict]:
    tls = expect.get("gluster_tls") or {}
    if not tls:
        return []
    out = node.run(command(tls))
    try:
        secure, volumes = parse(out.stdout)
    except CheckError as e:
        return [fail("STORAGE_GLUSTER_TLS", f"reading GlusterFS's TLS state failed (exit {out.rc}): {e}")]
    verdicts = []
    if not secure:
        verdicts.append(fail("STORAGE_GLUSTER_TLS", f"{tls['secure_access']} is missing: glusterd's management path "
                             "and the volume-file fetch are clear text (kiln deploy writes it)"))
    for name, wanted in tls.get("volumes", {}).items():
        found = volumes.get(name)
        if found is None:
            verdicts.append(fail("STORAGE_GLUSTER_TLS", f"GlusterFS volume {name} has no {VOLS}/{name}/info here: "
                                 "glusterd does not know it (kiln deploy creates it)"))
            continue
        for key, value in wanted.items():
            if found.get(key) != value:
                what = (f"admits {found.get(key) or 'any host'!r}, the hosts that mount it are {value!r}"
                        if key == "auth.ssl-allow" else f"has {key} {found.get(key) or 'unset'}, kiln sets {value}: "
                        "file contents cross the network readable")
                verdicts.append(fail("STORAGE_GLUSTER_TLS", f"GlusterFS volume {name} {what} (kiln deploy sets it and "
                                     "starts the volume again)"))
    return verdicts or [ok("STORAGE_GLUSTER_TLS", f"TLS on glusterd's path and {len(tls.get('volumes', {}))} volumes")]
