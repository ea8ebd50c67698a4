"""The vm node kind and the Vagrant cluster without a VM: QEMU's command line, a node's seed files,
host keys read from a console log, and the Vagrant inventory kiln writes."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from kiln import vagrant
from kiln.image.outputs import HOSTKEYS_BEGIN, HOSTKEYS_END
from kiln.inventory.validate import validate
from kiln.testbed import vm_supervise
from kiln.testbed.nspawn import Node
from kiln.testbed.vm import mac_address, tap_name

NODE = {"name": "kilnvm02", "uuid": "6d1f0c4e-0000-5000-8000-000000000002", "cpus": 2, "memory_mb": 1536,
        "disk": "/s/disk.qcow2", "seed": "/s/seed.img", "tap": "kt-kilnvm02", "mac": "52:54:00:aa:bb:cc",
        "shared_host": "/s/shared", "console": "/s/console.log", "qmp": "/s/qmp.sock", "pidfile": "/s/qemu.pid"}


def test_qemu_boots_the_disks_own_kernel_with_no_reboot_and_the_tap_on_the_bridge(monkeypatch):
    monkeypatch.setenv("KILN_VM_ACCEL", "tcg")
    cmd = vm_supervise.qemu_command(NODE, Path("/s/boot.vmlinuz"), Path("/s/boot.initrd.img"))
    joined = " ".join(cmd)
    assert cmd[cmd.index("-kernel") + 1] == "/s/boot.vmlinuz" and cmd[cmd.index("-initrd") + 1] == "/s/boot.initrd.img"
    assert "root=LABEL=kilnroot" in cmd[cmd.index("-append") + 1]
    assert "-no-reboot" in cmd and "tcg,thread=multi" in joined and "-cpu max" in joined
    assert "tap,id=n0,ifname=kt-kilnvm02,script=no,downscript=no" in cmd
    assert "file=/s/seed.img,if=virtio,format=raw,readonly=on" in cmd
    # only the devices it names: no VGA, floppy, CD-ROM or parallel port for the guest to drive or probe
    assert "-nodefaults" in cmd and "-vga" not in cmd and "-serial" in cmd
    monkeypatch.setenv("KILN_VM_ACCEL", "kvm")
    assert "-cpu host" in " ".join(vm_supervise.qemu_command(NODE, Path("/k"), Path("/i")))


def test_under_emulation_the_guest_reads_its_clock_from_the_tsc_and_under_kvm_its_kernel_decides(monkeypatch):
    """The guest's TSC sync check fails under emulation (it runs too slowly) and the kernel falls back to the
    emulated HPET; the testbed's boot command (never an image) tells it the TSCs agree."""
    def append(accel: str, node: dict = NODE) -> list[str]:
        monkeypatch.setenv("KILN_VM_ACCEL", accel)
        cmd = vm_supervise.qemu_command(node, Path("/k"), Path("/i"))
        return cmd[cmd.index("-append") + 1].split()
    assert "tsc=reliable" in append("tcg") and "tsc=reliable" not in append("kvm")
    assert append("tcg", {**NODE, "cmdline": "quiet"})[-2:] == ["quiet", "tsc=reliable"]
    assert append("kvm", {**NODE, "cmdline": "quiet"})[-1] == "quiet"


def test_accelerator_is_emulation_without_vmx_or_svm(monkeypatch):
    monkeypatch.delenv("KILN_VM_ACCEL", raising=False)
    flags = Path("/proc/cpuinfo").read_text()
    expected = "kvm" if (" vmx" in flags or " svm" in flags) and Path("/dev/kvm").exists() else "tcg"
    assert vm_supervise.accelerator() in (expected, "tcg")


def test_mac_and_tap_names_are_stable_and_fit_the_kernel_limit():
    assert mac_address("kilnvm", "kilnvm02") == mac_address("kilnvm", "kilnvm02") != mac_address("kilnvm", "kilnvm03")
    assert mac_address("a", "b").startswith("52:54:00:")
    assert len(tap_name(Node("abcdefgh123", "", 24, "compute", Path("/x")))) <= 15


def _console(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "console.log"
    path.write_text(body)
    return path


def test_host_keys_come_from_the_last_block_on_the_console(tmp_path):
    old = f"{HOSTKEYS_BEGIN}\r\nssh-ed25519 AAAAold root@x\r\n{HOSTKEYS_END}\r\n"
    new = (f"[  OK  ] Started ssh.service\r\n{HOSTKEYS_BEGIN}\r\nssh-ed25519 AAAAnew root@kilnvag02\r\n"
           f"ecdsa-sha2-nistp256 AAAAecdsa root@kilnvag02\r\nnoise line\r\n{HOSTKEYS_END}\r\nlogin: ")
    assert vagrant.host_keys(_console(tmp_path, old + "reboot\r\n" + new)) == [
        "ssh-ed25519 AAAAnew", "ecdsa-sha2-nistp256 AAAAecdsa"]
    assert vagrant.host_keys(_console(tmp_path, f"{HOSTKEYS_BEGIN}\r\nssh-ed25519 AAAAcut")) == []  # not finished
    assert vagrant.host_keys(tmp_path / "missing.log") == []


def test_vagrant_inventory_validates_and_known_hosts_come_from_consoles(tmp_path, monkeypatch):
    monkeypatch.setattr(vagrant, "CONSOLES", tmp_path / "console")
    monkeypatch.setattr(vagrant, "STATE", tmp_path / "state")
    (tmp_path / "console").mkdir()
    inv = tmp_path / "inventory" / "vagrant"
    nodes = vagrant.write_inventory(inv, 2, tmp_path)
    cluster, errors = validate(inv)
    assert errors == [] and cluster is not None
    assert [n["name"] for n in nodes] == ["kilnvag01", "kilnvag02", "kilnvag03"]
    spec = json.loads((inv / ".vagrant.json").read_text())
    assert [m["ip"] for m in spec["machines"]] == ["10.214.0.11", "10.214.0.12", "10.214.0.13"]
    for m in spec["machines"]:
        Path(m["console"]).write_text(f"{HOSTKEYS_BEGIN}\nssh-ed25519 AAAA{m['name']} root\n{HOSTKEYS_END}\n")
    assert vagrant.write_known_hosts(inv, wait=0) == {n["name"]: 1 for n in nodes}
    assert (tmp_path / "state" / "known_hosts").read_text().splitlines()[1] == "kilnvag02,10.214.0.12 ssh-ed25519 AAAAkilnvag02"
    Path(spec["machines"][2]["console"]).write_text("booting...\n")
    with pytest.raises(vagrant.VagrantError, match="kilnvag03: no host keys on its console"):
        vagrant.write_known_hosts(inv, wait=0)


@pytest.mark.skipif(not (Path("/sbin/mkfs.ext4").exists() and Path("/sbin/debugfs").exists()),
                    reason="needs e2fsprogs (mkfs.ext4, debugfs) to make and read a small ext4 disk")
def test_the_newest_kernel_is_found_in_boot_by_name_not_by_size(tmp_path):
    boot = tmp_path / "tree" / "boot"
    boot.mkdir(parents=True)
    for name in ("vmlinuz-6.1.0-25-amd64", "vmlinuz-6.1.0-28-amd64", "initrd.img-6.1.0-28-amd64", "config-6.1.0-28"):
        (boot / name).write_bytes(b"x" * 4096)
    raw = tmp_path / "disk.raw"
    subprocess.run(["truncate", "-s", "8M", str(raw)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-d", str(tmp_path / "tree"), str(raw)], check=True)
    assert vm_supervise._newest(raw, "vmlinuz") == "/boot/vmlinuz-6.1.0-28-amd64"
    assert vm_supervise._newest(raw, "initrd.img") == "/boot/initrd.img-6.1.0-28-amd64"
    assert vm_supervise._newest(raw, "System.map") is None


def _loop_mounts() -> str | None:
    """Why an ext4 image cannot be loop-mounted here, or None."""
    import shutil
    if os.geteuid() != 0:
        return "needs root to loop-mount an ext4 image"
    missing = [t for t in ("mkfs.ext4", "debugfs", "e2fsck", "qemu-img", "mount") if shutil.which(t) is None]
    return f"needs {', '.join(missing)}" if missing else None


@pytest.mark.skipif(_loop_mounts() is not None, reason=str(_loop_mounts()))
def test_boot_files_are_found_on_a_disk_whose_newest_metadata_is_only_in_its_journal(tmp_path):
    """A disk copied while mounted, seconds after its kernel and initramfs were written (the journal has
    committed them, their blocks have not reached their place: what a killed QEMU leaves): debugfs alone
    finds no /boot there; boot_files replays the journal into its copy first and reads both."""
    image, mnt = tmp_path / "fs.img", tmp_path / "m"
    subprocess.run(["truncate", "-s", "64M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-L", "kilnroot", str(image)], check=True)
    mnt.mkdir()
    subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], check=True)
    try:
        (mnt / "boot").mkdir()
        for name, content in (("vmlinuz", "kernel"), ("initrd.img", "initramfs")):
            with open(mnt / "boot" / f"{name}-6.1.0-99-amd64", "w") as f:  # fsynced, as dpkg writes them
                f.write(content)
                f.flush()
                os.fsync(f.fileno())
            (mnt / name).symlink_to(f"boot/{name}-6.1.0-99-amd64")
        time.sleep(7)  # past ext4's 5 s journal commit, well before the 30 s writeback of the blocks
        subprocess.run(["cp", str(image), str(tmp_path / "copy.img")], check=True)
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
    disk = tmp_path / "disk.qcow2"
    subprocess.run(["qemu-img", "convert", "-O", "qcow2", str(tmp_path / "copy.img"), str(disk)], check=True)
    unreplayed = subprocess.run(["debugfs", "-R", "ls -p /boot", str(tmp_path / "copy.img")], capture_output=True,
                                text=True)
    if "vmlinuz-6.1.0-99-amd64" in unreplayed.stdout:
        pytest.skip("the kernel wrote /boot's blocks in place within 7 s: no journal-only state to read")
    kernel, initrd = vm_supervise.boot_files(str(disk), tmp_path)
    assert kernel.read_text() == "kernel" and initrd.read_text() == "initramfs"


def test_a_qemu_that_exits_before_its_monitor_answers_is_reported_not_waited_for(tmp_path):
    qemu = subprocess.Popen(["sh", "-c", "exit 1"])
    with pytest.raises(vm_supervise.BootError, match="exited with status 1"):
        vm_supervise.Monitor(str(tmp_path / "qmp.sock"), qemu, timeout=30)


def _paused_qemu(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """A real QEMU with nothing to boot, paused (no CPU spent), with the supervisor's QMP socket and a
    second one for the test. Needs only qemu-system-x86_64, no root."""
    import shutil
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("needs qemu-system-x86_64 (apt-get install qemu-system-x86) to run a QEMU to adopt")
    qemu = subprocess.Popen(["qemu-system-x86_64", "-accel", "tcg", "-m", "32", "-display", "none", "-nodefaults",
                             "-S", "-no-reboot", "-qmp", f"unix:{tmp_path / 'qmp.sock'},server=on,wait=off",
                             "-qmp", f"unix:{tmp_path / 'test.sock'},server=on,wait=off"],
                            start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    (tmp_path / "qemu.pid").write_text(f"{qemu.pid}\n")
    deadline = time.monotonic() + 60
    while not (tmp_path / "test.sock").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    spec = dict(NODE, console=str(tmp_path / "console.log"), qmp=str(tmp_path / "qmp.sock"),
                pidfile=str(tmp_path / "qemu.pid"), disk=str(tmp_path / "absent.qcow2"))
    (tmp_path / "node.json").write_text(json.dumps(spec))
    return qemu, tmp_path / "test.sock"


def test_a_running_qemu_is_adopted_by_a_new_supervisor_which_sees_it_end(tmp_path):
    """A VM whose supervisor died runs on: ``up`` adopts it (VmNodes.adopt) instead of booting it again.
    The new supervisor watches the same QEMU over its QMP socket; the QEMU ending is seen and logged, and
    the supervisor ends with it (a stop that is not a guest reset is a machine that stays off)."""
    from kiln.testbed.vm import VmNodes
    qemu, test_sock = _paused_qemu(tmp_path)
    node = Node("kilnvm02", "10.0.0.2", 24, "compute", tmp_path)
    kind = VmNodes("kilnvm", None, "kt-none", tmp_path, tmp_path / "ssh_config")
    try:
        assert kind.state(node) == "orphaned"
        assert kind.adopt(node, timeout=60)
        assert kind.state(node) == "running" and qemu.poll() is None  # the same QEMU, not a new boot
        assert not kind.adopt(node)  # supervised now: nothing to adopt
        supervisor = kind._supervisors[node.name]
        host = vm_supervise.Monitor(str(test_sock), qemu)  # the test's own QMP socket
        host.send({"execute": "quit"})  # as a host would end it
        qemu.wait(timeout=30)
        assert supervisor.wait(timeout=30) == 0
        log = (tmp_path / "supervisor.log").read_text()
        assert f"QEMU {qemu.pid} adopted" in log and f"QEMU {qemu.pid}: {vm_supervise.WATCHED}" in log, log
        assert "QEMU ended, status 0, host-qmp-quit" in log, log
        assert not (tmp_path / "qemu.pid").exists() and kind.state(node) == "stopped"
    finally:
        qemu.kill()
        qemu.wait()
        for proc in kind._supervisors.values():
            proc.kill()


def test_a_supervisor_that_cannot_adopt_leaves_the_vm_as_it_was(tmp_path):
    """No QEMU answering on the node's QMP socket: adopt gives up within its bound, says False, kills only
    its own new supervisor, and the VM is left for ``up`` to boot (release, start)."""
    from kiln.testbed.vm import VmNodes
    node = Node("kilnvm02", "10.0.0.2", 24, "compute", tmp_path)
    kind = VmNodes("kilnvm", None, "kt-none", tmp_path, tmp_path / "ssh_config")
    assert not kind.adopt(node)  # no QEMU at all
    sleeper = subprocess.Popen(["bash", "-c", "exec -a qemu-system-x86_64 sleep 300"], start_new_session=True)
    try:
        # bash's own command line names qemu-system too, and mid-exec the kernel shows an empty one: wait
        # until the exec is done (argv[0] is the new name) or the state read below races it
        deadline = time.monotonic() + 30
        while (not Path(f"/proc/{sleeper.pid}/cmdline").read_bytes().startswith(b"qemu-system-x86_64\0")
               and time.monotonic() < deadline):
            time.sleep(0.05)
        (tmp_path / "qemu.pid").write_text(f"{sleeper.pid}\n")
        (tmp_path / "node.json").write_text(json.dumps(dict(NODE, qmp=str(tmp_path / "none.sock"),
                                                             console=str(tmp_path / "console.log"))))
        assert kind.state(node) == "orphaned"
        assert not kind.adopt(node, timeout=3)
        assert sleeper.poll() is None and kind.state(node) == "orphaned"
        assert not (tmp_path / "supervisor.pid").exists()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_waiting_for_ssh_outlasts_one_try_that_takes_too_long(monkeypatch):
    """Under software emulation on a busy host one ssh try can run past its 15 s: that is one failed try,
    and the wait goes on until its own deadline (it ended `up` at once before)."""
    from kiln.testbed import testbed as testbed_module
    from kiln.testbed.host import TestbedError
    tries = []

    def slow_then_up(cmd, check=True, timeout=None, **kw):
        tries.append(timeout)
        if len(tries) == 1:
            raise TestbedError("ssh -F /x kilnvm02 timed out after 15 s")
        return subprocess.CompletedProcess(cmd, 0 if len(tries) >= 3 else 255, "", "Connection refused")
    monkeypatch.setattr(testbed_module, "run", slow_then_up)
    monkeypatch.setattr(testbed_module.time, "sleep", lambda s: None)
    tb = testbed_module.Testbed("unitwait")
    tb._wait_ssh([Node("kilnvm02", "10.0.0.2", 24, "compute", Path("/nonexistent"))], timeout=60)
    assert tries == [15, 15, 15]

    def never(cmd, check=True, timeout=None, **kw):
        raise TestbedError("ssh -F /x kilnvm02 timed out after 15 s")
    monkeypatch.setattr(testbed_module, "run", never)
    with pytest.raises(TestbedError, match="ssh does not answer: .*timed out after 15 s"):
        tb._wait_ssh([Node("kilnvm02", "10.0.0.2", 24, "compute", Path("/nonexistent"))], timeout=0)
