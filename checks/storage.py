"""Storage suite: each inventory mount is mounted with its type, source and options, /etc/fstab agrees,
it answers, it is writable, and not too full. (That every node sees the same data is checked by the remote
runner, which can write on one node and read on the others.)

Nothing here can hang on a dead server: findmnt and /etc/fstab are read from the kernel's and the node's
own files; everything that touches a mount runs in the probe, where every mount is probed at once, each
under ``bounded`` (killed after ``storage_timeout`` seconds, abandoned if it cannot die), so a hung hard
NFS or Lustre mount is a STORAGE_RESPONDING fail in about that time, never a stuck check.

Opt-in, per mount with a ``min_throughput_mbps``: STORAGE_THROUGHPUT writes a test file of
``expect["storage_throughput_mib"]`` MiB (flushed to the server), reads it back (O_DIRECT, or after dropping
the page cache) and compares both rates with the floor; a figure per node either way. Slurm's health
check never runs it (the health role sets the size to 0): it loads the filesystem every node shares.

An encrypted volume (``kiln_encrypted_volumes``, roles/disk_encryption.py) is a mount of its /dev/mapper device
like any other, and first STORAGE_LOCKED: opened (unlocked through tang) or not; a locked one's mount is not
judged (it cannot be mounted).

GlusterFS's TLS, where kiln set it, is checks/gluster_tls.py's (STORAGE_GLUSTER_TLS), run first.

Expectations (``expect["storage"]``): a list of {path, type, source, options, warn_percent, fail_percent,
min_throughput_mbps}; ``expect["storage_timeout"]``: seconds a mount has to answer (default 10);
``expect["storage_throughput_mib"]``: the test file's size (0: no throughput check);
``expect["encrypted_volumes"]``: a list of {name, device, path, tang} (tang: the servers' URLs).
"""

from __future__ import annotations

import shlex

from checks import gluster_tls
from checks.node import NO_ANSWER, Node, Result, bounded
from checks.parsers.mounts import (PROBE_MARK, options_match, parse_dd_rate, parse_df_percent, parse_findmnt_json,
                                   parse_fstab, parse_probe)
from checks.verdict import CheckError, Verdict, fail, ok, warn, with_passes

# fstype as the kernel reports it, for inventory types that differ
FSTYPES = {"nfs": ("nfs", "nfs4"), "cephfs": ("ceph", "fuse.ceph-fuse"), "glusterfs": ("fuse.glusterfs",),
           "sshfs": ("fuse.sshfs",), "weka": ("wekafs",), "beegfs": ("beegfs",), "gpfs": ("gpfs",),
           "lustre": ("lustre",), "tmpfs": ("tmpfs",)}


# Types whose mount source the kernel shows as something else than the inventory's (a bind's directory,
# "tmpfs", BeeGFS's "beegfs_nodev", ceph-fuse's "ceph-fuse", GPFS's device name)
OWN_SOURCE = ("bind", "tmpfs", "beegfs", "cephfs", "gpfs")
# Mounted by their own service or tools: no /etc/fstab line to expect
NOT_IN_FSTAB = ("beegfs", "gpfs")

FINDMNT = "findmnt --json --list -o TARGET,SOURCE,FSTYPE,OPTIONS"
MAPPER = "ls -1 /dev/mapper"  # the opened device-mapper volumes: an unlocked encrypted volume is one
FSTAB = "cat /etc/fstab"
TIMEOUT = 10
CLEANUP_SECONDS = 5  # removing a cut-off throughput test's file
# the probe's exit codes per mount (and bounded's NO_ANSWER)
NOT_MOUNTED, NOT_WRITABLE, DF_FAILED = 3, 4, 5
WRITE_MARK = "@@kiln-write-error "  # the probe's line with touch's error on a mount root cannot write to


def probe_command(mounts: list[dict], node_name: str, seconds: int = TIMEOUT) -> str:
    """One command probing every mount at once: is it a mount point, can root create and remove a file
    on it (never under an empty mount point), how full is it (space and inodes). Each mount's probe is
    ``bounded``; the report (``parse_probe``) has one part per mount, in the inventory's order."""
    jobs, report = [], []
    for i, m in enumerate(mounts):
        path = shlex.quote(m["path"])
        # one file per probing shell ($$): the node's own health check and an operator's kiln check may
        # probe at once, and a create racing another's unlink of the same name fails on FUSE filesystems
        probe = shlex.quote(f"{m['path'].rstrip('/')}/.kiln-write-check-{node_name}-") + "$$"
        body = (f"mountpoint -q {path} || exit {NOT_MOUNTED}; w=0; e=$(touch {probe} 2>&1) && rm -f {probe} "
                f"|| w={NOT_WRITABLE}; df --output=target,pcent,ipcent {path} || exit {DF_FAILED}; "
                f"[ $w = 0 ] || printf '{WRITE_MARK}%s\\n' \"$(printf %s \"$e\" | head -n 1 | cut -c 1-200)\"; exit $w")
        jobs.append(f'{{ {bounded(body, seconds)} >"$t/{i}" 2>&1; echo $? >"$t/{i}.rc"; }} </dev/null >/dev/null 2>&1 &')
        report.append(f'echo "{PROBE_MARK}{i} $(cat "$t/{i}.rc" 2>/dev/null || echo {NO_ANSWER})"; cat "$t/{i}" 2>/dev/null')
    return "t=$(mktemp -d) || exit 255\n" + "\n".join(jobs) + "\nwait\n" + "\n".join(report) + '\nrm -rf "$t"'


def throughput_command(path: str, node_name: str, mib: int, seconds: int) -> str:
    """Write ``mib`` MiB to a test file on the mount and flush it, read it back past the page cache, remove
    it; prints ``write: <dd's summary>`` and ``read: <dd's summary>``. Bounded by ``seconds``; a test cut
    off there still has its file removed (a second, short bound: a mount too slow for that keeps it, and
    the next run's write replaces it)."""
    test_file = shlex.quote(f"{path.rstrip('/')}/.kiln-throughput-{node_name}")
    body = (f"export LC_ALL=C; mountpoint -q {shlex.quote(path)} || exit {NOT_MOUNTED}\n"
            f"w=$(dd if=/dev/zero of={test_file} bs=1M count={mib} conv=fdatasync 2>&1) || "
            f"{{ rm -f {test_file}; echo \"$w\" | tail -n 2; exit {NOT_WRITABLE}; }}\n"
            f"r=$(dd if={test_file} of=/dev/null bs=1M iflag=direct 2>&1) || "
            f"r=$( (sync; echo 1 > /proc/sys/vm/drop_caches) 2>/dev/null; dd if={test_file} of=/dev/null bs=1M 2>&1)\n"
            f"rm -f {test_file}\n"
            "echo \"write: $(echo \"$w\" | tail -n 1)\"; echo \"read: $(echo \"$r\" | tail -n 1)\"")
    remove = bounded(f"rm -f {test_file}", CLEANUP_SECONDS)
    return f"{bounded(body, seconds)}; rc=$?; [ $rc = 0 ] || {remove} </dev/null >/dev/null 2>&1; exit $rc"


def _throughput_plan(expect: dict) -> list[tuple[dict, int, str]]:
    """(mount, bound in seconds, command) for each mount whose throughput is checked this run."""
    mib = expect.get("storage_throughput_mib", 0)
    if not mib:
        return []
    plan = [(m, throughput_seconds(expect, m)) for m in expect.get("storage") or [] if m.get("min_throughput_mbps")]
    return [(m, seconds, throughput_command(m["path"], expect.get("node", ""), mib, seconds)) for m, seconds in plan]


def throughput_seconds(expect: dict, mount: dict) -> int:
    """The throughput test's bound on one mount: the mount's timeout plus the time to write and read the
    test file at its floor (at least at 10 MB/s), so a mount that meets its floor is never cut off and one
    that is cut off is below it."""
    mib, timeout = expect.get("storage_throughput_mib", 0), expect.get("storage_timeout", TIMEOUT)
    rate = min(mount["min_throughput_mbps"], 10) * 1_000_000
    return timeout + -(-2 * mib * 1048576 // rate)


def commands(expect: dict) -> list[str]:
    """What ``run`` asks the node (for the remote runner to fetch at once)."""
    return gluster_tls.commands(expect) + _mount_commands(expect)


def _mount_commands(expect: dict) -> list[str]:
    mounts = expect.get("storage") or []
    if not mounts:
        return []
    name = expect.get("node", "")  # what run's node.name is, in both runners
    return [FINDMNT, FSTAB, *([MAPPER] if expect.get("encrypted_volumes") else []),
            probe_command(mounts, name, expect.get("storage_timeout", TIMEOUT))] + \
        [command for _, _, command in _throughput_plan(expect)]


def run(node: Node, expect: dict) -> list[Verdict]:
    return gluster_tls.run(node, expect) + _mounts(node, expect)


def _mounts(node: Node, expect: dict) -> list[Verdict]:
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
    seconds = expect.get("storage_timeout", TIMEOUT)
    probe = node.run(probe_command(mounts, node.name, seconds))
    try:
        probed = parse_probe(probe.stdout)
    except CheckError as e:
        return [fail("STORAGE_PROBE_UNREADABLE", f"the mount probe exited {probe.rc}: {e}")]
    verdicts, locked = locked_volumes(node, expect.get("encrypted_volumes") or [])
    for i, m in enumerate(mounts):
        path = m["path"]
        if path in locked:
            continue  # its volume is locked: that is the fault, and its mount cannot be made
        mounted = live.get(path)
        if mounted is None:
            verdicts.append(fail("STORAGE_MOUNTED", f"{path} ({m['type']} from {m['source']}) is not mounted: "
                                 f"mount {path}; check the server and the client's log"))
            continue
        if m["type"] != "bind" and mounted.fstype not in FSTYPES.get(m["type"], (m["type"],)):
            verdicts.append(fail("STORAGE_TYPE", f"{path} is {mounted.fstype}, the inventory says {m['type']}"))
        if m["type"] not in OWN_SOURCE and mounted.source.rstrip("/") != m["source"].rstrip("/"):
            verdicts.append(fail("STORAGE_SOURCE", f"{path} is mounted from {mounted.source}, the inventory says "
                                 f"{m['source']}"))
        missing = options_match(m.get("options", "defaults"), mounted.options)
        if missing:
            verdicts.append(fail("STORAGE_OPTIONS", f"{path} lacks mount options {','.join(missing)}: remount"))
        entry = fstab.get(path)
        if (m["type"] == "bind" and m["source"] == path) or m["type"] in NOT_IN_FSTAB:
            pass  # the machine provides it (a container's bind mount), or its own service mounts it
        elif entry is None or (m["type"] not in OWN_SOURCE and entry.source.rstrip("/") != m["source"].rstrip("/")):
            verdicts.append(warn("STORAGE_FSTAB", f"{path}: /etc/fstab " + ("has no entry" if entry is None else
                                 f"says {entry.source}") + ": it will not come back the same after a reboot"))
        verdicts += _probed(m, probed.get(i), probe, seconds)
    answered = {m["path"] for i, m in enumerate(mounts) if (probed.get(i) or (None,))[0] in (0, NOT_WRITABLE)}
    for m, seconds, command in _throughput_plan(expect):
        if m["path"] in answered:
            verdicts.append(_throughput(m, node.run(command), seconds))
    return with_passes(verdicts, ["STORAGE_MOUNTED", "STORAGE_TYPE", "STORAGE_SOURCE", "STORAGE_OPTIONS",
                                  "STORAGE_FSTAB", "STORAGE_RESPONDING", "STORAGE_WRITABLE", "STORAGE_FULL"],
                       f"{len(mounts)} mounts")


def locked_volumes(node: Node, volumes: list[dict]) -> tuple[list[Verdict], set[str]]:
    """STORAGE_LOCKED for each encrypted volume not opened (its /dev/mapper name absent), and the mount points
    of those; nothing when the node has no encrypted volume."""
    if not volumes:
        return [], set()
    out = node.run(MAPPER)
    if out.rc != 0:
        return [fail("STORAGE_LOCKED", f"{MAPPER} exited {out.rc}: {out.stderr.strip()[:160]}")], set()
    opened = set(out.stdout.split())
    locked = [v for v in volumes if v["name"] not in opened]
    # a drain reason keeps 200 characters: the volume, its device and the tang servers first
    verdicts = [fail("STORAGE_LOCKED", f"{v['path']}: {v['name']} ({v['device']}) locked: no tang answered "
                     f"({' '.join(v.get('tang', [])) or 'none named'}); it unlocks and mounts by itself once one does")
                for v in locked]
    return verdicts or [ok("STORAGE_LOCKED", f"{len(volumes)} encrypted volumes open")], {v["path"] for v in locked}


def _throughput(m: dict, out: Result, seconds: int) -> Verdict:
    path, floor = m["path"], m["min_throughput_mbps"]
    if out.rc == NO_ANSWER:
        return fail("STORAGE_THROUGHPUT", f"{path}: the test file was not written and read back within {seconds} s, "
                    f"below the floor of {floor} MB/s; check the network path to the server and the server's load")
    if out.rc != 0:
        return fail("STORAGE_THROUGHPUT", f"{path}: the throughput test failed (exit {out.rc}): "
                    f"{(out.stdout + out.stderr).strip()[:160]}")
    lines = {k: v for k, _, v in (line.partition(": ") for line in out.stdout.splitlines())}
    try:
        write, read = parse_dd_rate(lines.get("write", "")), parse_dd_rate(lines.get("read", ""))
    except CheckError as e:
        return fail("STORAGE_THROUGHPUT", f"{path}: {e}")
    figures = f"{path}: write {write:.0f} MB/s, read {read:.0f} MB/s"
    if min(write, read) < floor:
        return fail("STORAGE_THROUGHPUT", f"{figures}, below the floor of {floor} MB/s: the filesystem cannot feed "
                    "this node's jobs; check the network path to the server and the server's load")
    return ok("STORAGE_THROUGHPUT", f"{figures} (floor {floor} MB/s)")


def _probed(m: dict, part: tuple[int, str] | None, probe: Result, seconds: int) -> list[Verdict]:
    """Verdicts from one mount's part of the probe's report."""
    path = m["path"]
    if part is None:
        detail = (probe.stderr or probe.stdout).strip()[:160]
        return [fail("STORAGE_PROBE_UNREADABLE", f"{path}: the mount probe reported nothing for it (exit "
                     f"{probe.rc}{': ' + detail if detail else ''})")]
    rc, text = part
    if rc == NO_ANSWER:
        return [fail("STORAGE_RESPONDING", f"{path} ({m['type']} from {m['source']}) did not answer within "
                     f"{seconds} s: its server or the network to it is down, and processes touching it hang; "
                     "check the server, then the node's network")]
    if rc == NOT_MOUNTED:
        return [fail("STORAGE_MOUNTED", f"{path} is not a mount point any more: mount {path}")]
    if rc not in (0, NOT_WRITABLE):
        return [fail("STORAGE_RESPONDING", f"{path}: df failed (exit {rc}): {text.strip()[:160]}: a stale or "
                     "broken mount; unmount and mount it again")]
    verdicts = []
    errors = [line[len(WRITE_MARK):].strip() for line in text.splitlines() if line.startswith(WRITE_MARK)]
    text = "\n".join(line for line in text.splitlines() if not line.startswith(WRITE_MARK))
    if rc == NOT_WRITABLE:
        said = f" ({errors[0]})" if errors and errors[0] else ""
        verdicts.append(fail("STORAGE_WRITABLE", f"{path} is not writable by root{said} (read-only, full or "
                             "root-squashed): check the mount and the server"))
    try:
        usage = parse_df_percent(text)
    except CheckError as e:
        return verdicts + [fail("STORAGE_PROBE_UNREADABLE", f"{path}: {e}")]
    if path not in usage:
        return verdicts + [fail("STORAGE_PROBE_UNREADABLE", f"{path}: df did not report it")]
    space, inodes = usage[path]
    worst = max(space, inodes or 0)
    if worst >= m.get("fail_percent", 95):
        verdicts.append(fail("STORAGE_FULL", f"{path} is {worst}% full (fail at {m.get('fail_percent', 95)}%)"))
    elif worst >= m.get("warn_percent", 80):
        verdicts.append(warn("STORAGE_FULL", f"{path} is {worst}% full (warn at {m.get('warn_percent', 80)}%)"))
    return verdicts
