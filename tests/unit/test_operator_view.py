"""What a person sees of a run at scale: folded summaries, the progress display's three ways, the
run's log. No node is needed: results and events are made here."""

from __future__ import annotations

import io
import re

import pytest

from kiln.cli import deploy as deploy_cli
from kiln.cli.progress import Progress
from kiln.deploy.runner import DeployResult, HostResult
from kiln.runlog import RunLog, logs_dir


def result(n: int = 1000, dry_run: bool = False) -> DeployResult:
    hosts = [HostResult(f"gpu{i:04d}", "changed" if i % 2 else "no change", ops=40,
                        changed=["slurm: slurm.conf"] if i % 2 else []) for i in range(1, n + 1)]
    if n > 40:
        hosts[32] = HostResult("gpu0033", "failed", ops=40, failed_op="nvidia_driver: packages",
                               error="E: Unable to locate package nvidia-driver", next_step="fix it, then run again")
        hosts[40] = HostResult("gpu0041", "unreachable", failed_op="cuda: toolkit", error="connection lost",
                               next_step="bring gpu0041 back")
    return DeployResult(["base", "slurm"], dry_run, hosts, 12.5)


def summary(capsys, res: DeployResult, verbose: int = 0) -> list[str]:
    deploy_cli.print_summary(res, verbose)
    return capsys.readouterr().out.splitlines()


def test_a_thousand_hosts_fold_into_a_line_per_outcome_and_failures_stay_per_host(capsys):
    lines = summary(capsys, result())
    assert len(lines) < 15, lines
    changed = next(line for line in lines if line.strip().startswith("changed"))
    assert "gpu[0001,0003," in changed and "gpu0033" not in changed and "gpu0041" not in changed
    assert any(re.match(r"\s+failed\s+gpu0033  at 'nvidia_driver: packages'", line) for line in lines), lines
    assert any("| E: Unable to locate package nvidia-driver" in line for line in lines)
    assert any(re.match(r"\s+unreachable\s+gpu0041  at 'cuda: toolkit'", line) for line in lines)
    assert lines[-1] == "summary: 498 changed, 500 no change, 1 failed, 1 unreachable"


def test_verbose_gives_every_host_its_own_line(capsys):
    lines = summary(capsys, result(50), verbose=1)
    assert sum(bool(re.match(r"\s+(changed|no change)\s+gpu\d{4}\b", line)) for line in lines) == 48


def test_a_dry_run_folds_hosts_with_the_same_pending_changes(capsys):
    res = result(6, dry_run=True)
    for h in res.hosts:
        if h.status == "changed":
            h.status = "would change"
    lines = summary(capsys, res)
    assert any(re.match(r"\s+would change gpu\[0001,0003,0005\]  \(3 hosts\)$", line) for line in lines), lines
    assert sum("~ slurm: slurm.conf" in line for line in lines) == 1


def events(progress: Progress) -> None:
    progress.note("connecting to 3 host(s)")
    progress.step("n1", "slurm: slurm.conf")
    progress.step("n2", "nvidia_driver: packages")
    progress.finish("n1", "changed", "3 of 40 operations")
    progress.finish("n2", "failed", "at 'nvidia_driver: packages'")


def test_lines_mode_prints_one_stamped_line_per_event_with_the_counts():
    out = io.StringIO()
    with Progress("deploy", ["n1", "n2", "n3"], "lines", stream=out) as progress:
        events(progress)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and all(re.match(r"\[\s*\d+\.\ds\] ", line) for line in lines), lines
    assert lines[1].endswith("n1: changed: 3 of 40 operations (1/3 done)")
    assert lines[2].endswith("n2: failed: at 'nvidia_driver: packages' (2/3 done, 1 failed)")


def test_verbose_lines_add_each_step_and_a_heartbeat_names_the_slowest(monkeypatch):
    from kiln.cli import progress as progress_module
    monkeypatch.setattr(progress_module, "HEARTBEAT_S", 0.0)
    out = io.StringIO()
    with Progress("deploy", ["n1", "n2", "n3"], "lines", verbose=1, stream=out) as progress:
        events(progress)
    text = out.getvalue()
    assert "n2: nvidia_driver: packages" in text
    assert re.search(r"deploy: 0/3 done; slowest: n1 slurm: slurm.conf \(\d+ s\)", text), text


def test_quiet_mode_prints_nothing():
    out = io.StringIO()
    with Progress("deploy", ["n1", "n2", "n3"], "quiet", stream=out) as progress:
        events(progress)
    assert out.getvalue() == ""


def test_the_live_panel_shows_counts_failures_and_what_the_slowest_hosts_do():
    from rich.console import Console
    progress = Progress("deploy", [f"n{i}" for i in range(1, 9)], "live", stream=io.StringIO())
    progress.step("n3", "cuda: toolkit")
    progress.step("n4", "slurm: munge key")
    progress.finish("n1", "changed")
    progress.finish("n2", "unreachable")
    console = Console(file=io.StringIO(), width=120, color_system=None)
    console.print(progress.render())
    text = console.file.getvalue()
    assert "deploy  2/8 done, 1 failed" in text and "failed: n2" in text
    assert re.search(r"n3  cuda: toolkit  \d+ s", text) and "n4  slurm: munge key" in text


def test_the_live_panel_keeps_each_host_on_one_line_in_a_narrow_terminal():
    """What a host does is cut short to the terminal's width; its name and its seconds stay on its line
    (CI saw an 80-column pane wrap a long step onto a second line)."""
    from rich.console import Console
    progress = Progress("deploy", ["kilnlb01", "kilnlb02"], "live", stream=io.StringIO())
    progress.step("kilnlb01", "slurm: QoS, and the teams' accounts, shares, GPU limits, QoS and users")
    progress.step("kilnlb02", "base: hosts")
    for width, shown in ((120, "QoS and users"), (80, "QoS a…"), (40, "the te…")):
        console = Console(file=io.StringIO(), width=width, color_system=None)
        console.print(progress.render())
        lines = console.file.getvalue().splitlines()
        assert len(lines) == 3 and all(len(line) <= width for line in lines), lines
        line = next(line for line in lines if "kilnlb01" in line)
        assert re.match(r"^  kilnlb01  slurm: QoS, .*  \d+ s$", line) and f"{shown}  " in line, line


def test_the_live_mode_draws_on_a_terminal_and_leaves_the_notes(monkeypatch):
    out = io.StringIO()
    out.isatty = lambda: True
    with Progress("deploy", ["n1", "n2", "n3"], "live", stream=out) as progress:
        events(progress)
    assert "connecting to 3 host(s)" in out.getvalue()


@pytest.mark.parametrize("as_json, tty, verbose, mode", [
    (True, True, 0, "quiet"), (False, True, 0, "live"), (False, False, 0, "lines"), (False, True, 1, "lines")])
def test_the_display_is_chosen_by_json_terminal_and_verbosity(monkeypatch, as_json, tty, verbose, mode):
    monkeypatch.setattr("sys.stdout.isatty", lambda: tty)
    assert Progress.for_command("deploy", ["n1"], as_json, verbose).mode == mode


def test_the_run_log_has_every_operation_with_its_time_and_a_failure_in_full(tmp_path):
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    log = RunLog(inventory, "small", "deploy", ["deploy", "-i", str(inventory)])
    with Progress("deploy", ["n1", "n2"], "quiet", log=log) as progress:
        progress.step("n1", "base: packages")
        log.operation("n1", "base: packages", "changed", 1.5)
        log.operation("n2", "base: packages", "failed", 0.25, "line one\nE: the last line")
        progress.finish("n2", "failed", "at 'base: packages'")
    log.close()
    assert log.path.parent == logs_dir(inventory, "small") == tmp_path / ".kiln" / "logs" / "small"
    assert oct(log.path.stat().st_mode & 0o777) == "0o600"
    text = log.path.read_text()
    assert re.search(r"^\s+[\d.]+ n1 changed 'base: packages' in 1.50 s$", text, re.M)
    assert re.search(r"^\s+[\d.]+ n2 failed 'base: packages' in 0.25 s$", text, re.M)
    assert "n2 | line one" in text and "n2 | E: the last line" in text
    assert re.search(r"n2 failed at 'base: packages'", text) and text.rstrip().endswith("- end")
    again = RunLog(inventory, "small", "deploy")
    assert again.path != log.path      # two runs in the same second keep both logs
    again.close()


def test_the_check_table_folds_nodes_that_read_the_same_and_keeps_failures_apart():
    from checks.verdict import Verdict
    from kiln.check import report
    healthy = [Verdict("GPU_COUNT", "ok", "8 GPUs", suite="gpu"), Verdict("SLURM_NODE", "ok", "idle", suite="slurm")]
    results = {f"gpu{i:03d}": list(healthy) for i in range(1, 101)}
    results["gpu033"] = [Verdict("GPU_XID_FATAL", "fail", "Xid 79 on gpu3", suite="gpu"), healthy[1]]
    results["gpu034"] = [Verdict("GPU_XID_FATAL", "fail", "Xid 79 on gpu3", suite="gpu"), healthy[1]]
    lines = report.table(results, ["gpu", "slurm"]).splitlines()
    assert len(lines) == 4, lines                      # header, two failing nodes apart, one folded row
    assert lines[1].startswith("gpu033") and "FAIL" in lines[1] and "GPU_XID_FATAL: Xid 79" in lines[1]
    assert lines[2].startswith("gpu034")
    assert lines[3].startswith("gpu[001-032,035-100]") and "OK" in lines[3]
    assert len(report.table(results, ["gpu", "slurm"], verbose=1).splitlines()) == 101


@pytest.mark.parametrize("words, expected", [
    ("kiln deploy -i inventory/example --roles base,sl", {"base,slurm"}),
    ("kiln check -i inventory/example --suite g", {"gpu"}),
    ("kiln patch -i inventory/example --limit hgx03", {"hgx030", "hgx031", "hgx032"}),
    ("kiln deploy -i inventory/example --limit 'gpu_h100,!hgx00'", {f"gpu_h100,!hgx00{i}" for i in range(1, 10)}),
])
def test_shell_completion_completes_roles_suites_and_the_inventorys_hosts(words, expected):
    import os
    import shlex
    import subprocess
    import sys

    from tests.conftest import REPO
    argv = shlex.split(words)
    env = dict(os.environ, _KILN_COMPLETE="bash_complete", COMP_WORDS=" ".join(argv), COMP_CWORD=str(len(argv) - 1))
    out = subprocess.run([sys.executable, "-c", "from kiln.cli import main; main(prog_name='kiln')"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=60)
    assert {line.split(",", 1)[1] for line in out.stdout.splitlines()} == expected, out.stdout + out.stderr


def test_open_files_are_raised_for_many_connections_within_the_hard_limit():
    import resource
    from kiln.cli.common import allow_open_files
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        allow_open_files(10_000)
        new_soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        assert new_soft >= min(hard, 64 + 2 * 10_000) or new_soft == resource.RLIM_INFINITY
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_progress_on_standard_error_stays_in_lines_with_json_so_standard_output_is_the_json(monkeypatch):
    err = io.StringIO()
    err.isatty = lambda: False
    progress = Progress.for_command("image build", ["img"], True, stream=err)
    assert progress.mode == "lines"
    progress.note("copying the base")
    assert "copying the base" in err.getvalue()


def test_an_image_builds_install_stage_steps_are_shown_and_its_output_kept_in_the_log(tmp_path):
    """The install stage (kiln.image.chroot) prints a STEP line per operation on standard error and the
    deploy's JSON on standard output; the build shows each step and keeps every line in its log."""
    import sys

    from kiln.image.build import _install_stage
    from kiln.image.chroot import STEP

    script = (f"import sys; print({STEP!r} + 'slurm: packages', file=sys.stderr); print('apt output', file=sys.stderr);"
              f"print({STEP!r} + 'slurm:  munge   key', file=sys.stderr); print('{{\"hosts\": []}}')")
    steps: list[str] = []
    log = tmp_path / "build.log"
    rc, out = _install_stage([sys.executable, "-c", script], log, steps.append)
    assert (rc, out.strip()) == (0, '{"hosts": []}')
    assert steps == ["install: slurm: packages", "install: slurm:  munge   key"]
    assert "apt output" in log.read_text()
    rc, out = _install_stage([sys.executable, "-c", "import time; time.sleep(30)"], log, steps.append, timeout=0.5)
    assert rc < 0 and "killed after" in out


def test_more_hosts_than_forks_go_in_waves_compute_first_and_the_controller_last():
    from kiln.deploy.runner import Deploy
    from kiln.inventory import load_cluster
    from tests.conftest import INVENTORIES

    cluster = load_cluster(INVENTORIES / "small")
    names = list(cluster.hosts)
    compute = [h.name for h in cluster.compute]
    waves = Deploy(cluster, None, names, None, forks=2).waves()
    assert [n for w in waves for n in w] == compute + [n for n in names if n not in compute]
    assert all(len(w) <= 2 for w in waves) and len(waves) == -(-len(names) // 2)
    assert Deploy(cluster, None, names, None, forks=0).waves() == [names]  # 0: all at once, inventory order


@pytest.mark.parametrize("fabric, modules, expected", [
    ("infiniband", "open", True), ("roce", "proprietary", True), ("infiniband", "none", False),
    ("none", "open", False)])
def test_gpudirect_rdma_is_expected_exactly_where_kiln_installs_kernel_modules_on_a_fabric(fabric, modules, expected):
    """The README's testbed (no kernel modules) ends OK, not WARN GPU_PEERMEM; a real cluster with an
    RDMA fabric and NVIDIA modules still has nvidia_peermem checked, and set up by the driver role."""
    from dataclasses import replace

    from kiln.check.expectations import node_expectations
    from kiln.inventory import load_cluster
    from kiln.inventory.schema import Fabric
    from tests.conftest import INVENTORIES

    cluster = load_cluster(INVENTORIES / "small")
    host = cluster.hosts["gpu01"]
    host = replace(host, fabric=Fabric(type=fabric, hca_count=1 if fabric != "none" else 0,
                                       rate_gbps=200 if fabric != "none" else 0),
                   settings=dict(host.settings, kiln_nvidia_kernel_modules=modules))
    assert host.gpudirect_rdma is expected
    assert node_expectations(cluster, host)["gpu"]["rdma"] is expected


def test_a_host_pyinfra_dropped_on_its_own_is_reported_never_left_pending():
    from types import SimpleNamespace

    from kiln.deploy.runner import Deploy
    from kiln.inventory import load_cluster
    from tests.conftest import INVENTORIES

    cluster = load_cluster(INVENTORIES / "small")
    deploy = Deploy(cluster, None, ["gpu01", "gpu02"], None)
    deploy.results["gpu02"].status = "no change"
    hosts = [SimpleNamespace(name=n, connector=SimpleNamespace(client=None)) for n in ("gpu01", "gpu02")]
    deploy._left_out(hosts)
    r = deploy.results["gpu01"]
    assert (r.status, r.failed_op) == ("failed", "(before its operations ran)")
    assert "kiln deploy --limit gpu01" in r.next_step
    assert deploy.results["gpu02"].status == "no change"


def test_the_display_survives_threads_that_start_and_finish_hosts_while_it_reads():
    """kiln check reports from a pool of threads: reading the in-flight hosts while others change them
    must not fail (a 1,000-node check died with 'dictionary changed size during iteration').
    The garbage collector runs at every allocation here, as it may in a long run: it executes Python code
    in the middle of a copy, where another thread can get in."""
    import gc

    threshold = gc.get_threshold()
    gc.set_threshold(1, 1, 1)
    try:
        _race_readers_against_writers()
    finally:
        gc.set_threshold(*threshold)


class _Finalized:
    """Garbage with a finalizer: a collection runs Python code (this __del__), which lets threads switch."""
    def __init__(self):
        self.cycle = self

    def __del__(self):
        pass


def _race_readers_against_writers():
    import threading

    out = io.StringIO()
    progress = Progress("check", [f"n{i}" for i in range(3000)], "lines", stream=out)
    stop = threading.Event()
    errors = []

    def read():
        while not stop.is_set():
            try:
                progress.slowest(), progress.failed, progress.render()
            except Exception as e:  # noqa: BLE001 - what the test looks for
                errors.append(e)
                return

    reader = threading.Thread(target=read)
    reader.start()

    def work(start):
        for i in range(start, 3000, 4):
            _Finalized()
            progress.step(f"n{i}", "suite system")
            progress.finish(f"n{i}", "failed" if i % 7 == 0 else "ok")

    workers = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop.set()
    reader.join()
    assert not errors, errors[0]
    assert len(progress.done) == 3000 and len(progress.failed) == 429
