"""The node-local runner: kiln's checks on the node itself, as Slurm's HealthCheckProgram, Prolog or
Epilog (or by hand).

    kiln-node-check [--mode health|prolog|epilog] [--expect /etc/kiln/node-checks.json] [--textfile DIR]
                    [--no-drain] [--json]

Runs the suites with no kiln installation and nothing but the node's python3 (>= 3.9). A failing check
drains the node with reason ``kiln: <ID> <message>``; when every check passes, a node whose drain
reason starts with ``kiln:`` is resumed. A node drained by a person (any other reason) is never
resumed and its reason never overwritten; neither is a node a rollout drained (``kiln: patch ...``):
``kiln patch`` resumes it after its own checks; nor one kiln-remediate escalated (``kiln: escalated ...``),
which waits for a person. Writes Prometheus textfile metrics (one gauge per check).
Exit 0 when nothing failed, 1 otherwise; as the Epilog always 0: the node is already drained with kiln's
reason, and a failing Epilog would make Slurm drain it again with its own ("Epilog error"), which kiln
would then leave alone as a person's. As the Prolog, 1 makes Slurm requeue the job (drained first, so
Slurm keeps kiln's reason).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shlex
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script from the installed tree
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from checks.node import Node, local_node  # noqa: E402
from checks.parsers.exposition import Exposition, write  # noqa: E402
from checks.drain_reasons import KILNS, classify  # noqa: E402
from checks.slurm import KILN_PREFIX, node_state, show_node  # noqa: E402
from checks.suites import run_suites  # noqa: E402
from checks import gpu  # noqa: E402
from checks.verdict import CheckError, Verdict  # noqa: E402
from checks.version import installed  # noqa: E402

EXPECT = "/etc/kiln/node-checks.json"
LOCK = "/run/kiln-node-check.lock"
# Slurm starts HealthCheckProgram every interval whether the last run has ended or not, and kills one
# after 60 s: on a slow node, runs that overlap slow each other down until none ends and none drains.
# One runs at a time: a health check that finds one running leaves it be; a Prolog or Epilog waits.
# How long a run waits for another to end (--wait): a person's or kiln's run, a Prolog or an Epilog waits;
# Slurm's HealthCheckProgram (kiln-node-check-health, --wait 0) starts one every interval even while the last
# one runs, and a second of those checks nothing
LOCK_WAIT = {"health": 60, "prolog": 50, "epilog": 50}
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
LOCAL_SUITES = ["gpu", "fabric", "storage", "slurm", "system"]
REASON_MAX = 200


def drain_or_resume(node: Node, name: str, verdicts: list[Verdict]) -> str:
    """What was done in Slurm: 'drained', 'resumed', 'left drained by a person', 'left to the rollout'
    or 'nothing'."""
    out = node.run(show_node(name))
    if out.rc != 0:
        action = f"nothing (scontrol: {(out.stderr or out.stdout).strip()[:80]})"
        if any(v.failed for v in verdicts):
            log(f"{name} failed {', '.join(sorted({v.id for v in verdicts if v.failed}))} but was not drained: {action}")
        return action
    fields = node_state(out.stdout)
    state, reason = fields.get("State", ""), fields.get("Reason", "")
    drained = "DRAIN" in state
    by_person = drained and classify(reason).by in ("person", "slurm", "tool")  # not kiln's to resume
    if drained and classify(reason).by == "rollout":
        return "left to the rollout"
    if drained and classify(reason).by == "escalated":
        return "left for a person (kiln-remediate escalated it)"
    failed = [v for v in verdicts if v.failed]
    if failed:
        if by_person:
            return "left drained by a person"
        first = failed[0]
        new_reason = f"{KILN_PREFIX} {first.id} {first.message}"[:REASON_MAX]
        if drained and reason == new_reason:
            return "nothing (already drained by kiln for this)"
        return _update(node, f"scontrol update nodename={shlex.quote(name)} state=drain reason={shlex.quote(new_reason)}",
                       "drained", f"{name}: {new_reason}")
    if drained and classify(reason).by in KILNS:
        return _update(node, f"scontrol update nodename={shlex.quote(name)} state=resume", "resumed",
                       f"{name} (was: {reason})")
    return "left drained by a person" if by_person else "nothing"


def _update(node: Node, command: str, done: str, what: str) -> str:
    """Run an ``scontrol update``; say in the node's log what was done, or why it could not be (slurmctld
    busy or away: the next run tries again)."""
    out = node.run(command)
    action = done if out.rc == 0 else f"not {done} (scontrol: {(out.stderr or out.stdout).strip()[:120]})"
    log(f"{action}: {what}")
    return action


def log(line: str) -> None:
    """One line in the node's log (journald or syslog, as kiln-node-check)."""
    try:
        import syslog
        syslog.openlog("kiln-node-check", 0, syslog.LOG_DAEMON)
        syslog.syslog(syslog.LOG_NOTICE, line)
    except OSError:
        pass


def one_at_a_time(path: str, wait: float) -> int | None:
    """The lock file ``path`` held (its descriptor: closing it lets the next run in), waiting up to ``wait``
    seconds for another run to end; None when it could not be had."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(0.5)


def textfile(verdicts: list[Verdict], directory: str, seconds: float) -> None:
    """``kiln_check_ok{check,suite}`` 1 pass / 0 fail (warn counts as pass, with severity as a label)."""
    out = Exposition()
    ok_text = "1 when the kiln node check passed (warnings included), 0 when it failed."
    out.add("kiln_check_ok", "gauge", ok_text)
    for v in verdicts:
        out.add("kiln_check_ok", "gauge", ok_text, 0 if v.failed else 1,
                {"check": v.id, "suite": v.suite, "severity": v.severity})
    out.add("kiln_check_last_run_timestamp_seconds", "gauge", "When kiln's node checks last ran.", int(time.time()))
    out.add("kiln_check_duration_seconds", "gauge", "How long kiln's node checks took.", round(seconds, 3))
    os.makedirs(directory, exist_ok=True)
    write(directory, "kiln.prom", out.text())


def gpu_devices(node: Node, directory: str) -> None:
    """kiln-gpu-devices.prom (checks/gpu.py ``device_exposition``): which /dev/nvidiaN is which GPU UUID,
    written once per boot (devices do not change while the node is up); left as it was when nvidia-smi
    does not answer whole (the GPU checks say why)."""
    path = os.path.join(directory, gpu.DEVICE_FILE)
    try:
        if os.stat(path).st_mtime > _boot_time():
            return
    except OSError:
        pass
    out = node.run(gpu.FULL_QUERY)
    if out.rc != 0:
        return
    try:
        text = gpu.device_exposition(out.stdout)
    except CheckError:
        return
    os.makedirs(directory, exist_ok=True)
    write(directory, gpu.DEVICE_FILE, text)


def _boot_time() -> float:
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("btime "):
                return float(line.split()[1])
    return 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kiln-node-check", description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("health", "prolog", "epilog"), default="health",
                    help="what runs it: Slurm's HealthCheckProgram (or a person), Prolog or Epilog")
    ap.add_argument("--expect", default=EXPECT)
    ap.add_argument("--textfile", default=None, help=f"directory for kiln.prom (default {TEXTFILE_DIR})")
    ap.add_argument("--no-drain", action="store_true", help="report only; do not drain or resume in Slurm")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--lock", default=LOCK, help=f"held while checking: one run at a time (default {LOCK})")
    ap.add_argument("--wait", type=float, default=None,
                    help=f"seconds to wait for a run already checking (default {LOCK_WAIT}; 0 for Slurm's)")
    ap.add_argument("--version", action="store_true", help="the version of kiln's host programs here, and exit")
    args = ap.parse_args(argv)
    if args.version:
        print(installed(Path(__file__).resolve().parent) or "kiln's host programs (no VERSION: not installed by kiln)")
        return 0
    start = time.monotonic()
    lock = one_at_a_time(args.lock, LOCK_WAIT[args.mode] if args.wait is None else args.wait)
    if lock is None:
        busy = f"another kiln-node-check is still running ({args.lock} held); this {args.mode} run checked nothing"
        print(json.dumps({"mode": args.mode, "checked": False, "reason": busy}) if args.json else busy)
        return 0
    try:
        with open(args.expect) as f:
            expect = json.load(f)
        name = (expect.get("slurm") or {}).get("node") or os.uname().nodename.split(".")[0]
        node = local_node(name, timeout=expect.get("command_timeout", 40))
        verdicts = run_suites(node, expect, expect.get("local_suites", LOCAL_SUITES), parallel=True)
        action = "not asked" if args.no_drain or not (expect.get("slurm") or {}).get("compute") else \
            drain_or_resume(node, name, verdicts)
        seconds = time.monotonic() - start
        directory = args.textfile or expect.get("textfile_dir") or TEXTFILE_DIR
        textfile(verdicts, directory, seconds)
        if (expect.get("gpu") or {}).get("count"):
            gpu_devices(node, directory)
        failed = [v for v in verdicts if v.failed]
        if args.json:
            print(json.dumps({"node": name, "mode": args.mode, "seconds": round(seconds, 3), "slurm": action,
                              "verdicts": [v.as_dict() for v in verdicts]}, indent=1))
        else:
            for v in verdicts:
                if v.severity != "ok":
                    print(f"{v.severity.upper():4} {v.id} {v.message}")
            print(f"{name}: {len(verdicts)} checks, {len(failed)} failed, {seconds:.2f} s; slurm: {action}")
        return 1 if failed and args.mode != "epilog" else 0
    finally:
        os.close(lock)  # the next run may start


if __name__ == "__main__":
    sys.exit(main())
