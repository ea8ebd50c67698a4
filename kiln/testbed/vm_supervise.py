"""One testbed VM's supervisor: runs QEMU and boots the VM again when it reboots itself.

Started by ``kiln testbed up --kind vm`` in a session of its own, one per VM:

    python -m kiln.testbed.vm_supervise NODE_JSON [--adopt QEMU_PID]

Each boot loads the kernel and initramfs the VM's own disk holds (``/vmlinuz``, ``/initrd.img``: what
its package manager and ``update-initramfs`` last wrote), as a bootloader would, and boots them with
QEMU's direct kernel boot. QEMU runs with ``-no-reboot``; its QMP socket says why it stopped: a guest
reset (``systemctl reboot``, Slurm's RebootProgram) boots the VM again, a guest poweroff ends the
supervisor. SIGTERM asks the guest to power off (ACPI) and, after a grace time, ends QEMU.

``--adopt``: a VM whose supervisor died (killed, or its host session lost) runs on; a new supervisor
takes over its QEMU through the QMP socket instead of booting the VM again, so its jobs run on, as a
restarted hypervisor daemon keeps its running guests.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from kiln.testbed.host import pid_alive

WATCHED = "watched over QMP"  # the log line kiln.testbed.vm waits for when it adopts a VM
POWERDOWN_GRACE = 90  # seconds a guest gets to shut down cleanly under software emulation


class BootError(RuntimeError):
    pass


def boot_files(disk: str, workdir: Path) -> tuple[Path, Path]:
    """The disk's current kernel and initramfs, copied out (``/vmlinuz`` and ``/initrd.img``, or the
    newest pair in /boot). Reads the disk as raw through qemu-img and its ext4 file system with debugfs."""
    raw = workdir / "boot.raw"
    try:
        _run(["qemu-img", "convert", "-O", "raw", disk, str(raw)])
        # A VM that lost power (or whose QEMU was killed) can hold its newest metadata (a new kernel's
        # link, a rewritten initramfs, /boot itself) only in the ext4 journal, which debugfs does not
        # read: replay it into this copy first, as the kernel does when it mounts the disk
        fsck = _run(["e2fsck", "-E", "journal_only", "-p", str(raw)], check=False)
        if fsck.returncode >= 4:
            raise BootError(f"{disk}: its journal could not be replayed (e2fsck exit {fsck.returncode}): "
                            f"{(fsck.stderr or fsck.stdout).strip()[-300:]}")
        out = {}
        for name in ("vmlinuz", "initrd.img"):
            path = _link_target(raw, f"/{name}") or _newest(raw, name)
            if path is None:
                raise BootError(f"{disk}: no /{name} and no /boot/{name}-* on the disk")
            out[name] = workdir / f"boot.{name}"
            out[name].unlink(missing_ok=True)
            _run(["debugfs", "-R", f"dump {path} {out[name]}", str(raw)])
            if not out[name].is_file() or out[name].stat().st_size == 0:
                raise BootError(f"{disk}: could not read {path} from the disk")
        return out["vmlinuz"], out["initrd.img"]
    finally:
        raw.unlink(missing_ok=True)


def _link_target(raw: Path, link: str) -> str | None:
    stat = _run(["debugfs", "-R", f"stat {link}", str(raw)], check=False)
    match = re.search(r'Fast link dest: "([^"]+)"', stat.stdout)
    if not match:
        return None
    target = match.group(1)
    return target if target.startswith("/") else "/" + target


def _newest(raw: Path, name: str) -> str | None:
    """The newest ``/boot/NAME-VERSION`` on the disk. debugfs's parseable listing has one entry a line,
    ``/INODE/MODE/UID/GID/NAME/SIZE/``."""
    listing = _run(["debugfs", "-R", "ls -p /boot", str(raw)], check=False).stdout
    names = [fields[5] for fields in (line.split("/") for line in listing.splitlines()) if len(fields) > 6]
    found = sorted(n for n in names if n.startswith(f"{name}-"))
    return f"/boot/{found[-1]}" if found else None


def _run(cmd: list[str], check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if check and result.returncode != 0:
        raise BootError(f"{' '.join(cmd[:3])} failed: {(result.stderr or result.stdout).strip()[-300:]}")
    return result


def accelerator() -> str:
    """``kvm`` where this host can run ordinary guests with it (a CPU with vmx or svm and /dev/kvm),
    else QEMU's software emulation. ``KILN_VM_ACCEL`` (kvm or tcg) overrides."""
    forced = os.environ.get("KILN_VM_ACCEL")
    if forced in ("kvm", "tcg"):
        return forced
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        flags = ""
    usable = os.access("/dev/kvm", os.R_OK | os.W_OK) and re.search(r"^flags\s*:.*\b(vmx|svm)\b", flags, re.M)
    return "kvm" if usable else "tcg"


# the node-local data disk's serial: /dev/disk/by-id/virtio-kilnlocal in the VM (kiln/testbed/vm.py)
LOCAL_DISK_SERIAL = "kilnlocal"


# Under QEMU's software emulation every guest CPU's TSC is read from the one virtual clock, so the TSCs agree;
# but the guest kernel's check of that runs too slowly under emulation, fails, and falls back to the HPET,
# whose every read is an emulated device access (a clock read in any guest program costs a system call and
# an MMIO exit). ``tsc=reliable`` skips that check: the guest reads its clock from the TSC. Only the
# testbed's boot command says it; images carry no such setting.
TCG_CMDLINE = "tsc=reliable"


def qemu_command(node: dict, kernel: Path, initrd: Path) -> list[str]:
    accel = accelerator()
    cmdline = " ".join(part for part in (node.get("cmdline", ""), TCG_CMDLINE if accel == "tcg" else "") if part)
    return ["qemu-system-x86_64", "-name", node["name"], "-uuid", node["uuid"],
            "-accel", "kvm" if accel == "kvm" else "tcg,thread=multi,tb-size=256",
            "-cpu", "host" if accel == "kvm" else "max", "-smp", str(node["cpus"]), "-m", str(node["memory_mb"]),
            "-kernel", str(kernel), "-initrd", str(initrd),
            "-append", f"root=LABEL=kilnroot ro console=ttyS0 net.ifnames=0 {cmdline}".strip(),
            "-drive", f"file={node['disk']},if=virtio,format=qcow2",
            "-drive", f"file={node['seed']},if=virtio,format=raw,readonly=on",
            *(["-drive", f"file={node['local']},if=none,id=local,format=qcow2",
               "-device", f"virtio-blk-pci,drive=local,serial={LOCAL_DISK_SERIAL}"] if node.get("local") else []),
            "-netdev", f"tap,id=n0,ifname={node['tap']},script=no,downscript=no",
            "-device", f"virtio-net-pci,netdev=n0,mac={node['mac']}",
            "-virtfs", f"local,path={node['shared_host']},mount_tag=kilnshared,security_model=passthrough,id=fs0",
            "-chardev", f"file,id=console,path={node['console']},append=on", "-serial", "chardev:console",
            # only the devices above: no VGA (the guest would draw a framebuffer console, every message
            # emulated pixel by pixel), floppy, CD-ROM or parallel port for its kernel to probe at each boot
            "-nodefaults", "-display", "none", "-qmp", f"unix:{node['qmp']},server=on,wait=off", "-no-reboot"]


class Adopted:
    """A running QEMU this supervisor did not start (``--adopt``): the parts of ``subprocess.Popen`` the
    supervisor uses, over its pid. It is not this process's child, so its exit status is unknown
    (reported as 0) and its end is seen by polling."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and not pid_alive(self.pid, "qemu-system"):
            self.returncode = 0
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"qemu {self.pid}", timeout)
            time.sleep(0.2)
        return self.returncode

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Monitor:
    """QEMU's QMP socket: the shutdown reason, and the ACPI power button."""

    def __init__(self, path: str, qemu: subprocess.Popen | Adopted, timeout: float = 120):
        self.sock = None
        deadline = time.monotonic() + timeout  # QEMU makes the socket early; a loaded host can be slow
        while self.sock is None and time.monotonic() < deadline:
            if qemu.poll() is not None:
                raise BootError(f"QEMU exited with status {qemu.returncode} before its QMP socket answered "
                                "(its own message is in console.log)")
            try:
                sock = socket.socket(socket.AF_UNIX)
                sock.connect(path)
                self.sock = sock
            except OSError:
                time.sleep(0.1)
        if self.sock is None:
            raise BootError(f"QEMU's QMP socket {path} does not answer after {timeout:.0f} s")
        self.file = self.sock.makefile("rwb", buffering=0)
        self.file.readline()  # greeting
        self.send({"execute": "qmp_capabilities"})
        self.reason: str | None = None

    def send(self, message: dict) -> None:
        try:
            self.file.write(json.dumps(message).encode() + b"\n")
        except OSError:
            pass

    def read_events(self) -> None:
        """Until QEMU closes the socket (it exits), remembering the last SHUTDOWN reason."""
        for line in self.file:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == "SHUTDOWN":
                self.reason = event.get("data", {}).get("reason")


def say(message: str) -> None:
    """One line of the supervisor's log (its stderr: supervisor.log beside the VM's disk)."""
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def main(spec_path: str, adopt: int | None = None) -> int:
    node = json.loads(Path(spec_path).read_text())
    workdir = Path(spec_path).parent
    stopping = False
    monitor: Monitor | None = None
    child: subprocess.Popen | Adopted | None = None

    def on_term(signum, frame):  # noqa: ARG001
        nonlocal stopping
        stopping = True
        say(f"signal {signum}: powering the VM off")
        if monitor is not None:
            monitor.sock.settimeout(POWERDOWN_GRACE)  # a guest that never powers off is ended below
            monitor.send({"execute": "system_powerdown"})

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    log = open(node["console"], "ab", buffering=0)
    boots = 0
    try:
        while not stopping:
            boots += 1
            if adopt is not None:
                if not pid_alive(adopt, "qemu-system"):
                    raise BootError(f"QEMU {adopt} to adopt is not running")
                child, adopt = Adopted(adopt), None
                log.write(f"\n=== kiln: QEMU {child.pid} adopted at {time.strftime('%H:%M:%S')} ===\n".encode())
                say(f"boot {boots}: QEMU {child.pid} adopted (its supervisor had ended)")
            else:
                kernel, initrd = boot_files(node["disk"], workdir)
                log.write(f"\n=== kiln: boot {boots} at {time.strftime('%H:%M:%S')} ({accelerator()}) ===\n".encode())
                Path(node["qmp"]).unlink(missing_ok=True)
                child = subprocess.Popen(qemu_command(node, kernel, initrd), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=log)
                Path(node["pidfile"]).write_text(f"{child.pid}\n")
                say(f"boot {boots}: QEMU {child.pid} started")
            monitor = Monitor(node["qmp"], child)
            say(f"QEMU {child.pid}: {WATCHED}")
            if stopping:
                on_term(signal.SIGTERM, None)
            try:
                monitor.read_events()
                status = child.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):  # socket.timeout is an OSError
                child.kill()
                status = child.wait()
            reason = monitor.reason
            say(f"boot {boots}: QEMU ended, status {status}, {reason or 'no shutdown event'}")
            log.write(f"=== kiln: VM stopped (status {status}, {reason or 'no shutdown event'}) ===\n".encode())
            monitor, child = None, None
            if reason != "guest-reset":
                break  # powered off (or QEMU died): a machine that stays off
    except Exception as exc:  # noqa: BLE001 - whatever ends the supervisor, the VM goes with it, said why
        say(f"supervisor failed: {type(exc).__name__}: {exc}")
        log.write(f"=== kiln: supervisor failed: {exc} ===\n".encode())
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
        Path(node["pidfile"]).unlink(missing_ok=True)
        return 1
    Path(node["pidfile"]).unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[2] == "--adopt":
        sys.exit(main(sys.argv[1], adopt=int(sys.argv[3])))
    sys.exit(main(sys.argv[1]))
