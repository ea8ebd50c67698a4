"""Node kind ``nspawn``: each node is ``systemd-nspawn --boot`` over a copy-on-write overlay of the base.

A second kind (QEMU virtual machines with a real kernel) fits behind the same ``NodeKind`` methods;
the testbed above it (keys, bridge, proxy, inventory) does not change.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kiln.testbed import cpu_limit
from kiln.testbed.host import (TestbedError, children, file_tail, kill_and_wait, link_exists, mounted, pid_alive,
                               read_pid, rmdir_tree, run)
from kiln.testbed.supervise import CGROUP_CONTROLLERS

SUPERVISOR_MARKER = "kiln.testbed.supervise"


@dataclass(frozen=True)
class Node:
    name: str
    address: str          # address on the testbed bridge
    prefix: int
    role: str             # controller | compute
    dir: Path             # the node's own state directory

    @property
    def root(self) -> Path:
        return self.dir / "root"


class NodeKind(Protocol):
    """What the testbed needs from a kind of node."""

    def prepare(self, node: Node, files: dict[str, tuple[str, int]]) -> None: ...
    def start(self, node: Node) -> None: ...
    def wait_ready(self, node: Node, timeout: float) -> str: ...
    def running(self, node: Node) -> bool: ...
    def adopt(self, node: Node) -> bool: ...
    def stop(self, node: Node) -> None: ...
    def power_off(self, node: Node) -> None: ...
    def limit_cpu(self, node: Node, percent: int | None) -> None: ...
    def release(self, node: Node) -> None: ...
    def state(self, node: Node) -> str: ...
    def cleanup(self, node: Node) -> None: ...
    def exec(self, node: Node, command: list[str], timeout: float = 60) -> subprocess.CompletedProcess: ...


class NspawnNodes:
    def __init__(self, testbed: str, base: Path | None, bridge: str, shared: str):
        """``shared`` is ``HOST_DIR:NODE_DIR``, bind-mounted into every node."""
        self.testbed = testbed
        self.base = base
        self.bridge = bridge
        self.shared = shared
        self.lower: dict[str, Path] = {}  # node name -> its own lower tree (an image) instead of ``base``
        self._supervisors: dict[str, subprocess.Popen] = {}  # started by this process: exit status known

    # --- paths and pids ---
    def cgroup(self, node: Node) -> str:
        return f"kiln-{self.testbed}/{node.name}"

    def _supervisor_pid(self, node: Node) -> int | None:
        pid = read_pid(node.dir / "supervisor.pid")
        return pid if pid_alive(pid, SUPERVISOR_MARKER) else None

    def _nspawn_pid(self, node: Node) -> int | None:
        pid = read_pid(node.dir / "nspawn.pid")
        return pid if pid_alive(pid, "systemd-nspawn") else None

    def init_pid(self, node: Node) -> int | None:
        """The node's PID 1 (systemd), as the host sees it."""
        pid = self._nspawn_pid(node)
        if not pid:
            return None
        for child in children(pid):
            try:
                if Path(f"/proc/{child}/comm").read_text().strip() == "systemd":
                    return child
            except OSError:
                continue
        return None

    # --- lifecycle ---
    def lower_of(self, node: Node) -> str:
        """What the node's disk is a layer over (its overlay's lower tree)."""
        return str(self.lower.get(node.name, self.base))

    def has_disk(self, node: Node) -> bool:
        return (node.dir / "upper").is_dir()

    def prepare(self, node: Node, files: dict[str, tuple[str, int]]) -> None:
        """Mount the node's overlay and write its own files (hostname, network, keys)."""
        lower = self.lower.get(node.name, self.base)
        if lower is None:
            raise TestbedError("no base image to build nodes on")
        for sub in ("upper", "work", "root"):
            (node.dir / sub).mkdir(parents=True, exist_ok=True)
        if not mounted(node.root):
            run(["mount", "-t", "overlay", "overlay", "-o",
                 f"lowerdir={lower},upperdir={node.dir / 'upper'},workdir={node.dir / 'work'}",
                 str(node.root)])
        for rel, (content, mode) in files.items():
            path = node.root / rel.lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.unlink(missing_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            with os.fdopen(fd, "w") as fh:
                fh.write(content)
            os.chmod(path, mode)

    def start(self, node: Node) -> None:
        if self._supervisor_pid(node):
            return
        spec = {"name": node.name, "root": str(node.root), "bridge": self.bridge,
                "shared": self.shared, "cgroup": self.cgroup(node),
                "pidfile": str(node.dir / "nspawn.pid"), "console": str(node.dir / "console.log")}
        (node.dir / "node.json").write_text(json.dumps(spec))
        proc = subprocess.Popen([sys.executable, "-m", "kiln.testbed.supervise", str(node.dir / "node.json")],
                                start_new_session=True, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=open(node.dir / "supervisor.log", "ab"),
                                cwd="/", env=dict(os.environ, PYTHONPATH=_kiln_path()))
        (node.dir / "supervisor.pid").write_text(f"{proc.pid}\n")
        self._supervisors[node.name] = proc

    def wait_ready(self, node: Node, timeout: float) -> str:
        """Wait until systemd in the node says running or degraded; returns that state."""
        deadline = time.monotonic() + timeout
        state = "not started"
        retried = False
        while time.monotonic() < deadline:
            proc = self._supervisors.get(node.name)
            # A supervisor this process started is asked directly: its /proc entry has been seen to read
            # as gone for a moment while it starts, which made a live node look dead.
            alive = proc.poll() is None if proc else self._supervisor_pid(node) is not None
            if not alive:
                status = proc.returncode if proc else None
                if not retried and not (node.dir / "console.log").exists():
                    # It died before starting the node at all (seen rarely, killed before its first line
                    # ran): start it once more rather than fail the whole testbed.
                    retried = True
                    self._supervisors.pop(node.name, None)
                    self.start(node)
                    continue
                raise TestbedError(f"node {node.name} exited while booting (supervisor exit status {status}); "
                                   "console log:\n" + self.console_tail(node) + "\nsupervisor log:\n"
                                   + self.console_tail(node, name="supervisor.log"))
            init = self.init_pid(node)
            if init:
                result = run(["nsenter", "-t", str(init), "-a", "systemctl", "is-system-running"],
                             check=False, timeout=10)
                state = result.stdout.strip() or "unknown"
                if state in ("running", "degraded"):
                    return state
            time.sleep(0.3)
        raise TestbedError(f"node {node.name} not ready after {timeout:.0f} s (systemd says {state!r}); "
                           "console log:\n" + self.console_tail(node))

    def console_tail(self, node: Node, lines: int = 25, name: str = "console.log") -> str:
        return file_tail(node.dir / name, lines)

    def running(self, node: Node) -> bool:
        """The node's supervisor and its init both alive (a killed supervisor means a node that will not
        come back from a reboot: not running, as far as `up` is concerned)."""
        return self._supervisor_pid(node) is not None and self.init_pid(node) is not None

    def exec(self, node: Node, command: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
        init = self.init_pid(node)
        if not init:
            raise TestbedError(f"node {node.name} is not running")
        return run(["nsenter", "-t", str(init), "-a", *command], check=False, timeout=timeout)

    def stop(self, node: Node) -> None:
        """Power the node off cleanly; kill it if its shutdown hangs."""
        supervisor = self._supervisor_pid(node)
        nspawn = self._nspawn_pid(node)
        init = self.init_pid(node)
        if supervisor:
            os.kill(supervisor, signal.SIGTERM)
        elif nspawn:
            os.kill(nspawn, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (pid_alive(nspawn) or pid_alive(supervisor)):
            time.sleep(0.2)
        for pid in (init, nspawn, supervisor):
            if pid and pid_alive(pid):
                kill_and_wait(pid, signal.SIGKILL, timeout=5)
        self._kill_cgroup(node)

    def _kill_cgroup(self, node: Node) -> None:
        """Anything left in the node's cgroup (a hung shutdown, a crashed run) is killed."""
        for _ in range(20):
            pids = self.cgroup_pids(node)
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)

    def cgroup_pids(self, node: Node) -> list[int]:
        pids: set[int] = set()
        for controller in CGROUP_CONTROLLERS:
            base = Path("/sys/fs/cgroup") / controller / self.cgroup(node)
            for procs in base.rglob("cgroup.procs") if base.is_dir() else ():
                try:
                    pids |= {int(p) for p in procs.read_text().split()}
                except OSError:
                    pass
        return sorted(pids)

    def limit_cpu(self, node: Node, percent: int | None) -> None:
        """Every process of the node held to ``percent`` % of one CPU (None: no limit): kiln/testbed/cpu_limit.py."""
        if percent is None:
            cpu_limit.lift(self.cgroup(node))
        else:
            cpu_limit.limit(self.cgroup(node), lambda: self.cgroup_pids(node), percent)

    def power_off(self, node: Node) -> None:
        """Power loss: the node's supervisor, systemd-nspawn and every process of the node stop at
        the same instant (its cgroup is frozen, then killed); nothing shuts down cleanly. Disk kept."""
        freezer = Path("/sys/fs/cgroup/freezer") / self.cgroup(node) / "freezer.state"
        frozen = False
        try:
            freezer.write_text("FROZEN\n")
            frozen = True
        except OSError:
            pass  # no freezer hierarchy: kill at once without it
        pids = set(self.cgroup_pids(node)) | {p for p in (self._supervisor_pid(node), self._nspawn_pid(node)) if p}
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if frozen:
            freezer.write_text("THAWED\n")  # a frozen process dies of SIGKILL only once thawed
        self._kill_cgroup(node)
        self._supervisors.pop(node.name, None)
        self.release(node)

    def release(self, node: Node) -> None:
        """What a stopped node still holds on the host (its veth, nspawn's propagation directory, its
        cgroups) removed; its disk (overlay upper) and mount stay, so it boots again as it was."""
        if self._supervisor_pid(node) or self._nspawn_pid(node) or self.cgroup_pids(node):
            self.stop(node)
        # The host end of a killed node's veth can outlive it for a moment; a new boot then fails
        # with "Failed to add new veth interfaces ... File exists". Remove it and wait until it is gone.
        veth = f"vb-{node.name}"[:15]
        deadline = time.monotonic() + 10
        while link_exists(veth) and time.monotonic() < deadline:
            run(["ip", "link", "delete", veth], check=False)
            time.sleep(0.2)
        shutil.rmtree(f"/run/systemd/nspawn/propagate/{node.name}", ignore_errors=True)
        for controller in CGROUP_CONTROLLERS:
            rmdir_tree(Path("/sys/fs/cgroup") / controller / self.cgroup(node))
        cpu_limit.remove(self.cgroup(node))
        for name in ("supervisor.pid", "nspawn.pid"):
            (node.dir / name).unlink(missing_ok=True)

    def adopt(self, node: Node) -> bool:
        """Never: a new systemd-nspawn cannot take over a running container's processes (``up`` restarts it)."""
        return False

    def state(self, node: Node) -> str:
        """running | stopped | orphaned (its systemd runs on without a supervisor: ``up`` restarts it)."""
        if self.running(node):
            return "running"
        return "orphaned" if self.cgroup_pids(node) else "stopped"

    def cleanup(self, node: Node) -> None:
        """Remove what the node left on the host: mount, veth, cgroups, nspawn's propagation dir, files."""
        self.stop(node)
        self.release(node)
        for attempt in range(10):
            if not mounted(node.root):
                break
            if run(["umount", str(node.root)], check=False).returncode != 0 and attempt > 4:
                run(["umount", "-l", str(node.root)], check=False)
            time.sleep(0.2)
        if mounted(node.root):
            raise TestbedError(f"cannot unmount {node.root}; something still uses it (see fuser -m)")
        shutil.rmtree(node.dir, ignore_errors=True)

    def remove_testbed_cgroups(self) -> None:
        for controller in CGROUP_CONTROLLERS:
            rmdir_tree(Path("/sys/fs/cgroup") / controller / f"kiln-{self.testbed}")
        cpu_limit.remove(f"kiln-{self.testbed}")


def _kiln_path() -> str:
    """Where the imported kiln package lives (a checkout or site-packages), for the supervisor's python."""
    import kiln
    return str(Path(kiln.__file__).resolve().parent.parent)
