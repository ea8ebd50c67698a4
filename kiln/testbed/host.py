"""Small helpers for running commands on the testbed host and reading its state."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path


class TestbedError(Exception):
    """A testbed step failed; the message says which node or step and what to do."""


class TestbedUnavailable(TestbedError):
    """This host cannot run the testbed as it is (not root, tools missing): a usage problem."""


def run(cmd: list[str], check: bool = True, timeout: float | None = 120, **kw) -> subprocess.CompletedProcess:
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    except subprocess.TimeoutExpired as exc:
        raise TestbedError(f"{' '.join(cmd[:4])} timed out after {timeout} s") from exc
    if check and result.returncode != 0:
        raise TestbedError(f"{' '.join(cmd[:6])} failed ({result.returncode}): "
                           f"{(result.stderr or result.stdout).strip()[-600:]}")
    return result


def require_root() -> None:
    if os.geteuid() != 0:
        raise TestbedUnavailable("the testbed needs root (mounts, bridges, systemd-nspawn): run as root")


def require_tools(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise TestbedUnavailable(f"missing host tools: {', '.join(missing)}; install them with apt-get install "
                           "debootstrap systemd-container apt-cacher-ng iproute2 openssh-client")


def pid_alive(pid: int | None, marker: str | None = None) -> bool:
    """True if ``pid`` runs and, when ``marker`` is given, its command line contains it (pid reuse)."""
    if not pid:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    state = ""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        pass
    if state == "Z":
        return False
    return marker is None or marker in cmdline


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def kill_and_wait(pid: int, sig: int = signal.SIGTERM, timeout: float = 10.0) -> bool:
    """Send ``sig`` and wait for the process to go; True if it went."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.1)
    return not pid_alive(pid)


def stop_recorded(pidfile: Path, marker: str) -> None:
    """Stop the process whose pid ``pidfile`` holds, if it still runs ``marker`` (a reused pid is left
    alone): SIGTERM, then SIGKILL; the pid file removed either way."""
    pid = read_pid(pidfile)
    if pid_alive(pid, marker):
        if not kill_and_wait(pid, timeout=10):
            kill_and_wait(pid, signal.SIGKILL, timeout=5)
    pidfile.unlink(missing_ok=True)


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def mounted(path: Path) -> bool:
    target = str(path.resolve())
    with open("/proc/self/mounts") as mounts:
        return any(line.split()[1] == target for line in mounts)


def mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve())
    with open("/proc/self/mounts") as mounts:
        targets = [line.split()[1] for line in mounts]
    return [t for t in targets if t == prefix or t.startswith(prefix + "/")]


def link_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists()


def file_tail(path: Path, lines: int = 25) -> str:
    """The last lines of a log (a node's console), indented for an error message."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no {path.name})"
    return "\n".join("    " + line for line in text[-lines:])


def rmdir_tree(path: Path) -> None:
    """Remove a cgroup directory and its children, deepest first (cgroups are removed with rmdir)."""
    if not path.is_dir():
        return
    for sub in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        try:
            sub.rmdir()
        except OSError:
            pass
    try:
        path.rmdir()
    except OSError:
        pass
