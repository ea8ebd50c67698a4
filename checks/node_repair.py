"""kiln-node-repair: the only thing kiln-remediate's SSH key may run on a compute node.

The key's line in root's authorized_keys forces this program (``restrict,command=...,from=<controller>``);
what the controller asked for arrives in ``SSH_ORIGINAL_COMMAND`` and must be one of:

    restart UNIT     restart one of the units in UNITS and wait until it is active (30 s)
    reset            reset the node's GPUs as NVIDIA documents it: refused while a job's process uses
                     them; each GPU client that runs (GPU_CLIENTS, then the units named one a line in
                     EXTRA_CLIENTS) stopped, refused if any process still holds a GPU, ``nvidia-smi -r``,
                     the clients started again; a reset that took is recorded (RESET_FILE: the Xid
                     check counts no GPU driver line from before it)
    check            kiln's node checks, report only (kiln-node-check --no-drain --json)

Anything else is refused (exit 2) and nothing runs. Standard library only (the node's python3).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

if __package__ in (None, ""):  # run as a file: the checks package is beside it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from checks.parsers.kernel_log import RESET_FILE  # noqa: E402

UNITS = ("slurmd", "munge", "nvidia-persistenced", "nvidia-fabricmanager", "nvidia-dcgm")
# What holds the GPUs open on a node kiln deploys, stopped in this order before a reset and started in
# the reverse order after it: nvidia-smi -r fails while any process uses a GPU (NVIDIA: "there can't be
# any applications using these devices", monitoring ones included)
GPU_CLIENTS = ("nvidia-dcgm-exporter", "nvidia-dcgm", "nvidia-persistenced", "nvidia-fabricmanager")
EXTRA_CLIENTS = "/etc/kiln/gpu-clients"  # a site's own GPU clients (the testbed lists its stand-ins)
UNIT_NAME = re.compile(r"[A-Za-z0-9@_.-]{1,64}")
GPU_DEVICE = re.compile(r"/dev/nvidia(\d+|ctl|-uvm|-uvm-tools|-modeset|-caps/.*)")
CHECK = ["/usr/local/sbin/kiln-node-check", "--mode", "prolog", "--no-drain", "--json"]


def parse(command: str) -> list[str] | None:
    """The request's words when it is one kiln allows, else None."""
    words = command.split()
    if words == ["reset"] or words == ["check"]:
        return words
    if len(words) == 2 and words[0] == "restart" and words[1] in UNITS:
        return words
    return None


def _run(args: list[str], timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "LC_ALL": "C", "LANG": "C"})


def restart(unit: str) -> int:
    out = _run(["systemctl", "restart", f"{unit}.service"])
    for _ in range(30):
        if _run(["systemctl", "is-active", "--quiet", f"{unit}.service"]).returncode == 0:
            print(f"{unit} restarted and active")
            return 0
        time.sleep(1)
    print(f"{unit} not active after its restart: {(out.stderr or out.stdout).strip()[:300]}")
    return 1


def mark_reset(path: str, when: float) -> None:
    """When the GPUs were reset: the kernel log check leaves out the GPU driver's lines from before it
    (checks/parsers/kernel_log.after_gpu_reset), so a repaired Xid stops failing the node."""
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as out:
        out.write(f"{when:.3f}\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def gpu_clients(extra: str | None = None) -> list[str]:
    """The GPU client units kiln knows of and those a site names, in stop order."""
    try:
        with open(extra or EXTRA_CLIENTS) as f:
            named = [line.strip() for line in f if UNIT_NAME.fullmatch(line.strip())]
    except OSError:
        named = []
    return list(dict.fromkeys([*GPU_CLIENTS, *named]))


def gpu_holders(proc: str = "/proc") -> list[str]:
    """'pid name' of each process that holds a GPU device open."""
    found = []
    for pid in (p for p in os.listdir(proc) if p.isdigit()):
        try:
            fds = os.listdir(os.path.join(proc, pid, "fd"))
            if any(GPU_DEVICE.fullmatch(os.readlink(os.path.join(proc, pid, "fd", fd))) for fd in fds):
                with open(os.path.join(proc, pid, "comm")) as f:
                    found.append(f"{pid} {f.read().strip()}")
        except OSError:
            continue  # gone, or not ours to read
    return found


def reset() -> int:
    busy = _run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"])
    if busy.returncode == 0 and busy.stdout.strip():
        print(f"GPUs in use by {len(busy.stdout.split())} process(es): not reset")
        return 1
    running = [u for u in gpu_clients() if _run(["systemctl", "is-active", "--quiet", f"{u}.service"]).returncode == 0]
    for unit in running:
        _run(["systemctl", "stop", f"{unit}.service"])
    try:
        held = gpu_holders()
        if held:
            print(f"GPUs still held by {', '.join(held[:5])} with kiln's clients stopped: not reset")
            return 1
        out = _run(["nvidia-smi", "-r"], timeout=300)
        print((out.stdout + out.stderr).strip()[:500])
        if out.returncode != 0:
            return 1
        mark_reset(RESET_FILE, time.time())
        return 0
    finally:
        for unit in reversed(running):  # back as they were, whatever the reset did
            if _run(["systemctl", "start", f"{unit}.service"]).returncode != 0:
                print(f"{unit} did not start again after the reset")


def main() -> int:
    words = parse(os.environ.get("SSH_ORIGINAL_COMMAND", ""))
    if words is None:
        print("kiln-node-repair: refused: only 'restart UNIT', 'reset' and 'check' are allowed", file=sys.stderr)
        return 2
    try:
        if words[0] == "restart":
            return restart(words[1])
        if words[0] == "reset":
            return reset()
        out = _run(CHECK, timeout=300)
        sys.stdout.write(out.stdout)
        return out.returncode
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"kiln-node-repair: {words[0]} failed: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
