"""Node kind ``vm``: each node is a QEMU virtual machine with a real kernel, over a qcow2 overlay.

Behind the same ``NodeKind`` methods as the nspawn kind (kiln/testbed/nspawn.py); the testbed above
it (keys, bridge, proxy, inventory) is the same. Per node, in its state directory:

    disk.qcow2   the node's disk: an overlay on the base disk (kept across stop, power loss, crash)
    seed.img     its own files (name, address, host key, root's key) on an ext4 disk labelled
                 kilnseed, applied by the disk's kiln-seed unit when new (kiln/image/outputs.py)
    local.qcow2  its node-local data disk, blank when made (a real node's NVMe scratch; serial kilnlocal:
                 /dev/disk/by-id/virtio-kilnlocal in the VM), kept across stop, power loss and crash
    node.json    what its supervisor (kiln/testbed/vm_supervise.py) runs; qmp.sock, console.log

The VM's NIC is a tap device (``kt-NODE``) on the testbed's bridge; the host's ip_forward and
iptables are never touched. KVM is used where the host can run guests with it, else software
emulation (TCG).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from kiln.testbed import cpu_limit
from kiln.testbed.host import TestbedError, file_tail, kill_and_wait, link_exists, pid_alive, read_pid, run
from kiln.testbed.nspawn import Node, _kiln_path
from kiln.testbed.vm_supervise import WATCHED

SUPERVISOR_MARKER = "kiln.testbed.vm_supervise"
VM_CPUS = 2
VM_MEMORY_MB = 1536
SEED_MB = 16
LOCAL_DISK_MB = 256  # the node-local data disk (an encrypted volume in the VM tier's inventory)


def tap_name(node: Node) -> str:
    return f"kt-{node.name}"[:15]


def mac_address(testbed: str, node: str) -> str:
    """A stable, locally administered MAC for the node (52:54:00 is QEMU's prefix)."""
    digest = hashlib.sha256(f"{testbed}/{node}".encode()).hexdigest()
    return "52:54:00:" + ":".join(digest[i:i + 2] for i in (0, 2, 4))


class VmNodes:
    def __init__(self, testbed: str, disk: Path | None, bridge: str, shared_host: Path, ssh_config: Path):
        self.testbed = testbed
        self.disk = disk            # the base qcow2 every overlay starts from (None: only stop/inspect)
        self.bridge = bridge
        self.shared_host = shared_host
        self.ssh_config = ssh_config
        self.lower: dict[str, Path] = {}  # node name -> its own base disk (an image's qcow2)
        self._supervisors: dict[str, subprocess.Popen] = {}

    # --- pids ---
    def _supervisor_pid(self, node: Node) -> int | None:
        pid = read_pid(node.dir / "supervisor.pid")
        return pid if pid_alive(pid, SUPERVISOR_MARKER) else None

    def _qemu_pid(self, node: Node) -> int | None:
        pid = read_pid(node.dir / "qemu.pid")
        return pid if pid_alive(pid, "qemu-system") else None

    def cgroup(self, node: Node) -> str:
        """The VM's group in the host's cpu cgroup (only while it is made slow: kiln/testbed/cpu_limit.py)."""
        return f"kiln-{self.testbed}/{node.name}"

    def limit_cpu(self, node: Node, percent: int | None) -> None:
        """The VM's QEMU (and its supervisor, which starts the next one at a reboot) held to ``percent`` % of
        one CPU (None: no limit)."""
        if percent is None:
            cpu_limit.lift(self.cgroup(node))
        else:
            cpu_limit.limit(self.cgroup(node), lambda: [p for p in (self._supervisor_pid(node), self._qemu_pid(node)) if p],
                            percent)

    # --- lifecycle ---
    def lower_of(self, node: Node) -> str:
        """What the node's disk is a layer over (its overlay's backing disk)."""
        return str(self.lower.get(node.name, self.disk))

    def has_disk(self, node: Node) -> bool:
        return (node.dir / "disk.qcow2").is_file() and (node.dir / "seed.img").is_file()

    def prepare(self, node: Node, files: dict[str, tuple[str, int]]) -> None:
        """The node's overlay disk (if it has none) and, given files, a new seed disk."""
        base = self.lower.get(node.name, self.disk)
        node.dir.mkdir(parents=True, exist_ok=True)
        disk = node.dir / "disk.qcow2"
        if not disk.exists():
            if base is None:
                raise TestbedError("no base disk to build VMs on")
            tmp = disk.with_suffix(".tmp")
            run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(base), "-F", "qcow2", str(tmp)])
            tmp.rename(disk)
        local = node.dir / "local.qcow2"
        if not local.exists():
            tmp = local.with_suffix(".tmp")
            run(["qemu-img", "create", "-q", "-f", "qcow2", str(tmp), f"{LOCAL_DISK_MB}M"])
            tmp.rename(local)
        if files or not (node.dir / "seed.img").exists():
            self._write_seed(node, files)

    def _write_seed(self, node: Node, files: dict[str, tuple[str, int]]) -> None:
        tree = node.dir / "seed.tree"
        shutil.rmtree(tree, ignore_errors=True)
        for rel, (content, mode) in files.items():
            path = tree / "root" / rel.lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            with os.fdopen(fd, "w") as fh:
                fh.write(content)
            os.chmod(path, mode)
        (tree / "root").mkdir(parents=True, exist_ok=True)
        (tree / "root").chmod(0o755)
        (tree / "seed-id").write_text(f"{uuid.uuid4()}\n")
        seed = node.dir / "seed.img"
        seed.unlink(missing_ok=True)
        run(["truncate", "-s", f"{SEED_MB}M", str(seed)])
        run(["mkfs.ext4", "-q", "-L", "kilnseed", "-d", str(tree), str(seed)])
        shutil.rmtree(tree)

    def start(self, node: Node) -> None:
        if self._supervisor_pid(node):
            return
        tap = tap_name(node)
        if not link_exists(tap):
            run(["ip", "tuntap", "add", "dev", tap, "mode", "tap"])
        run(["ip", "link", "set", tap, "master", self.bridge])
        run(["ip", "link", "set", tap, "up"])
        spec = {"name": node.name, "uuid": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{self.testbed}.{node.name}.kiln")),
                "cpus": VM_CPUS, "memory_mb": VM_MEMORY_MB, "disk": str(node.dir / "disk.qcow2"),
                "seed": str(node.dir / "seed.img"), "local": str(node.dir / "local.qcow2"), "tap": tap, "mac": mac_address(self.testbed, node.name),
                "shared_host": str(self.shared_host), "console": str(node.dir / "console.log"),
                "qmp": str(node.dir / "qmp.sock"), "pidfile": str(node.dir / "qemu.pid")}
        (node.dir / "node.json").write_text(json.dumps(spec))
        self._supervise(node)

    def _supervise(self, node: Node, *args: str) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-m", "kiln.testbed.vm_supervise", str(node.dir / "node.json"), *args],
                                start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=open(node.dir / "supervisor.log", "ab"), cwd="/",
                                env=dict(os.environ, PYTHONPATH=_kiln_path()))
        (node.dir / "supervisor.pid").write_text(f"{proc.pid}\n")
        self._supervisors[node.name] = proc
        return proc

    def adopt(self, node: Node, timeout: float = 60) -> bool:
        """A VM whose QEMU runs on without its supervisor (``orphaned``) gets a new supervisor that takes
        over that QEMU, so the guest is not rebooted. False where there is nothing to adopt, or the new
        supervisor could not take it over (then the VM is as it was: ``release`` and ``start`` boot it)."""
        qemu = self._qemu_pid(node)
        if self._supervisor_pid(node) or not qemu or not (node.dir / "node.json").is_file():
            return False
        log = node.dir / "supervisor.log"
        offset = log.stat().st_size if log.exists() else 0
        proc = self._supervise(node, "--adopt", str(qemu))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            with open(log, "rb") as fh:
                fh.seek(offset)
                if f"QEMU {qemu}: {WATCHED}".encode() in fh.read():
                    return True
            time.sleep(0.2)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        self._supervisors.pop(node.name, None)
        (node.dir / "supervisor.pid").unlink(missing_ok=True)
        return False

    def _ssh(self, node: Node, command: list[str], timeout: float) -> subprocess.CompletedProcess:
        # a new connection each time, bounded: QEMU's NIC takes connections for a VM that is down
        return run(["timeout", str(int(timeout)), "ssh", "-F", str(self.ssh_config), "-o", "ControlMaster=no",
                    "-o", "ControlPath=none", "-o", "ConnectTimeout=5", node.name, *command],
                   check=False, timeout=timeout + 5)

    def wait_ready(self, node: Node, timeout: float) -> str:
        """Wait until systemd in the VM says running or degraded (asked over ssh); returns that state."""
        deadline = time.monotonic() + timeout
        state = "not started"
        while time.monotonic() < deadline:
            proc = self._supervisors.get(node.name)
            alive = proc.poll() is None if proc else self._supervisor_pid(node) is not None
            if not alive:
                status = f" (supervisor exit {proc.returncode})" if proc else ""
                raise TestbedError(f"VM {node.name} stopped while booting{status}; console log:\n"
                                   + self.console_tail(node) + "\nsupervisor log:\n"
                                   + self.console_tail(node, name="supervisor.log"))
            result = self._ssh(node, ["systemctl", "is-system-running"], timeout=20)
            state = result.stdout.strip() or state
            if state in ("running", "degraded"):
                return state
            time.sleep(2)
        raise TestbedError(f"VM {node.name} not ready after {timeout:.0f} s (systemd says {state!r}); "
                           "console log:\n" + self.console_tail(node))

    def console_tail(self, node: Node, lines: int = 25, name: str = "console.log") -> str:
        return file_tail(node.dir / name, lines)

    def running(self, node: Node) -> bool:
        return self._supervisor_pid(node) is not None and self._qemu_pid(node) is not None

    def exec(self, node: Node, command: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
        if not self.running(node):
            raise TestbedError(f"VM {node.name} is not running")
        return self._ssh(node, command, timeout)

    def stop(self, node: Node) -> None:
        """Power the VM off cleanly (ACPI); end QEMU if the guest does not go in time."""
        supervisor, qemu = self._supervisor_pid(node), self._qemu_pid(node)
        if supervisor:
            os.kill(supervisor, signal.SIGTERM)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (pid_alive(supervisor) or pid_alive(qemu)):
            time.sleep(0.3)
        for pid in (qemu, supervisor):
            if pid and pid_alive(pid):
                _kill(node, pid)
        self._supervisors.pop(node.name, None)

    def power_off(self, node: Node) -> None:
        """Power loss: QEMU and its supervisor killed at once; the guest gets no shutdown. Disk kept."""
        for pid in (self._qemu_pid(node), self._supervisor_pid(node)):
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for pid in (read_pid(node.dir / "qemu.pid"), read_pid(node.dir / "supervisor.pid")):
            if pid and pid_alive(pid):
                _kill(node, pid)
        self._supervisors.pop(node.name, None)
        self.release(node)

    def release(self, node: Node) -> None:
        """What a stopped VM still holds on the host (a QEMU left by a dead supervisor, its tap, pid
        files, the QMP socket) removed; its disk and seed stay."""
        if self._qemu_pid(node) and not self._supervisor_pid(node):
            _kill(node, self._qemu_pid(node))  # an orphan: as if its power failed
        elif self._supervisor_pid(node):
            self.stop(node)
        tap = tap_name(node)
        if link_exists(tap):
            run(["ip", "link", "delete", tap], check=False)
        for name in ("supervisor.pid", "qemu.pid", "qmp.sock", "boot.vmlinuz", "boot.initrd.img", "boot.raw"):
            (node.dir / name).unlink(missing_ok=True)
        cpu_limit.remove(self.cgroup(node))

    def state(self, node: Node) -> str:
        """running | stopped | orphaned (QEMU runs on without its supervisor: ``up`` adopts it)."""
        if self.running(node):
            return "running"
        return "orphaned" if self._qemu_pid(node) else "stopped"

    def cleanup(self, node: Node) -> None:
        self.stop(node)
        self.release(node)
        shutil.rmtree(node.dir, ignore_errors=True)

    def remove_testbed_cgroups(self) -> None:
        """Only a slow VM's cpu group (kiln testbed inject NODE cpu-slow)."""
        cpu_limit.remove(f"kiln-{self.testbed}")


def stray_processes(testbed_state: Path) -> list[int]:
    """QEMU or supervisor processes whose command line names this testbed's state (a crash's leftovers)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(testbed_state) + "/" in cmdline and ("qemu-system" in cmdline or SUPERVISOR_MARKER in cmdline):
            found.append(int(proc.name))
    return found


def _kill(node: Node, pid: int) -> None:
    """``pid`` (a VM's QEMU or supervisor) killed, and gone before this returns: a QEMU's lock on the
    node's disk lasts until the process has ended, which on a loaded host can take seconds (it frees the
    guest's memory first); the next boot's first step reads that disk."""
    if not kill_and_wait(pid, signal.SIGKILL, timeout=60):
        raise TestbedError(f"VM {node.name}: process {pid} did not end within 60 s of SIGKILL; "
                           f"see ps -o pid,stat,wchan -p {pid}")
