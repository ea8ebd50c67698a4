"""Run kiln's check suites on inventory hosts over SSH: pytest drives, testinfra connects.

Every host is reached with ssh and kiln's own options on its command line (``ssh_options``: strict host
key checking, the inventory's known_hosts, batch mode, a ControlMaster), which win over any ssh_config;
the site's ``kiln_ssh_config_file`` is honoured as kiln deploy honours it, for everything else. No
inventory value is ever written into an ssh_config as text: each is one quoted word of ssh's command
line. An unknown or changed host key is refused.
All hosts are checked at once (a thread per host, testinfra's ssh backend), then pytest reports one test
per host and suite (JUnit with ``--junitxml``). Checks that need several nodes (the same data on every
node's shared storage, the same kernel, bandwidth between nodes) are settled here from those outputs.
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import tempfile
import time
import uuid
from importlib.resources import files
from pathlib import Path

import pytest
from testinfra.backend.ssh import SshBackend

from checks.isolation import account_command, no_rule
from checks.node import C_LOCALE_SH, Node, Result
from checks.suites import run_suites, suite_commands
from checks.verdict import Verdict, fail, ok
from kiln.check.audit_trail import audit_trail
from kiln.check.bandwidth import measure_pair, ring_phases
from kiln.check.expectations import node_expectations
from kiln.check.shared_storage import SharedStorage
from kiln.check.workload import baseline_path, workload_verdicts
from kiln.inventory.model import Cluster, Host
from kiln.log_host import log_host
from kiln.shell import quote
from kiln.ssh import KEX_FIRST, ssh_command, ssh_options  # noqa: F401 (this module's callers)

CHECKS_DIR = Path(str(files("checks")))


class KilnSsh(SshBackend):
    """testinfra's ssh backend with kiln's argv (``ssh_command``): every word quoted, the destination
    after ``--``."""

    def __init__(self, argv: list[str]):
        self.argv = argv[:-1]  # the command comes per run
        super().__init__("ssh://node", controlpersist=0)

    def _build_ssh_command(self, command: str) -> tuple[list[str], list[str]]:
        return ["%s"] * (len(self.argv) + 1), [*self.argv, command]


MARK = "@@kiln-"
CUT_SHORT = "the batched run was cut short"
# On each shared filesystem: the token of the last kiln check that wrote it (one small file, kept)


def run_batch(node: Node, commands: list[str]) -> dict[str, Result]:
    """Run ``commands`` in one SSH round trip; each keeps its own exit code, stdout and stderr.

    The batch is one ``sh`` (whatever the login shell is); each command runs in a subshell of it (a fork,
    no exec; on lines of its own, so a trailing comment cannot swallow the parenthesis) with its stderr
    in a file, and one ``grep`` prints every stderr file at the end, each line prefixed with its
    command's number. Commands run in the login directory, as they would one by one."""
    parts = [C_LOCALE_SH + 't=$(mktemp -d) || exit 255']
    for i, command in enumerate(commands):
        parts.append(f"echo '{MARK}out {i}'; (\n{command}\n) 2>\"$t/{i}\" </dev/null; "
                     f"printf '\\n{MARK}rc {i} %s\\n' $?")
    parts.append(f"echo '{MARK}err'; cd \"$t\" && grep -a -H '' {' '.join(str(i) for i in range(len(commands)))}; "
                 "cd / && rm -rf \"$t\"")
    out = node.run(f"sh -c {quote(chr(10).join(parts))}")
    text, results = out.stdout, {}
    # the last marker line is kiln's own: a command's stdout comes before it, and grep prefixes every
    # stderr line after it with "N:"
    cut = text.rfind(f"\n{MARK}err\n")
    stdout_part, err_part = (text[:cut + 1], text[cut + len(MARK) + 5:]) if cut >= 0 else (text, "")
    errors: dict[str, list[str]] = {}
    for line in err_part.splitlines():
        number, _, rest = line.partition(":")
        errors.setdefault(number, []).append(rest)
    for i, command in enumerate(commands):
        try:
            body = stdout_part.split(f"{MARK}out {i}\n", 1)[1]
            stdout, rest = body.split(f"\n{MARK}rc {i} ", 1)
            rc = int(rest.split("\n", 1)[0])
        except (IndexError, ValueError):
            results[command] = Result(255, "", f"{CUT_SHORT}: {out.stderr.strip()[:200]}")
            continue
        err = errors.get(str(i))
        results[command] = Result(rc, stdout, "\n".join(err) + "\n" if err else "")
    return results


def batched_suites(node: Node, name: str, expect: dict, suites: list[str], rounds: int = 8,
                   cache: dict[str, Result] | None = None, extra: tuple[str, ...] = ()) -> list[Verdict]:
    """The suites' verdicts with their commands fetched in one SSH round trip instead of one each.

    The first round trip fetches every command the suites declare (``suite_commands``); it is also the
    connection probe. Then the suites run against those outputs; a command they ask for that was not
    fetched (a fallback, such as an older driver's field name) gets an empty answer and is fetched, with
    all the others that round asked for, in one more batch. Once a round asks for nothing new, its
    verdicts are the answer: every one of them came from real output. ``cache`` (filled here) keeps the
    outputs for checks across nodes; ``extra`` commands (theirs) ride along in the first batch."""
    cache = {} if cache is None else cache
    missing: list[str] = [c for c in suite_commands(expect, suites) + list(extra) if c not in cache]
    for _ in range(rounds):
        if missing:
            batch = run_batch(node, missing)
            if all(r.rc == 255 and r.stderr.startswith(CUT_SHORT) for r in batch.values()):
                # ssh itself failed (the first round is also the connection probe): no round more
                reason = next(iter(batch.values())).stderr[len(CUT_SHORT):].strip(": ")
                return [Verdict("NODE_UNREACHABLE", "fail", f"ssh failed: {reason or 'no answer'}: check the node "
                                "is up and its host key is in the inventory's known_hosts", "ssh")]
            cache.update(batch)
        missing = []

        def run(command: str) -> Result:
            if command in cache:
                return cache[command]
            if command not in missing:
                missing.append(command)
            return Result(0, "", "")
        verdicts = run_suites(Node(name, run), expect, suites)
        if not missing:
            return verdicts
    return run_suites(node, expect, suites)  # a suite that keeps asking for new commands: one at a time


def kernel_outliers(kernels: dict[str, str]) -> dict[str, Verdict]:
    """Node -> verdict on whether it runs the kernel most nodes run."""
    counts: dict[str, int] = {}
    for k in kernels.values():
        counts[k] = counts.get(k, 0) + 1
    if not counts:
        return {}
    common = max(counts, key=lambda k: (counts[k], k))
    return {n: ok("SYSTEM_KERNEL_SAME", f"kernel {k}, as on {counts[k]} of {len(kernels)} nodes") if k == common else
            fail("SYSTEM_KERNEL_SAME", f"kernel {k}, but {counts[common]} of {len(kernels)} nodes run {common}: "
                 "boot the node into the cluster's kernel (or roll the new one out with kiln patch)")
            for n, k in kernels.items()}


def _sweep_stale(mine: Path) -> None:
    """Remove what killed kiln processes left in the temporary directory: a directory whose process is
    gone (or, without a pid file, older than an hour)."""
    for d in mine.parent.glob("kiln-check-*"):
        if d == mine:
            continue
        try:
            pid = int((d / "pid").read_text())
            stale = not Path(f"/proc/{pid}").exists()
        except (OSError, ValueError):
            try:
                stale = time.time() - d.stat().st_mtime > 3600
            except OSError:
                continue
        if stale:
            shutil.rmtree(d, ignore_errors=True)


class RemoteCheck(SharedStorage):
    """Holds the verdicts of a run; pytest reads them through the ``kiln_check`` fixture."""

    def __init__(self, cluster: Cluster, hosts: list[Host], suites: list[str], progress=lambda line: None,
                 events=None, log=None, forks: int = 64):
        """``events``: told each host's start and verdict (kiln.cli.progress.Progress); ``log``: the
        run's log (kiln.runlog.RunLog); ``forks``: hosts checked at once."""
        self.cluster, self.hosts, self.suites, self.progress = cluster, hosts, suites, progress
        self.events, self.log, self.forks = events, log, max(1, forks)
        self.results: dict[str, list[Verdict]] = {}
        self.token = f"kiln-{uuid.uuid4().hex}"
        self.shared = self._shared_mounts() if "storage" in suites else {}
        self.outputs: dict[str, dict[str, Result]] = {}  # node -> command -> what it printed
        self.seconds: dict[str, float] = {}
        self.tmp = Path(tempfile.mkdtemp(prefix="kiln-check-"))
        (self.tmp / "pid").write_text(f"{os.getpid()}\n")
        _sweep_stale(self.tmp)
        (self.tmp / "cm").mkdir()

    def close(self) -> None:
        """Remove the control sockets' directory (their masters exit 15 s after last use)."""
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> "RemoteCheck":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def node(self, host: Host) -> Node:
        backend = KilnSsh(ssh_command(host, self.tmp / "cm", ""))

        def run(command: str) -> Result:
            try:
                out = backend.run(C_LOCALE_SH + command)
                return Result(out.rc, out.stdout, out.stderr)
            except RuntimeError as e:  # testinfra raises on exit 255 (ssh's own failures, or the tool's 255)
                out = e.args[0] if e.args else None
                return Result(255, getattr(out, "stdout", ""), getattr(out, "stderr", str(e)))
        return Node(host.name, run)

    def _check_host(self, host: Host) -> list[Verdict]:
        start = time.monotonic()
        if self.events:
            self.events.step(host.name, f"checks: {', '.join(self.suites)}")
        node = self.node(host)
        self.outputs[host.name] = {}
        expect = node_expectations(self.cluster, host)
        if expect.get("isolation"):
            expect["isolation"]["token"] = self.token  # in the probes' sudo: ISOLATION_AUDIT_TRAIL finds it
        verdicts = batched_suites(node, host.name, expect, self.suites,
                                  cache=self.outputs[host.name], extra=tuple(self._shared_commands(host).values()))
        if any(v.id == "NODE_UNREACHABLE" for v in verdicts):
            del self.outputs[host.name]
        self.seconds[host.name] = time.monotonic() - start
        failed = [v for v in verdicts if v.failed]
        if self.log:
            for v in verdicts:
                self.log.event(host.name, f"{v.severity} {v.id}: {v.message}")
        if self.events:
            worst = "failed" if failed else "warn" if any(v.severity == "warn" for v in verdicts) else "ok"
            self.events.finish(host.name, worst, f"{len(verdicts)} checks, {len(failed)} failed "
                               f"({self.seconds[host.name]:.1f} s)" + (f": {failed[0].id}" if failed else ""))
        return verdicts

    def collect(self) -> None:
        self.started = time.time()
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(self.forks, max(1, len(self.hosts)))) as pool:
            for host, verdicts in zip(self.hosts, pool.map(self._check_host, self.hosts)):
                self.results[host.name] = verdicts
        if "storage" in self.suites:
            self._shared_storage()
        if "system" in self.suites and len(self.hosts) > 1:
            self._same_kernel()
        threshold = self.cluster.setting("check_ib_bandwidth_gbps")
        if "fabric" in self.suites and threshold:
            self._fabric_bandwidth(threshold)
        if "workload" in self.suites:
            self._workload()
        if "isolation" in self.suites:
            self._audit_trail()

    def _workload(self) -> None:
        """The workload suite's step on each compute node and all-reduce across node pairs (kiln/check/workload.py)."""
        hosts = [h for h in self.hosts if h.is_compute and h.name in self.outputs]  # answered the first round
        found = workload_verdicts({h.name: self.node(h) for h in hosts}, {h.name: h.address for h in hosts},
                                  self.cluster.setting("check_workload"), baseline_path(self.cluster.path,
                                                                                        self.cluster.name))
        for name, verdicts in found.items():
            self.results[name] += [Verdict(v.id, v.severity, v.message, "workload") for v in verdicts]

    def _audit_trail(self) -> None:
        """ISOLATION_AUDIT_TRAIL on each login host where a probe was refused sudo with no rule for it
        (kiln/check/audit_trail.py), where the cluster has a log host. sudo logs that refusal; a probe
        with a rule (ISOLATION_SUDO failed) is refused for want of a password, which sudo does not log."""
        receiver = log_host(self.cluster)
        tried: dict[str, tuple[Host, list[str]]] = {}
        for h in self.hosts if receiver else []:
            verdicts = self.results.get(h.name, []) if h.name in self.outputs else []
            probes = [p for p in node_expectations(self.cluster, h).get("isolation", {}).get("probes", [])
                      if any(v.id == "ISOLATION_SUDO" and v.message == no_rule(p) for v in verdicts)]
            if probes:
                tried[h.name] = (h, probes)
        if tried:
            uids = {t.probe().name: t.probe_uid for t in self.cluster.teams if t.probe_uid is not None}
            for name, (_, probes) in tried.items():  # a directory team's probe: its uid is the directory's
                for probe in probes:
                    said = self.outputs[name].get(account_command(probe))
                    if probe not in uids and said is not None and said.stdout.strip().isdigit():
                        uids[probe] = int(said.stdout.strip())
            found = audit_trail(self.node(receiver), receiver.name, tried, uids, self.token, self.started)
            for name, v in found.items():
                self.results[name].append(Verdict(v.id, v.severity, v.message, "isolation"))

    def _same_kernel(self) -> None:
        """Every node should run the kernel most nodes run (with or without a pin)."""
        kernels = {name: out["uname -r"].stdout.strip() for name, out in self.outputs.items() if "uname -r" in out}
        for name, verdict in kernel_outliers(kernels).items():
            self.results[name].append(Verdict(verdict.id, verdict.severity, verdict.message, "system"))

    def _fabric_bandwidth(self, threshold: float) -> None:
        """ib_write_bw from each fabric node to the next (a ring), through the first HCA the inventory names."""
        hosts = [h for h in self.hosts if h.fabric.type in ("infiniband", "roce", "rxe")
                 and not any(v.failed for v in self.results[h.name] if v.id == "NODE_UNREACHABLE")]
        if len(hosts) < 2:
            return
        pairs = list(zip(hosts, hosts[1:] + hosts[:1]))
        iterations = self.cluster.setting("check_ib_bandwidth_iterations")

        def measure(pair):
            client, server = pair
            hca = (client.fabric.hcas or ["mlx5_0"])[0]
            # A fixed count of messages (kiln_check_ib_bandwidth_iterations; perftest's duration mode, -D,
            # reported 0.00 under emulation and leaves 2 s out at each end), 1 MiB each, 64 KiB on soft-RoCE
            # (a CPU-bound software device: big messages drown it in retransmissions); MB/sec, whose two
            # decimals still show a slow link's figure where Gb/sec rounds it to 0.00
            size = 65536 if client.fabric.type == "rxe" else 1048576
            args = f"-d {quote(hca)} -F -s {size} -n {iterations}"
            if server.fabric.gid_index is not None:  # RoCE and rxe: the GID (RoCE v2 over IPv4) NCCL uses too
                args += f" -x {server.fabric.gid_index}"
            return measure_pair(self.node(client), self.node(server), server.address, args, threshold,
                                f"{client.name} -> {server.name} via {hca}")
        for phase in ring_phases(len(pairs)):
            chosen = [pairs[i] for i in phase]
            with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(chosen))) as pool:
                for (client, _), verdict in zip(chosen, pool.map(measure, chosen)):
                    self.results[client.name].append(Verdict(verdict.id, verdict.severity, verdict.message, "fabric"))

    def verdicts(self, node: str, suite: str) -> list[Verdict]:
        return [v for v in self.results.get(node, []) if v.suite in (suite, "ssh")]

    def run_pytest(self, junit: str | None = None) -> int:
        self.collect()
        ini = self.tmp / "pytest.ini"
        ini.write_text("[pytest]\n")  # not the repository's test settings
        # pytest's own terminal output off: kiln prints the verdicts (its table); junit XML still written
        # (-q and --no-header belong to that plugin: not given)
        args = [str(CHECKS_DIR / "test_nodes.py"), "-c", str(ini), "-p", "no:cacheprovider",
                "--rootdir", str(CHECKS_DIR), "-p", "no:warnings", "-p", "no:terminal"]
        if junit:
            args.append(f"--junitxml={junit}")
        return int(pytest.main(args, plugins=[_Plugin(self)]))


class _Plugin:
    def __init__(self, run: RemoteCheck):
        self.run = run

    @pytest.fixture
    def kiln_check(self):
        return self.run

    def pytest_generate_tests(self, metafunc):
        if {"node_name", "suite"} <= set(metafunc.fixturenames):
            pairs = [(h.name, s) for h in self.run.hosts for s in self.run.suites]
            metafunc.parametrize(("node_name", "suite"), pairs, ids=[f"{n}-{s}" for n, s in pairs])

