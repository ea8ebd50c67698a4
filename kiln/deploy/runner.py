"""Run roles on the inventory's hosts through pyinfra's API, in parallel, and report per host.

One run: connect to the selected hosts (strict host keys), check each node's OS against the
inventory (an unsupported or different OS stops the whole run before any change), prepare every
host's operations in its own greenlet, run them with no barrier between hosts, then run the
roles' ``after_run`` steps (``scontrol reconfigure`` once every node has the new slurm.conf), and
collect what changed or failed on each host. ``dry_run`` stops after preparing and reports what
would change, with diffs of managed files (secrets masked).

The caller must have monkey-patched the process with gevent before importing this module (the
``kiln`` command does), or hosts are handled one after another.
"""

from __future__ import annotations

import difflib
import logging
import time
from dataclasses import dataclass, field
from typing import Callable

import gevent
import gevent.pool
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all, disconnect_all
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.operations import run_ops
from pyinfra.context import ctx_config, ctx_host, ctx_inventory, ctx_state
from pyinfra.facts.files import FileContents
from pyinfra.facts.server import LinuxDistribution

import roles
from kiln.deploy import firewall_confirm, plan
from kiln.deploy.connections import ConnectErrors, bound_connection, quiet_idle_connections, reachable
from kiln.deploy.connections import close as close_connections
from kiln.deploy.events import OperationEvents
from kiln.inventory.model import Cluster, Secrets
from roles.context import NodeContext
from roles.facts import IsContainer
from roles.platform import UnsupportedPlatform, platform_for
from roles.operations import take_snapshot

OUTPUT_LINES = 15


@dataclass
class HostResult:
    name: str
    status: str = "pending"    # changed | no change | failed | unreachable | would change (dry run)
    ops: int = 0
    changed: list[str] = field(default_factory=list)
    install_changed: list[str] = field(default_factory=list)  # of ``changed``, those of install stages
    failed_op: str | None = None
    error: str | None = None
    next_step: str | None = None
    diffs: list[str] = field(default_factory=list)
    reboot_required: list[str] = field(default_factory=list)  # why, per role (e.g. a new driver)

    def as_dict(self) -> dict:
        return {"host": self.name, "status": self.status, "operations": self.ops, "changed": self.changed,
                "install_changed": self.install_changed,
                "failed_operation": self.failed_op, "error": self.error, "next_step": self.next_step,
                "reboot_required": self.reboot_required, **({"diffs": self.diffs} if self.diffs else {})}


@dataclass
class DeployResult:
    roles: list[str]
    dry_run: bool
    hosts: list[HostResult]
    seconds: float
    stopped: str | None = None   # why the run stopped before changing anything

    @property
    def failed(self) -> list[HostResult]:
        return [h for h in self.hosts if h.status in ("failed", "unreachable")]

    def as_dict(self) -> dict:
        return {"roles": self.roles, "dry_run": self.dry_run, "seconds": round(self.seconds, 2),
                "stopped": self.stopped, "hosts": [h.as_dict() for h in self.hosts],
                "summary": {s: sum(h.status == s for h in self.hosts)
                            for s in ("changed", "no change", "would change", "failed", "unreachable")}}


def _quiet_pyinfra() -> None:
    # pyinfra logs command output and file diffs; kiln reports through its own summary (masked),
    # so nothing of pyinfra's reaches the terminal or a log.
    log = logging.getLogger("pyinfra")
    log.handlers[:] = [logging.NullHandler()]
    log.propagate = False


def _tail(lines: list[str], secrets: Secrets) -> str:
    return secrets.mask("\n".join(lines[-OUTPUT_LINES:]))


class Deploy:
    def __init__(self, cluster: Cluster, secrets: Secrets, hosts: list[str], role_names: list[str] | None,
                 dry_run: bool = False, progress: Callable[[str], None] = lambda line: None,
                 stages: tuple[str, ...] = roles.STAGES, targets: dict[str, str] | None = None,
                 events=None, log=None, forks: int = 0):
        """``stages``: the role stages to run (an image build runs ``("install",)``); ``targets``:
        where to reach a host when not by its inventory connection (an image build's ``@chroot/DIR``);
        ``events``: told each host's operations as they start and end (kiln.cli.progress.Progress);
        ``log``: the run's log (kiln.runlog.RunLog); ``forks``: hosts worked on at once (0: all)."""
        self.cluster, self.secrets, self.dry_run, self.progress = cluster, secrets, dry_run, progress
        self.events, self.log = events, log
        self.forks = forks if forks > 0 else max(1, len(hosts))
        self.stages = stages
        self.targets = targets or {}
        self._nodes = {self.targets.get(n, n): n for n in hosts}
        self.host_names = hosts
        self.role_names = role_names
        self.results = {name: HostResult(name) for name in hosts}
        self.contexts: dict[str, NodeContext] = {}
        self._install_ops: dict[str, int] = {}  # host -> how many of its operations are install stages'

    def node(self, host) -> str:
        """The inventory name of pyinfra's ``host``."""
        return self._nodes[host.name]

    def roles_for(self, name: str) -> list[str]:
        return roles.for_host(self.cluster.hosts[name].roles, self.role_names)

    # --- the run ---
    def run(self) -> DeployResult:
        """Deploy: one wave of every host, or, with more hosts than ``forks``, waves of ``forks`` hosts
        (connected, worked and disconnected in turn, so connections, open files and memory stay bounded
        at any cluster size). Waves read every host's OS first, so a mismatch anywhere still stops the
        run before any change; compute hosts come first and the others (the controller) last, so the
        controller's end-of-run step (``scontrol reconfigure``) sees every node's files."""
        start = time.monotonic()
        _quiet_pyinfra()
        quiet_idle_connections()
        waves = self.waves()
        if len(waves) == 1:
            return self._result(start, self._run_wave(waves[0]))
        self.progress(f"{len(self.host_names)} hosts in {len(waves)} waves of at most {self.forks} (--forks)")
        for number, wave in enumerate(waves, 1):
            stopped = self._run_wave(wave, f"reading the OS, wave {number} of {len(waves)}", os_only=True)
            if stopped:
                for r in self.results.values():
                    if r.status == "pending":
                        r.status = "no change"
                return self._result(start, stopped)
        for number, wave in enumerate(waves, 1):
            left = [n for n in wave if self.results[n].status == "pending" and n in self.contexts]
            if left:
                self._run_wave(left, f"wave {number} of {len(waves)}", os_known=True)
        return self._result(start)

    def waves(self) -> list[list[str]]:
        """The hosts in waves of at most ``forks``: compute hosts first, the others last."""
        if len(self.host_names) <= self.forks:
            return [list(self.host_names)]
        compute = {h.name for h in self.cluster.compute}
        ordered = sorted(self.host_names, key=lambda n: n not in compute)  # stable: inventory order kept
        return [ordered[i:i + self.forks] for i in range(0, len(ordered), self.forks)]

    def _run_wave(self, names: list[str], label: str = "", os_only: bool = False, os_known: bool = False) -> str | None:
        """Connect to ``names``, read their OS (unless ``os_known``: an earlier pass did), and (unless
        ``os_only``) prepare, snapshot and run; disconnect. Returns why the run stopped, or None."""
        inventory = Inventory(([(self.targets[n], {}) if n in self.targets else (n, dict(self.cluster.hosts[n].connection))
                                for n in names], {}))
        config = Config(CONNECT_TIMEOUT=15, PARALLEL=min(self.forks, max(1, len(names))), FAIL_PERCENT=None)
        # Operations are evaluated when they run (after the node snapshot), never while prepared.
        state = State(inventory, config, check_for_changes=False)
        ctx_state.set(state)
        ctx_inventory.set(inventory)
        connect_errors = ConnectErrors()
        state.add_callback_handler(connect_errors)
        self.progress(f"connecting to {len(names)} host(s)" + (f" ({label})" if label else ""))
        try:
            connect_all(state)
        except PyinfraError:
            pass  # every host failed to connect: each is reported unreachable below, with why
        self._mark(f"connected to {len(state.active_hosts)} of {len(names)} host(s)")
        for host in inventory:
            if host not in state.active_hosts:
                r = self.results[self.node(host)]
                r.status, r.error = "unreachable", connect_errors.errors.get(host.name, "could not connect")
                r.next_step = ("check that the host is up and reachable over ssh and that its host key is in "
                               "the inventory's known_hosts file (kiln never accepts an unknown key)")
        active = [h for h in inventory if h in state.active_hosts]
        for host in active:
            bound_connection(host)
        try:
            if not os_known:
                stopped = self._preflight(state, active)
                self._mark("read each node's OS")
                if stopped or os_only:
                    return stopped
            active = [h for h in active if h in state.active_hosts]  # a node lost while read is out
            self._prepare(state, active)
            self._mark("prepared each node's operations")
            self._snapshot(state, [h for h in active if h in state.active_hosts])
            self._mark("read each node's state")
            if self.dry_run:
                self._dry_run_report(state, active)
                return None
            self.progress("running" + (f" ({label})" if label else ""))
            totals = {h.name: len(h.op_hash_order) for h in active}
            events = OperationEvents(self, totals)
            state.add_callback_handler(events)
            try:
                run_ops(state, no_wait=True)
            except PyinfraError:
                pass  # per-host results below say which hosts failed and why
            events.wait()
            if "configure" in self.stages:
                self._after_run(state, active)
                self._confirm_firewalls(state, active)
            self._collect(state, active)
            self._left_out(inventory)
            return None
        finally:
            disconnect_all(state)
            close_connections(inventory)

    def _mark(self, text: str) -> None:
        """A step before the operations run, in the run's log only: where the time before 'running' goes."""
        if self.log:
            self.log.event(None, text)

    def _left_out(self, inventory) -> None:
        """A host pyinfra dropped on its own (a fact read on a connection that died marks it failed
        without raising) has no result yet: it is reported, lost or failed, never left pending."""
        for host in inventory:
            r = self.results[self.node(host)]
            if r.status != "pending":
                continue
            r.status, r.failed_op = "failed", "(before its operations ran)"
            r.error = "the host was dropped from the run before its operations ran"
            r.next_step = f"check the node, then run kiln deploy --limit {self.node(host)} again"
            self._if_lost(host, r)

    def _result(self, start: float, stopped: str | None = None) -> DeployResult:
        return DeployResult(sorted({r for n in self.host_names for r in self.roles_for(n)}, key=roles.ORDER.index),
                            self.dry_run, list(self.results.values()), time.monotonic() - start, stopped)

    def _spawn(self, state: State, hosts: list, work: Callable) -> dict:
        """Run ``work(host)`` in one greenlet per host with pyinfra's context set; exceptions returned."""
        def one(host):
            try:
                with ctx_config.use(state.config.copy()), ctx_host.use(host):
                    return work(host)
            except Exception as e:  # reported per host
                return e
        pool = gevent.pool.Pool(self.forks)
        greenlets = {host: pool.spawn(one, host) for host in hosts}
        gevent.joinall(list(greenlets.values()))
        return {host: g.value for host, g in greenlets.items()}

    def _preflight(self, state: State, hosts: list) -> str | None:
        """Read each node's OS; any mismatch stops the run here, before any operation exists."""
        def check(host):
            distro = host.get_fact(LinuxDistribution)
            platform = platform_for(self.cluster.hosts[self.node(host)].os, distro)
            return platform, host.get_fact(IsContainer)
        bad = []
        for host, value in self._spawn(state, hosts, check).items():
            r = self.results[self.node(host)]
            if isinstance(value, Exception):
                r.status, r.error = "failed", str(value) or type(value).__name__
                r.next_step = ("fix kiln_os in the inventory or the node's OS, then run kiln deploy again"
                               if isinstance(value, UnsupportedPlatform) else "check the node, then run kiln deploy again")
                # a node that died while asked reads as "an unknown OS": it is lost, not mismatched
                if not isinstance(value, UnsupportedPlatform) or not reachable(host):
                    # a node that failed to answer is left out; the others go on (an OS mismatch stops all)
                    r.failed_op = "(reading the node's OS)"
                    self._if_lost(host, r)
                    state.active_hosts.discard(host)
                    state.failed_hosts.add(host)
                    continue
                bad.append(self.node(host))
                continue
            platform, in_container = value
            self.contexts[self.node(host)] = NodeContext(self.cluster, self.cluster.hosts[self.node(host)], platform,
                                                   self.secrets, in_container, configures="configure" in self.stages)
        if bad:
            for name, r in self.results.items():
                if r.status == "pending":
                    r.status = "no change"
            return f"no host was changed: {len(bad)} host(s) failed the OS check ({', '.join(bad)})"
        return None

    def _prepare(self, state: State, hosts: list) -> None:
        def prepare(host):
            ctx, names = self.contexts[self.node(host)], self.roles_for(self.node(host))
            if "install" in self.stages:
                roles.prepare(ctx, names, ("install",))
            self._install_ops[self.node(host)] = len(host.op_hash_order)
            roles.prepare(ctx, names, tuple(s for s in self.stages if s != "install"))
        for host, value in self._spawn(state, hosts, prepare).items():
            if isinstance(value, Exception):
                r = self.results[self.node(host)]
                r.status, r.error = "failed", self.secrets.mask(f"{type(value).__name__}: {value}")
                r.next_step = "fix the cause shown, then run kiln deploy --limit " + self.node(host)
                state.active_hosts.discard(host)
                state.failed_hosts.add(host)

    def _snapshot(self, state: State, hosts: list) -> None:
        """One round trip per node: everything its prepared operations compare against."""
        def take(host):
            ctx = self.contexts[self.node(host)]
            ctx.snapshot = take_snapshot(ctx)
        for host, value in self._spawn(state, hosts, take).items():
            if isinstance(value, Exception):
                r = self.results[self.node(host)]
                r.status, r.error = "failed", f"could not read the node's state: {value}"
                r.next_step = "check the node (disk full? /etc/passwd readable?), then run kiln deploy again"
                r.failed_op = "(reading the node's state)"
                self._if_lost(host, r)
                state.active_hosts.discard(host)
                state.failed_hosts.add(host)

    def _ops(self, state: State, host) -> list[tuple[str, object, object]]:
        """(name, global arguments, OperationMeta) of each operation of ``host``, in order."""
        return [(name, data.global_arguments, data.operation_meta) for name, data in plan.op_data(state, host)]

    def _dry_run_report(self, state: State, hosts: list) -> None:
        def evaluate(host):
            return [name for name, would in plan.evaluate(state, host) if would]
        for host, value in self._spawn(state, [h for h in hosts if h in state.active_hosts], evaluate).items():
            r = self.results[self.node(host)]
            if isinstance(value, Exception):
                r.status, r.error = "failed", self.secrets.mask(f"{type(value).__name__}: {value}")
                continue
            r.ops, r.changed = len(plan.op_data(state, host)), value
            ctx = self.contexts[self.node(host)]
            with ctx_host.use(host):
                for f in ctx.files:
                    if not f.op._maybe_is_change:
                        continue
                    if f.secret:
                        r.diffs.append(f"--- {f.path}\n+++ {f.path}\n(secret content changed; not shown)")
                        continue
                    old = host.get_fact(FileContents, path=f.path) or []
                    new = f.content.decode(errors="replace").splitlines()
                    diff = "\n".join(difflib.unified_diff(old, new, f.path, f.path, lineterm=""))
                    r.diffs.append(self.secrets.mask(diff))
            r.status = "would change" if r.changed else "no change"

    def _after_run(self, state: State, hosts: list) -> None:
        ok = [h for h in hosts if self._host_ok(state, h)]
        config_changed = any(ctx.changed("slurm_conf") for ctx in self.contexts.values())

        def after(host):
            for role in self.roles_for(self.node(host)):
                step = getattr(roles.module(role), "after_run", None)
                if step:
                    step(self.contexts[self.node(host)], config_changed)
        for host, value in self._spawn(state, ok, after).items():
            if isinstance(value, Exception):
                r = self.results[self.node(host)]
                r.status, r.error = "failed", self.secrets.mask(str(value))

    def _confirm_firewalls(self, state: State, hosts: list) -> None:
        """Each host whose firewall changed confirms it over a new SSH connection (or undoes it itself)."""
        seconds = self.cluster.setting("firewall").confirm_seconds
        changed = [h for h in hosts if self._host_ok(state, h) and self.contexts[self.node(h)].changed("firewall_applied")]
        found = self._spawn(state, changed, lambda h: firewall_confirm.confirm(self.cluster.hosts[self.node(h)], seconds))
        for host, why in found.items():
            if why is not None:
                r = self.results[self.node(host)]
                r.status, r.failed_op, r.error = "failed", firewall_confirm.OP, self.secrets.mask(str(why))
                r.next_step = firewall_confirm.NEXT_STEP.format(node=self.node(host))

    def _host_ok(self, state: State, host) -> bool:
        return all(meta.is_complete() and meta.did_succeed() for _, _, meta in self._ops(state, host))

    def _collect(self, state: State, hosts: list) -> None:
        for host in hosts:
            r = self.results[self.node(host)]
            if r.status == "failed":
                continue
            for index, (name, args, meta) in enumerate(self._ops(state, host)):
                r.ops += 1
                if not meta.is_complete():
                    continue
                if not meta.did_succeed():
                    r.status, r.failed_op = "failed", name
                    output = meta._combined_output
                    lines = [line.line for line in output] if output is not None else []
                    r.error = _tail(lines, self.secrets) or "the operation failed without output"
                    r.next_step = f"fix the cause shown, then run kiln deploy --limit {self.node(host)}"
                    self._if_lost(host, r)
                    break
                if meta.did_change():
                    r.changed.append(name)
                    if index < self._install_ops.get(self.node(host), 0):
                        r.install_changed.append(name)
            ctx = self.contexts.get(self.node(host))
            if ctx is not None:
                r.reboot_required = roles.notices(ctx, self.roles_for(self.node(host)))
            if r.status == "pending":
                incomplete = [n for n, _, m in self._ops(state, host) if not m.is_complete()]
                if incomplete:
                    r.status, r.failed_op = "failed", incomplete[0]
                    r.error = "the run stopped before this operation"
                    r.next_step = f"run kiln deploy --limit {self.node(host)} again"
                    self._if_lost(host, r)
                else:
                    r.status = "changed" if r.changed else "no change"


    def _if_lost(self, host, r: HostResult) -> None:
        """A host whose failure came with its connection gone is ``unreachable`` (lost while in
        ``failed_op``), not an operation that failed: the node went away (power, network, a crash)."""
        if reachable(host):
            return
        r.status = "unreachable"
        r.error = (f"the connection to {self.node(host)} was lost during {r.failed_op!r} and the node does not "
                   f"answer on its ssh port; what the node printed last:\n{r.error}")
        r.next_step = (f"bring {self.node(host)} back (power, network), then run kiln deploy --limit "
                       f"{self.node(host)}: the run repairs an interrupted package install")
