"""One testbed node's supervisor: runs systemd-nspawn and boots the node again when it reboots itself.

Started by ``kiln testbed up`` in a session of its own, one per node:

    python -m kiln.testbed.supervise NODE_JSON

systemd-nspawn exits with status 133 when the node reboots (``systemctl reboot``, Slurm's
RebootProgram); the supervisor then starts it again, as a real machine would come back. Each boot runs
in a new time namespace whose boot clock starts at zero, so the node's uptime (and Slurm's BootTime)
changes across a reboot. SIGTERM powers the node off cleanly and ends the supervisor.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REBOOT_STATUS = 133
CGROUP_CONTROLLERS = ("systemd", "unified", "freezer", "devices")


def join_cgroups(group: str) -> None:
    """Move this process (and so the node) into the node's own cgroup in each hierarchy."""
    for controller in CGROUP_CONTROLLERS:
        base = Path("/sys/fs/cgroup") / controller
        if not base.is_dir():
            continue
        path = base / group
        path.mkdir(parents=True, exist_ok=True)
        (path / "cgroup.procs").write_text(f"{os.getpid()}\n")


def nspawn_command(node: dict) -> list[str]:
    uptime = int(float(Path("/proc/uptime").read_text().split()[0]))
    cmd = ["unshare", "--time", f"--boottime=-{uptime}",
           "systemd-nspawn", "--boot", f"--directory={node['root']}", f"--machine={node['name']}",
           f"--hostname={node['name']}", f"--network-bridge={node['bridge']}", "--register=no",
           "--keep-unit", "--console=passive", "--bind=/dev/fuse", f"--bind={node['shared']}"]
    return cmd


def main(spec_path: str) -> int:
    node = json.loads(Path(spec_path).read_text())
    join_cgroups(node["cgroup"])
    stopping = False
    child: subprocess.Popen | None = None

    def on_term(signum, frame):  # noqa: ARG001
        nonlocal stopping
        stopping = True
        if child and child.poll() is None:
            child.send_signal(signal.SIGTERM)  # clean poweroff of the node

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    log = open(node["console"], "ab", buffering=0)
    boots = 0
    while not stopping:
        boots += 1
        log.write(f"\n=== kiln: boot {boots} at {time.strftime('%H:%M:%S')} ===\n".encode())
        child = subprocess.Popen(nspawn_command(node), stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        Path(node["pidfile"]).write_text(f"{child.pid}\n")
        status = child.wait()
        log.write(f"=== kiln: node exited with status {status} ===\n".encode())
        if stopping or status != REBOOT_STATUS:
            break
        time.sleep(2)  # as the probe found: a too-quick restart can find the veth still present
    Path(node["pidfile"]).unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
