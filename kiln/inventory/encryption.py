"""Network-bound disk encryption across the inventory (``kiln_encrypted_volumes``, roles/disk_encryption.py):
which hosts keep encrypted volumes, which serve tang (every controller: the management zone, up whenever
the cluster runs jobs), and the checks of the inventory as a whole."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kiln.inventory import model
from kiln.inventory.formats import url_host


def encrypting_hosts(hosts: dict) -> list:
    """The hosts with encrypted volumes."""
    return [h for h in hosts.values() if h.setting("encrypted_volumes")]


def tang_servers(hosts: dict) -> list:
    """The hosts that serve tang: every controller, where any host has encrypted volumes; else none."""
    if not encrypting_hosts(hosts):
        return []
    return [h for h in hosts.values() if h.in_group(model.CONTROLLER)]


def tang_urls(hosts: dict, port: int) -> list[str]:
    """Each tang server's URL, by the address kiln reaches it at (the inventory's)."""
    return [f"http://{url_host(h.address)}:{port}" for h in tang_servers(hosts)]


def check(raw, hosts: dict, values: dict[str, Any], add: Any) -> None:
    """No encrypted volume on a tang server (its key would sit beside the disk it unlocks); per host, each
    name, device and path once, and no path that is also a kiln_storage_mounts mount point."""
    for host in encrypting_hosts(hosts):
        volumes = host.setting("encrypted_volumes")
        file, line = raw.origin("kiln_encrypted_volumes", host=host.name)
        if host.in_group(model.CONTROLLER):
            add(file, "kiln_encrypted_volumes", f"{host.name} is a controller, and the controllers serve tang: its "
                "own disk would unlock from a key on the same host (a stolen host would unlock itself); keep "
                "encrypted volumes on compute and login nodes", line)
            continue
        for what in ("name", "device", "path"):
            for dup in sorted(v for v, n in Counter(getattr(v, what) for v in volumes).items() if n > 1):
                add(file, "kiln_encrypted_volumes", f"{host.name}: {what} {dup} is listed twice", line)
        mounted = {m.path for m in host.storage_mounts}
        for v in volumes:
            if v.path in mounted:
                add(file, "kiln_encrypted_volumes", f"{host.name}: {v.path} is also in kiln_storage_mounts: an "
                    "encrypted volume is mounted by kiln itself; remove one of the two", line)
