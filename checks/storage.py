"""Storage suite: each inventory mount is mounted with its type, source and options, /etc/fstab agrees,
it is writable, and not too full. (That every node sees the same data is checked by the remote runner,
which can write on one node and read on the others.)

Expectations (``expect["storage"]``): a list of {path, type, source, options, warn_percent, fail_percent}.
"""

from __future__ import annotations

import shlex

from checks.node import Node
from checks.parsers.mounts import options_match, parse_df_percent, parse_findmnt_json, parse_fstab
from checks.verdict import CheckError, Verdict, fail, warn, with_passes

# fstype as the kernel reports it, for inventory types that differ
FSTYPES = {"nfs": ("nfs", "nfs4"), "cephfs": ("ceph", "fuse.ceph-fuse"), "glusterfs": ("fuse.glusterfs",),
           "sshfs": ("fuse.sshfs",), "weka": ("wekafs",), "beegfs": ("beegfs",), "gpfs": ("gpfs",),
           "lustre": ("lustre",), "tmpfs": ("tmpfs",)}


def writable_command(path: str, node_name: str) -> str:
    """Create and remove a probe file on the mount: only if ``path`` is a mount point (never under an
    empty mount point), so it needs no answer from findmnt first."""
    probe = shlex.quote(f"{path.rstrip('/')}/.kiln-write-check-{node_name}")
    return f"mountpoint -q {shlex.quote(path)} && touch {probe} && rm -f {probe}"


FINDMNT = "findmnt --json --list -o TARGET,SOURCE,FSTYPE,OPTIONS"
FSTAB = "cat /etc/fstab"


def df_command(mounts: list[dict]) -> str:
    return "df --output=target,pcent,ipcent " + " ".join(shlex.quote(m["path"]) for m in mounts)


def commands(expect: dict) -> list[str]:
    """What ``run`` asks the node (for the remote runner to fetch at once)."""
    mounts = expect.get("storage") or []
    if not mounts:
        return []
    name = expect.get("node", "")  # what run's node.name is, in both runners
    return [FINDMNT, FSTAB] + [writable_command(m["path"], name) for m in mounts] + [df_command(mounts)]


def run(node: Node, expect: dict) -> list[Verdict]:
    mounts = expect.get("storage") or []
    if not mounts:
        return []
    out = node.run(FINDMNT)
    try:
        live = parse_findmnt_json(out.stdout)
    except CheckError as e:
        return [fail("STORAGE_FINDMNT_UNREADABLE", f"findmnt exited {out.rc}: {e}")]
    try:
        fstab = parse_fstab(node.run(FSTAB).stdout)
    except CheckError as e:
        return [fail("STORAGE_FSTAB_UNREADABLE", str(e))]
    verdicts: list[Verdict] = []
    present = []
    for m in mounts:
        path = m["path"]
        mounted = live.get(path)
        if mounted is None:
            verdicts.append(fail("STORAGE_MOUNTED", f"{path} ({m['type']} from {m['source']}) is not mounted: "
                                 f"mount {path}; check the server and the client's log"))
            continue
        present.append(path)
        if m["type"] != "bind" and mounted.fstype not in FSTYPES.get(m["type"], (m["type"],)):
            verdicts.append(fail("STORAGE_TYPE", f"{path} is {mounted.fstype}, the inventory says {m['type']}"))
        if m["type"] not in ("bind", "tmpfs") and mounted.source.rstrip("/") != m["source"].rstrip("/"):
            verdicts.append(fail("STORAGE_SOURCE", f"{path} is mounted from {mounted.source}, the inventory says "
                                 f"{m['source']}"))
        missing = options_match(m.get("options", "defaults"), mounted.options)
        if missing:
            verdicts.append(fail("STORAGE_OPTIONS", f"{path} lacks mount options {','.join(missing)}: remount"))
        entry = fstab.get(path)
        if m["type"] == "bind" and m["source"] == path:
            pass  # the machine provides it (a container's bind mount): no fstab line to expect
        elif entry is None or (m["type"] != "bind" and entry.source.rstrip("/") != m["source"].rstrip("/")):
            verdicts.append(warn("STORAGE_FSTAB", f"{path}: /etc/fstab " + ("has no entry" if entry is None else
                                 f"says {entry.source}") + ": it will not come back the same after a reboot"))
        if node.run(writable_command(path, node.name)).rc != 0:
            verdicts.append(fail("STORAGE_WRITABLE", f"{path} is not writable by root (read-only, full or "
                                 "root-squashed): check the mount and the server"))
    if present:
        # every inventory path, mounted or not, so the command does not wait on findmnt's answer (kiln
        # check then fetches all of a node's outputs in one round trip); only mounted ones are judged
        df = node.run(df_command(mounts))
        try:
            usage = parse_df_percent(df.stdout)
        except CheckError as e:
            return verdicts + [fail("STORAGE_FULL_UNREADABLE", str(e))]
        for m in mounts:
            if m["path"] not in usage:
                continue
            space, inodes = usage[m["path"]]
            worst = max(space, inodes or 0)
            if worst >= m.get("fail_percent", 95):
                verdicts.append(fail("STORAGE_FULL", f"{m['path']} is {worst}% full (fail at {m.get('fail_percent', 95)}%)"))
            elif worst >= m.get("warn_percent", 80):
                verdicts.append(warn("STORAGE_FULL", f"{m['path']} is {worst}% full (warn at {m.get('warn_percent', 80)}%)"))
    return with_passes(verdicts, ["STORAGE_MOUNTED", "STORAGE_TYPE", "STORAGE_SOURCE", "STORAGE_OPTIONS",
                                  "STORAGE_FSTAB", "STORAGE_WRITABLE", "STORAGE_FULL"], f"{len(mounts)} mounts")
