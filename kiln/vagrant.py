"""A Vagrant cluster of kiln nodes (libvirt provider): its inventory, boxes, host keys and host services.

The repository's ``Vagrantfile`` reads ``inventory/vagrant/.vagrant.json`` (written here) for its
machines; kiln owns the layout so the inventory and the VMs always agree:

    kiln vagrant box [--compute N]   inventory/vagrant/ (no keys yet), the controller's and the compute
                                     node type's images as Vagrant boxes, added to Vagrant
    vagrant up                       the VMs; its trigger runs `kiln vagrant inventory`
    kiln vagrant inventory           known_hosts from each VM's serial console (the keys its first boot
                                     printed there: out of band, so ssh is strict from the first contact)
    kiln vagrant host start|stop     libvirtd and virtlogd where no systemd runs them, kiln's storage pool;
                                     stop puts back ip_forward and the firewall rules libvirt changed

State: ``/var/lib/kiln/vagrant`` (``VAGRANT_HOME`` for the boxes, the storage pool, console logs, what
``host start`` changed). libvirt's QEMU runs as its own user, so boxes and consoles live there, not
under /root.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import yaml

STATE = Path(os.environ.get("KILN_VAGRANT_STATE", "/var/lib/kiln/vagrant"))
VAGRANT_HOME = STATE / "home"
POOL_NAME, POOL_DIR = "kiln-vagrant", STATE / "pool"
CONSOLES = STATE / "console"
CLUSTER = "kilnvag"
SUBNET = "10.214.0"
NODE_TYPE = "vagrant_compute"
CPUS, MEMORY_MB = 2, 1536
SPEC = ".vagrant.json"  # the machines, for the Vagrantfile (a dot file: not an inventory source)
HEADER = "# Written by `kiln vagrant box`; rewritten each time. Do not edit.\n"


class VagrantError(RuntimeError):
    pass


def machines(compute: int) -> list[dict]:
    names = [f"{CLUSTER}{i:02d}" for i in range(1, compute + 2)]
    return [{"name": n, "ip": f"{SUBNET}.{11 + i}", "role": "controller" if i == 0 else "compute",
             "console": str(CONSOLES / f"{n}.log")} for i, n in enumerate(names)]


def known_hosts_file() -> Path:
    """Outside the inventory directory, whose every file is an inventory source."""
    return STATE / "known_hosts"


def write_inventory(path: Path, compute: int, repo: Path, boxes: dict[str, str] | None = None) -> list[dict]:
    """``path``/hosts.yml, group_vars and vagrant.json for a controller and ``compute`` compute VMs.
    ``repo``: the directory of the Vagrantfile (Vagrant keeps each machine's private key under it)."""
    nodes = machines(compute)
    ctl, computes = nodes[0], nodes[1:]

    def host(n: dict) -> dict:
        return {"ansible_host": n["ip"],
                "ansible_ssh_private_key_file": str(repo / ".vagrant" / "machines" / n["name"] / "libvirt" / "private_key")}
    hosts = {"all": {"children": {
        "slurm_controller": {"hosts": {ctl["name"]: host(ctl)}},
        "slurm_dbd": {"hosts": {ctl["name"]: None}},
        "login": {"hosts": {ctl["name"]: None}},
        "compute": {"children": {NODE_TYPE: {"hosts": {n["name"]: host(n) for n in computes}}}},
    }}}
    (path / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
    (path / "hosts.yml").write_text(HEADER + yaml.safe_dump(hosts, sort_keys=False))
    (path / "group_vars" / "all" / "vagrant.yml").write_text(HEADER + yaml.safe_dump({
        "kiln_cluster_name": CLUSTER,
        "kiln_os": "debian12",
        "ansible_user": "root",
        "kiln_slurm_partitions": [{"name": "batch", "groups": [NODE_TYPE], "default": True}],
        "kiln_ssh_known_hosts_file": str(known_hosts_file()),
        # What a real node runs: the VMs have their own kernel.
        "kiln_slurm_cgroup_plugin": "cgroup/v2",
        "kiln_slurm_constrain_cores_memory": True,
        "kiln_nvidia_source": "debian",
        # No NTP server is reachable from the VMs' private network.
        "kiln_check_time_sync": False,
    }, sort_keys=False))
    (path / "group_vars" / f"{NODE_TYPE}.yml").write_text(HEADER + yaml.safe_dump({
        "kiln_cpus": CPUS, "kiln_memory_mb": 1024, "kiln_gpu_count": 0,
        "kiln_storage_mounts": [{"path": "/scratch", "type": "tmpfs", "source": "tmpfs", "options": "rw,size=64m"}],
    }, sort_keys=False))
    # What Debian 12 carries (the testbed's pins): the boxes install from Debian's registry.
    from kiln.testbed.inventory import TESTBED_VERSIONS
    (path / "group_vars" / "all" / "versions.yml").write_text(HEADER + yaml.safe_dump(
        {"kiln_versions": TESTBED_VERSIONS}, sort_keys=False))
    spec = {"cluster": CLUSTER, "pool": POOL_NAME, "cpus": CPUS, "memory_mb": MEMORY_MB, "machines": nodes,
            "boxes": boxes or {}}
    (path / SPEC).write_text(json.dumps(spec, indent=2) + "\n")
    (path / ".kiln-vagrant").write_text(CLUSTER + "\n")
    return nodes


def host_keys(console: Path) -> list[str]:
    """The host public keys the VM printed on its console at its last boot (kiln/image/outputs.py)."""
    from kiln.image.outputs import HOSTKEYS_BEGIN, HOSTKEYS_END
    try:
        text = console.read_text(errors="replace").replace("\r", "")
    except OSError:
        return []
    begin = text.rfind(HOSTKEYS_BEGIN)
    end = text.find(HOSTKEYS_END, begin)
    if begin < 0 or end < 0:
        return []
    keys = []
    for line in text[begin + len(HOSTKEYS_BEGIN):end].splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].startswith(("ssh-", "ecdsa-")):
            keys.append(f"{parts[0]} {parts[1]}")
    return keys


def write_known_hosts(path: Path, wait: float = 300) -> dict[str, int]:
    """known_hosts for every machine of ``path``/.vagrant.json from its console; machine -> keys found."""
    spec = json.loads((path / SPEC).read_text())
    found: dict[str, list[str]] = {}
    deadline = time.monotonic() + wait
    for m in spec["machines"]:
        while not (keys := host_keys(Path(m["console"]))) and time.monotonic() < deadline:
            time.sleep(2)
        if not keys:
            raise VagrantError(f"{m['name']}: no host keys on its console ({m['console']}); is it up (vagrant up)?")
        found[m["name"]] = keys
    lines = [f"{name},{m['ip']} {key}\n" for m in spec["machines"] for name in [m["name"]] for key in found[name]]
    known_hosts_file().parent.mkdir(parents=True, exist_ok=True)
    known_hosts_file().write_text("".join(lines))
    return {name: len(keys) for name, keys in found.items()}


# --- host services ---
def _run(cmd: list[str], check: bool = True, **kw) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)
    if check and result.returncode != 0:
        raise VagrantError(f"{' '.join(cmd[:4])} failed: {(result.stderr or result.stdout).strip()[-400:]}")
    return result


def _firewall() -> str:
    return _run(["iptables-save"], check=False).stdout if shutil.which("iptables-save") else ""


def host_start() -> list[str]:
    """libvirtd and virtlogd started if they do not run (no systemd), the storage pool defined and
    started; what the host had before is saved for ``host_stop``. Returns what was done."""
    done = []
    STATE.mkdir(parents=True, exist_ok=True)
    for d in (VAGRANT_HOME, POOL_DIR, CONSOLES):
        d.mkdir(parents=True, exist_ok=True)
    CONSOLES.chmod(0o777)  # libvirt's QEMU (its own user) writes the console logs
    saved = STATE / "host.json"
    if not saved.exists():
        saved.write_text(json.dumps({"ip_forward": Path("/proc/sys/net/ipv4/ip_forward").read_text().strip(),
                                     "firewall": _firewall(), "started": []}))
    record = json.loads(saved.read_text())
    for daemon in ("virtlogd", "libvirtd"):
        if _run(["pgrep", "-x", daemon], check=False).returncode != 0:
            if shutil.which(daemon) is None and not Path(f"/usr/sbin/{daemon}").exists():
                raise VagrantError(f"{daemon} not installed: apt-get install vagrant vagrant-libvirt libvirt-daemon-system")
            _run([f"/usr/sbin/{daemon}", "-d"])
            record["started"].append(daemon)
            done.append(f"started {daemon}")
    saved.write_text(json.dumps(record))
    for _ in range(50):
        if _run(["virsh", "-c", "qemu:///system", "version"], check=False).returncode == 0:
            break
        time.sleep(0.2)
    pools = _run(["virsh", "-c", "qemu:///system", "pool-list", "--all", "--name"]).stdout.split()
    if POOL_NAME not in pools:
        _run(["virsh", "-c", "qemu:///system", "pool-define-as", POOL_NAME, "dir", "--target", str(POOL_DIR)])
        done.append(f"defined storage pool {POOL_NAME} ({POOL_DIR})")
    _run(["virsh", "-c", "qemu:///system", "pool-start", POOL_NAME], check=False)
    return done


def forget_box_volumes(box: str) -> list[str]:
    """Volumes vagrant-libvirt made in kiln's pool from an earlier box of this name: removed, so the next
    ``vagrant up`` uploads the box just added instead of booting the old one."""
    virsh = ["virsh", "-c", "qemu:///system"]
    if shutil.which("virsh") is None or _run([*virsh, "pool-info", POOL_NAME], check=False).returncode != 0:
        return []
    prefix = box.replace("/", "-VAGRANTSLASH-") + "_vagrant_box_image_"
    gone = []
    for line in _run([*virsh, "vol-list", POOL_NAME], check=False).stdout.splitlines()[2:]:
        if line.split() and line.split()[0].startswith(prefix):
            _run([*virsh, "vol-delete", "--pool", POOL_NAME, line.split()[0]], check=False)
            gone.append(line.split()[0])
    return gone


def host_stop() -> list[str]:
    """kiln's storage pool (and every volume in it, the boxes' too) removed, the daemons ``host_start``
    started stopped, ip_forward and the firewall rules put back."""
    done = []
    saved = STATE / "host.json"
    virsh = ["virsh", "-c", "qemu:///system"]
    if _run(["pgrep", "-x", "libvirtd"], check=False).returncode == 0:
        domains = [d for d in _run([*virsh, "list", "--all", "--name"], check=False).stdout.split() if d.startswith(CLUSTER)]
        if domains:
            raise VagrantError(f"VMs still defined: {', '.join(domains)}; run vagrant destroy -f first")
        for vol in _run([*virsh, "vol-list", POOL_NAME, "--details"], check=False).stdout.splitlines()[2:]:
            if vol.split():
                _run([*virsh, "vol-delete", "--pool", POOL_NAME, vol.split()[0]], check=False)
        _run([*virsh, "pool-destroy", POOL_NAME], check=False)
        if _run([*virsh, "pool-undefine", POOL_NAME], check=False).returncode == 0:
            done.append(f"removed storage pool {POOL_NAME}")
    if saved.exists():
        record = json.loads(saved.read_text())
        for daemon in reversed(record["started"]):
            _run(["pkill", "-x", daemon], check=False)
            for _ in range(50):
                if _run(["pgrep", "-x", daemon], check=False).returncode != 0:
                    break
                time.sleep(0.2)
            done.append(f"stopped {daemon}")
        Path("/proc/sys/net/ipv4/ip_forward").write_text(record["ip_forward"] + "\n")
        if record["firewall"] and shutil.which("iptables-restore"):
            subprocess.run(["iptables-restore"], input=record["firewall"], text=True, capture_output=True)
        elif shutil.which("iptables"):
            for table in ("filter", "nat", "mangle"):
                _run(["iptables", "-t", table, "-F"], check=False)
                _run(["iptables", "-t", table, "-X"], check=False)
        done.append("put back ip_forward and the firewall rules")
        saved.unlink()
    return done
