"""`kiln testbed`: bring a local cluster of real systemd nodes up and down, whatever an earlier run left.

Everything the testbed makes is named after it, so it only ever removes its own things:
state in /var/lib/kiln/testbed/NAME, the bridge kb-NAME, cgroups kiln-NAME/, overlay mounts under
its state, its own apt-cacher-ng (pid file in its state). Caches that survive ``down``: the base image
(/var/cache/kiln/testbed) and the apt cache; ``down --wipe`` removes them too.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kiln.testbed import base as base_image
from kiln.testbed.host import (TestbedError, TestbedUnavailable, kill_and_wait, link_exists, mounts_under, require_root,
                               require_tools, run)
from kiln.testbed import cpu_limit, simulate
from kiln.testbed.inventory import (GPUS_PER_NODE, SIM_GPU_MODEL, SIM_HCAS, SIM_NVLINKS, SIM_RATE,
                                    VERSIONS_BY_OS, write_inventory)
from kiln.testbed.nspawn import Node, NspawnNodes
from kiln.testbed.vm import VmNodes, stray_processes
from kiln.versions import upstream
from kiln.testbed.node_files import SHARED_DIR, node_files
from kiln.testbed.bmc import TestbedBmc
from kiln.testbed.proxy import AptProxy

STATE_ROOT = Path(os.environ.get("KILN_TESTBED_STATE", "/var/lib/kiln/testbed"))
APT_CACHE = Path("/var/cache/kiln/apt-cacher-ng")
PROXY_PORT = 3149

INOTIFY_INSTANCES = "/proc/sys/fs/inotify/max_user_instances"
KINDS = ("nspawn", "vm")
VM_TOOLS = ("qemu-system-x86_64", "qemu-img", "mkfs.ext4", "debugfs")


def images_in_use(root: Path | None = None) -> dict[str, list[str]]:
    """Image name -> the testbeds whose recorded nodes boot from it (up or stopped: a stopped node's disk
    is still a layer over its image)."""
    used: dict[str, list[str]] = {}
    for record in sorted((root or STATE_ROOT).glob("*/testbed.json")):
        try:
            data = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        for node in data.get("nodes", []):
            if node.get("image") and record.parent.name not in used.get(node["image"], []):
                used.setdefault(node["image"], []).append(record.parent.name)
    return used


@dataclass
class Testbed:
    __test__ = False  # not a pytest test class

    name: str = "kiln"
    progress: Callable[[str], None] = print
    node_kind: str | None = None  # nspawn | vm; None: what the testbed was made with (nspawn if new)
    node_os: str | None = None    # debian12 | debian13; None: what the testbed was made with (debian12 if new)
    # what each node is doing during ``up`` (step(node, what) / finish(node, outcome, detail)):
    # kiln.cli.progress.Progress, or None
    events: Any = None

    def __post_init__(self) -> None:
        if not self.name.isalnum() or not self.name.islower() or len(self.name) > 8:
            raise TestbedError(f"testbed name {self.name!r}: use up to 8 lower-case letters and digits")
        if self.node_kind not in (None, *KINDS):
            raise TestbedError(f"--kind {self.node_kind}: use one of {', '.join(KINDS)}")
        self.state = STATE_ROOT / self.name
        self.recorded_kind = self._recorded().get("kind", "nspawn" if (self.state / "testbed.json").exists() else None)
        self.node_kind = self.node_kind or self.recorded_kind or "nspawn"
        if self.node_os not in (None, *base_image.OSES):
            raise TestbedError(f"--os {self.node_os}: use one of {', '.join(base_image.OSES)}")
        self.recorded_os = self._recorded().get("os", "debian12") if self.recorded_kind else None
        self.node_os = self.node_os or self.recorded_os or "debian12"
        index = 1 + int(hashlib.sha256(self.name.encode()).hexdigest(), 16) % 250 if self.name != "kiln" else 0
        self.subnet = f"10.213.{index}"
        self.bridge = f"kb-{self.name}"
        self.host_address = f"{self.subnet}.1"
        self.shared = self.state / "shared"
        self.proxy = AptProxy(self.state, APT_CACHE / self.name, self.host_address, PROXY_PORT)
        self.bmc = TestbedBmc(self.state, self.host_address, self.name)

    # --- layout ---
    @property
    def key(self) -> Path:
        return self.state / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.state / "known_hosts"

    @property
    def ssh_config(self) -> Path:
        return self.state / "ssh_config"

    def node_list(self, count: int) -> list[Node]:
        return [Node(name=f"{self.name}{i:02d}", address=f"{self.subnet}.{10 + i}", prefix=24,
                     role="controller" if i == 1 else "compute", dir=self.state / "nodes" / f"{self.name}{i:02d}")
                for i in range(1, count + 1)]

    def _recorded(self) -> dict:
        try:
            return json.loads((self.state / "testbed.json").read_text())
        except (OSError, ValueError):
            return {}

    def recorded_nodes(self) -> list[Node]:
        data = self._recorded()
        if not data:
            return [Node(p.name, "", 24, "compute", p) for p in sorted((self.state / "nodes").glob("*"))]
        return [Node(n["name"], n["address"], 24, n["role"], Path(n["dir"])) for n in data["nodes"]]

    def kind(self, base: Path | None = None, kind: str | None = None) -> NspawnNodes | VmNodes:
        """The node kind's driver; ``base`` is what new nodes are made from (a tree or a disk)."""
        if (kind or self.node_kind) == "vm":
            return VmNodes(self.name, base, self.bridge, self.shared, self.ssh_config)
        return NspawnNodes(self.name, base, self.bridge, f"{self.shared}:{SHARED_DIR}")

    # --- up ---
    def up(self, count: int = 3, inventory_dir: Path | None = None, images: tuple[str, ...] = (),
           fresh: bool = False) -> dict:
        """Bring up ``count`` nodes, as machines come back: a node that is running stays as it is, a
        node that is down (stopped, powered off, left by a crash) boots again from its own disk, a new
        node is made. ``fresh``: everything of the testbed removed first, every disk new.
        ``images``: names in kiln's image store; a node boots from the image built for one of its
        inventory groups (a compute node type's image on compute nodes, a slurm_controller image on
        the controller), the others from the bare base; a node whose image changes gets a new disk."""
        require_root()
        require_tools("debootstrap", "apt-cacher-ng", "ip", "ssh", "ssh-keygen", "unshare",
                      *(VM_TOOLS if self.node_kind == "vm" else ("systemd-nspawn", "nsenter")))
        if count < 1 or count > 200:
            raise TestbedError(f"--nodes {count}: give 1 to 200 nodes")
        started = time.monotonic()
        nodes = self.node_list(count)
        lowers = self._image_lowers(nodes, images)
        if self.recorded_kind not in (None, self.node_kind) or self.recorded_os not in (None, self.node_os):
            self.progress(f"testbed {self.name} was made of {self.recorded_kind} nodes running {self.recorded_os}; "
                          f"making it again of {self.node_kind} nodes running {self.node_os}")
            self.teardown(remove_state=False, kind=self.recorded_kind)
            fresh = True
        if not fresh and self._healthy(nodes, lowers):
            self._write_access(nodes, inventory_dir)
            try:
                self._wait_ssh(nodes, timeout=10)
                self._init_simulators([n for n in nodes if n.role == "compute" or len(nodes) == 1])
                self._bmc_up(nodes)
                self.progress(f"testbed {self.name} already up with {count} nodes")
                return self.status()
            except TestbedError as exc:
                self.progress(f"testbed {self.name} is up but unhealthy ({exc}); booting what is down")
        recorded = {n.name: n for n in self.recorded_nodes()} if not fresh else {}
        recorded_images = self._recorded_images()
        recorded_lowers = {n["name"]: n.get("lower") for n in self._recorded().get("nodes", [])}
        if not recorded:
            self.progress(f"clearing what an earlier run of testbed {self.name} left behind")
            self.teardown(remove_state=False)
        base = base_image.base_tree(self.node_os, self.progress)
        self.state.mkdir(parents=True, exist_ok=True)
        self.shared.mkdir(parents=True, exist_ok=True)
        if self.node_kind == "nspawn":
            self._raise_inotify_limit(count)
        self._bridge_up()
        self.proxy.start()
        self._keys()
        if self.node_kind == "vm":
            kind = self.kind(base_image.ensure_vm_disk(self.node_os, self.progress, self.proxy.url))
            kind.lower = {name: self._image_disk(image) for name, image in lowers.items()}
        else:
            kind = self.kind(base)
            kind.lower = {name: image.rootfs for name, image in lowers.items()}
        for gone in set(recorded) - {n.name for n in nodes}:
            kind.cleanup(recorded[gone])  # fewer nodes asked for than there were
        host_keys, booting, made = {}, [], []
        for node in nodes:
            image = lowers[node.name].name if node.name in lowers else None
            kept = (node.name in recorded and recorded_images.get(node.name) == image
                    and recorded_lowers.get(node.name) == kind.lower_of(node) and kind.has_disk(node))
            if kept and kind.running(node):
                host_keys[node.name] = self._host_key(node, reuse=True)
                self._finish(node, "running", "left as it was")
                continue
            if kept and kind.adopt(node):
                host_keys[node.name] = self._host_key(node, reuse=True)
                self._finish(node, "running", "running on; its new supervisor took it over")
                continue
            if kept:
                self._step(node, "reusing its disk")
                kind.release(node)  # a crash's or a power loss's leftovers; the disk stays
                host_keys[node.name] = self._host_key(node, reuse=True)
                kind.prepare(node, {})
            else:
                self._step(node, "making its disk" if self.node_kind == "vm" else "making its tree")
                kind.cleanup(node)
                host_keys[node.name] = self._host_key(node)
                kind.prepare(node, self._node_files(node, nodes, host_keys[node.name]))
                made.append(node)
            booting.append(node)
        self._record(nodes, lowers, kind)
        self._write_known_hosts(nodes, host_keys)
        self._write_access(nodes, inventory_dir)
        if booting:
            self.progress(f"booting {len(booting)} node(s): {', '.join(n.name for n in booting)}"
                          + (f" ({len(booting) - len(made)} from their own disks)" if len(booting) > len(made) else ""))
        for node in booting:
            self._step(node, "booting")
            kind.start(node)
        states = self._wait_all(kind, booting) if booting else {}
        self._wait_ssh(nodes)
        # Nodes booted from images hold their packages: nothing fans out to the proxy at their first deploy
        from_base = [n for n in made if n.name not in lowers]
        if from_base:
            self._warm_apt(from_base[0])
        # Every node booted, not only new ones: a run that crashed between making a disk and this step
        # left a node without simulated hardware (its health check would drain it). Idempotent: a node
        # with a state keeps it, and its injected faults.
        self._init_simulators([n for n in booting if n.role == "compute" or len(nodes) == 1])
        self._bmc_up(nodes)
        self.progress(f"testbed {self.name} up: {count} node(s) in {time.monotonic() - started:.1f} s "
                      f"({', '.join(f'{n}: {s}' for n, s in states.items()) or 'all were running'})")
        return self.status()

    def write_inventory(self, count: int, inventory_dir: Path) -> None:
        """The inventory ``up`` with ``count`` nodes will have, written before any node exists (to build
        the images its nodes then boot from)."""
        require_root()
        self.state.mkdir(parents=True, exist_ok=True)
        self._keys()
        self._write_access(self.node_list(count), inventory_dir)

    def _image_disk(self, image) -> Path:
        """A stored image's qcow2 disk, written first if the image has none (or an older kiln's)."""
        if "qcow2" not in image.formats:
            from kiln.image.outputs import write_qcow2
            self.progress(f"{image.name}: writing its qcow2 disk for the VMs")
            write_qcow2(image, self.proxy.url)
        return image.path / "image.qcow2"

    def _record(self, nodes: list[Node], lowers: dict, kind) -> None:
        self.recorded_kind, self.recorded_os = self.node_kind, self.node_os
        (self.state / "testbed.json").write_text(json.dumps({
            "name": self.name, "kind": self.node_kind, "os": self.node_os, "bridge": self.bridge, "subnet": self.subnet,
            "nodes": [{"name": n.name, "address": n.address, "role": n.role, "dir": str(n.dir),
                       "image": lowers[n.name].name if n.name in lowers else None, "lower": kind.lower_of(n)}
                      for n in nodes],
        }, indent=2))

    # --- one node, as a machine ---
    def stop(self, name: str) -> None:
        """Shut one node down cleanly; its disk stays (``start`` or ``up`` boots it again)."""
        node = self._require_node(name)
        kind = self.kind()
        kind.stop(node)
        kind.release(node)

    def power_loss(self, name: str) -> None:
        """The node and every process in it gone at once, as if its power failed; its disk stays."""
        self.kind().power_off(self._require_node(name))

    def start(self, name: str) -> dict:
        """Boot one stopped node from its own disk."""
        recorded = self.recorded_nodes()
        self._require_node(name)
        images = tuple({i for i in self._recorded_images().values() if i})
        return self.up(len(recorded), images=images)

    def _image_lowers(self, nodes: list[Node], images: tuple[str, ...]) -> dict:
        """Node name -> the stored image it boots from (kiln/image/store.py)."""
        from kiln.image.store import ImageNotFound, find
        groups = {"controller": {"slurm_controller", "slurm_dbd", "login"}, "compute": {"compute", "testbed_compute"}}
        out = {}
        for wanted in images:
            try:
                image = find(wanted)
            except ImageNotFound as exc:
                raise TestbedUnavailable(str(exc)) from exc
            target = image.manifest.get("target")
            matched = [n for n in nodes if target in groups[n.role] or (len(nodes) == 1 and target in groups["compute"])]
            if not matched:
                raise TestbedUnavailable(f"image {image.name} is for {target}, which no node of this testbed is in "
                                         "(its nodes are in slurm_controller, slurm_dbd, login and testbed_compute)")
            out.update({n.name: image for n in matched})
        return out

    def _recorded_images(self) -> dict[str, str | None]:
        return {n["name"]: n.get("image") for n in self._recorded().get("nodes", [])}

    def _healthy(self, nodes: list[Node], lowers: dict | None = None) -> bool:
        if [n.name for n in self.recorded_nodes()] != [n.name for n in nodes]:
            return False
        recorded = self._recorded_images()
        if lowers is not None and any(recorded.get(n.name) != (lowers[n.name].name if n.name in lowers else None)
                                      for n in nodes):
            return False
        kind = self.kind()
        return self.proxy.running() and link_exists(self.bridge) and all(kind.running(n) for n in nodes)

    def _raise_inotify_limit(self, count: int) -> None:
        """systemd in each node holds about six inotify instances; the kernel's default of 128 per user
        stalls boot at about 20 nodes (they stay 'initializing'). Raise it for the testbed's size and
        remember the old value so ``down`` puts it back."""
        path = Path(INOTIFY_INSTANCES)
        current = int(path.read_text())
        wanted = 64 + 16 * count
        if current >= wanted:
            return
        saved = self.state / "inotify-max-user-instances"
        if not saved.exists():
            saved.write_text(f"{current}\n")
        path.write_text(f"{wanted}\n")
        self.progress(f"raised fs.inotify.max_user_instances from {current} to {wanted} for {count} nodes")

    def _restore_inotify_limit(self) -> None:
        saved = self.state / "inotify-max-user-instances"
        if saved.exists():
            Path(INOTIFY_INSTANCES).write_text(saved.read_text())
            saved.unlink()

    def _bmc_up(self, nodes: list[Node]) -> None:
        """The nodes' BMC (kiln/testbed/bmc.py): a container's or a VM's power is the testbed's."""
        self.bmc.start([n.name for n in nodes])

    def _bridge_up(self) -> None:
        if not link_exists(self.bridge):
            run(["ip", "link", "add", self.bridge, "type", "bridge"])
        run(["ip", "addr", "replace", f"{self.host_address}/24", "dev", self.bridge])
        run(["ip", "link", "set", self.bridge, "up"])

    def _keys(self) -> None:
        if not self.key.exists():
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"kiln-testbed-{self.name}",
                 "-f", str(self.key)])

    def _host_key(self, node: Node, reuse: bool = False) -> tuple[str, str]:
        """The node's host key pair, made on the host before it first boots (``reuse``: the one it has)."""
        path = self.state / "hostkeys" / node.name
        if reuse and path.exists() and path.with_suffix(".pub").exists():
            return path.read_text(), path.with_suffix(".pub").read_text()
        path.parent.mkdir(parents=True, exist_ok=True)
        for p in (path, path.with_suffix(".pub")):
            p.unlink(missing_ok=True)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{node.name}", "-f", str(path)])
        return path.read_text(), path.with_suffix(".pub").read_text()

    def _node_files(self, node: Node, nodes: list[Node], host_key: tuple[str, str]) -> dict[str, tuple[str, int]]:
        return node_files(self, node, nodes, host_key)

    def _write_known_hosts(self, nodes: list[Node], host_keys: dict[str, tuple[str, str]]) -> None:
        lines = []
        for node in nodes:
            kind, blob = host_keys[node.name][1].split()[:2]
            lines.append(f"{node.name},{node.address} {kind} {blob}\n")
        self.known_hosts.write_text("".join(lines))

    def _write_access(self, nodes: list[Node], inventory_dir: Path | None) -> None:
        entries = []
        for node in nodes:
            entries.append(
                f"Host {node.name} {node.address}\n  HostName {node.address}\n  User root\n"
                f"  IdentityFile {self.key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {self.known_hosts}\n"
                "  StrictHostKeyChecking yes\n  ControlMaster auto\n"
                f"  ControlPath {self.state}/cm-%C\n  ControlPersist 120\n  ConnectTimeout 10\n  LogLevel ERROR\n")
        self.ssh_config.write_text("".join(entries))
        if inventory_dir is not None:
            write_inventory(inventory_dir, self, nodes)
            self.bmc.place_password(inventory_dir.parent / "secrets" / self.name)  # where kiln reads secrets

    def _wait_all(self, kind: NspawnNodes | VmNodes, nodes: list[Node]) -> dict[str, str]:
        states: dict[str, str] = {}
        errors = []
        # VMs under software emulation share the host's cores: about a minute each, booting together
        timeout = 300 + 120 * len(nodes) if self.node_kind == "vm" else 120 + 3 * len(nodes)
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(nodes))) as pool:
            futures = {pool.submit(kind.wait_ready, n, timeout): n for n in nodes}
            for future in concurrent.futures.as_completed(futures):
                node = futures[future]
                try:
                    states[node.name] = future.result()
                    self.progress(f"  {node.name} {node.address}: {states[node.name]}")
                    self._step(node, "waiting for ssh")
                except TestbedError as exc:
                    errors.append(str(exc))
                    self._finish(node, "failed", str(exc))
        if errors:
            raise TestbedError("\n".join(errors))
        return dict(sorted(states.items()))

    def _wait_ssh(self, nodes: list[Node], timeout: float = 60) -> None:
        for node in nodes:
            deadline = time.monotonic() + timeout
            while True:
                # a new connection each time: a shared one can outlive the node it was made to. One try that
                # takes too long (a VM under software emulation on a busy host) is one failed try, not the end.
                try:
                    result = run(["ssh", "-F", str(self.ssh_config), "-o", "ControlMaster=no", "-o", "ControlPath=none",
                                  node.name, "true"], check=False, timeout=15)
                    if result.returncode == 0:
                        self._finish(node, "running")
                        break
                    why = result.stderr.strip()
                except TestbedError as exc:
                    why = str(exc)
                if time.monotonic() > deadline:
                    raise TestbedError(f"node {node.name}: ssh does not answer: {why}")
                time.sleep(0.3)

    def _step(self, node: Node, what: str) -> None:
        if self.events is not None:
            self.events.step(node.name, what)

    def _finish(self, node: Node, outcome: str, detail: str = "") -> None:
        if self.events is not None and node.name not in self.events.done:
            self.events.finish(node.name, outcome, detail)

    def _init_simulators(self, nodes: list[Node]) -> None:
        if not nodes:
            return
        if not simulate.available():
            self.progress("tool simulators not found (kiln/testbed/simulators): GPU checks will see no nvidia-smi")
            return
        command = simulate.init_command(GPUS_PER_NODE, SIM_GPU_MODEL, upstream(VERSIONS_BY_OS[self.node_os]["nvidia_driver"]), SIM_NVLINKS,
                                        SIM_HCAS, SIM_RATE)
        for node in nodes:
            self.ssh(node.name, command)

    def inject(self, node: str, fault: str, gpu: int = 0, at_boot: bool = False, persistent: bool = False,
               cpu_percent: int | None = None) -> None:
        """Break a compute node's simulated hardware (or unmount its /scratch) on purpose, now or at
        its next boot (a node that comes back broken from a patch's reboot). A fault is transient (a GPU
        reset or a reboot clears it, as on real hardware) unless ``persistent``. ``cpu-slow`` is no
        simulator's: every process of the node is held to ``cpu_percent`` (default a tenth) of one CPU through
        the host's cpu cgroup (kiln/testbed/cpu_limit.py) until ``clear``."""
        if fault == cpu_limit.FAULT:
            try:
                self.kind().limit_cpu(self._require_node(node), cpu_percent or cpu_limit.SLOW_PERCENT)
            except cpu_limit.CpuLimitError as exc:
                raise TestbedError(f"{node}: {exc}") from exc
            return
        if fault not in simulate.FAULTS:
            raise TestbedError(f"unknown fault {fault!r}: use one of {', '.join((cpu_limit.FAULT, *simulate.FAULTS))}")
        self._require_node(node)
        self.ssh(node, ["kiln-sim", "inject", fault, "--gpu", str(gpu)] + (["--at-boot"] if at_boot else [])
                 + (["--persistent"] if persistent else []))

    def clear(self, node: str) -> None:
        """Every injected fault of the node undone: healthy simulated hardware, mounts back, its CPU whole."""
        self.kind().limit_cpu(self._require_node(node), None)
        self.ssh(node, ["kiln-sim", "clear"])

    def _require_node(self, node: str) -> Node:
        for n in self.recorded_nodes():
            if n.name == node:
                return n
        raise TestbedUnavailable(f"no node {node!r} in testbed {self.name}")

    def _warm_apt(self, node: Node) -> None:
        """Fetch the package indexes once, through one node, before anything fans out.

        Many nodes fetching the same index files through a cold proxy at the same moment is where
        concurrent apt traffic stalled; with the indexes cached (and fresh), they are served at once.
        """
        started = time.monotonic()
        for attempt in range(3):
            result = self.ssh(node.name, ["apt-get", "update", "-q"], check=False, timeout=300)
            if result.returncode == 0:
                self.progress(f"apt indexes cached by the proxy in {time.monotonic() - started:.1f} s")
                return
        raise TestbedError(f"node {node.name}: apt-get update through the proxy {self.proxy.url} failed: "
                           f"{result.stderr.strip()[-400:]}; see {self.proxy.dir / 'log'}")

    # --- use ---
    def ssh_command(self, node: str, command: list[str] | None = None) -> list[str]:
        return ["ssh", "-F", str(self.ssh_config), node, *(command or [])]

    def ssh(self, node: str, command: list[str], check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        return run(self.ssh_command(node, command), check=check, timeout=timeout)

    def status(self) -> dict:
        nodes = self.recorded_nodes()
        kind = self.kind()
        out = []
        for node in nodes:
            state = kind.state(node)
            if state == "running":
                # 30 s: a VM under software emulation on a busy host can take over 10 s to answer over ssh
                result = kind.exec(node, ["systemctl", "is-system-running"], timeout=30)
                state = result.stdout.strip() or "no answer"
            out.append({"name": node.name, "address": node.address, "role": node.role, "state": state})
        return {"name": self.name, "os": self.node_os, "state_dir": str(self.state), "bridge": self.bridge,
                "bridge_up": link_exists(self.bridge), "apt_proxy": self.proxy.url if self.proxy.running() else None,
                "ssh_config": str(self.ssh_config), "shared_dir": SHARED_DIR, "nodes": out}

    # --- down ---
    def teardown(self, remove_state: bool = True, kind: str | None = None) -> None:
        """Stop and remove everything this testbed made. Safe on a half-made or crashed testbed."""
        driver = self.kind(kind=kind)
        nodes = self.recorded_nodes()
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(16, len(nodes)))) as pool:
            list(pool.map(driver.stop, nodes))
        for node in nodes:
            driver.cleanup(node)
        for pid in stray_processes(self.state):  # VMs of a run whose records were lost
            kill_and_wait(pid, signal.SIGKILL, timeout=5)
        for tap in Path("/sys/class/net").glob("kt-*"):
            if (tap / "brport").exists() and (tap / "master").resolve().name == self.bridge:
                run(["ip", "link", "delete", tap.name], check=False)
        for control in self.state.glob("cm-*"):
            run(["ssh", "-F", str(self.ssh_config), "-O", "exit", "-o", f"ControlPath={control}", "x"],
                check=False, timeout=10)
            control.unlink(missing_ok=True)
        driver.remove_testbed_cgroups()
        self.proxy.stop()
        self.bmc.stop()
        if remove_state:
            self._restore_inotify_limit()
        if link_exists(self.bridge):
            run(["ip", "link", "delete", self.bridge], check=False)
        leftovers = mounts_under(self.state)
        if leftovers:
            raise TestbedError(f"mounts left under {self.state}: {', '.join(leftovers)}")
        if remove_state:
            shutil.rmtree(self.state, ignore_errors=True)
        else:
            shutil.rmtree(self.state / "nodes", ignore_errors=True)

    def down(self, wipe: bool = False, inventory_dir: Path | None = None) -> None:
        require_root()
        self.teardown(remove_state=True)
        if inventory_dir is not None and (inventory_dir / ".kiln-testbed").exists():
            shutil.rmtree(inventory_dir, ignore_errors=True)
        if wipe:
            shutil.rmtree(APT_CACHE / self.name, ignore_errors=True)
            shutil.rmtree(base_image.CACHE, ignore_errors=True)
            shutil.rmtree(base_image.BASES_CACHE, ignore_errors=True)
