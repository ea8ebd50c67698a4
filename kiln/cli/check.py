"""`kiln check`: run kiln's node checks over SSH on the inventory's hosts and report per node."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from checks.suites import OPT_IN, SUITES
from kiln.cli.common import (EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, complete_hosts, complete_suites,
                             default_inventory, echo, forks_option, inventory_option, load_or_exit, verbose_option)


@click.command()
@inventory_option
@click.option("--suite", "suites", shell_complete=complete_suites, default=None,
              help="comma-separated suites (default: all but " + ", ".join(OPT_IN) + "): " + ", ".join(SUITES))
@click.option("--limit", shell_complete=complete_hosts, default=None,
              help="Ansible host pattern (as for kiln deploy)")
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None,
              help="write the verdicts as JSON to a file, or with - to standard output (and nothing else there)")
@click.option("--junit", "junit_path", type=click.Path(path_type=Path), default=None, help="write JUnit XML")
@click.option("--html", "html_path", type=click.Path(path_type=Path), default=None, help="write a node-by-check HTML matrix")
@click.option("--nccl-cluster", is_flag=True, help="opt-in: all_reduce_perf across the selected compute nodes as "
              "one Slurm job, judged against kiln_check_nccl_cluster_busbw_gbps; a slow pair found by halving")
@click.option("--reference", is_flag=True, help="print every check id with its meaning and what to do (Markdown); "
              "check nothing")
@forks_option(64)
@verbose_option
def check(inventory: Path | None, suites: str | None, limit: str | None, json_path: Path | None,
          junit_path: Path | None, html_path: Path | None, nccl_cluster: bool, reference: bool, forks: int,
          verbose: int) -> None:
    """Check nodes: exit 0 all passed (warnings allowed), 1 some check failed, 2 bad input."""
    if reference:
        from checks.reference import markdown
        click.echo(markdown(), nl=False)
        return
    from kiln.inventory.limit import LimitError, resolve_limit

    cluster = load_or_exit(inventory or default_inventory(), "nothing was checked")
    names = [s for s in SUITES if s not in OPT_IN] if suites is None else [s.strip() for s in suites.split(",") if s.strip()]
    unknown = [s for s in names if s not in SUITES]
    if unknown or not names:
        echo(f"--suite: unknown {', '.join(unknown) or '(none given)'}; kiln has {', '.join(SUITES)}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    try:
        hosts = [cluster.hosts[n] for n in resolve_limit(cluster, limit)]
    except LimitError as e:
        echo(f"{e}; nothing was checked", err=True)
        sys.exit(EXIT_BAD_INPUT)

    if nccl_cluster:
        sys.exit(_nccl_cluster(cluster, hosts))
    from kiln.check import report
    from kiln.check.remote import RemoteCheck
    from kiln.cli.progress import Progress
    from kiln.runlog import RunLog

    to_stdout = str(json_path) == "-"
    log = RunLog(inventory or default_inventory(), cluster.name, "check", sys.argv[1:])
    try:
        with Progress.for_command("check", [h.name for h in hosts], to_stdout, verbose, log) as progress:
            progress.note(f"checking {len(hosts)} host(s): {', '.join(names)}")
            with RemoteCheck(cluster, hosts, names, progress=progress.note, events=progress, log=log,
                             forks=forks) as run:
                code = run.run_pytest(str(junit_path) if junit_path else None)
    finally:
        log.close()
    worst = report.summary(run.results)
    code_out = EXIT_FAILED if any(w == "fail" for w in worst.values()) else EXIT_OK
    if html_path:
        html_path.write_text(report.as_html(run.results, cluster.name))
    if to_stdout:
        click.echo(report.as_json(run.results, run.seconds))
        sys.exit(code_out)
    echo("")
    echo(report.table(run.results, names, verbose))
    if json_path:
        json_path.write_text(report.as_json(run.results, run.seconds))
    echo(f"summary: {sum(w == 'ok' for w in worst.values())} ok, {sum(w == 'warn' for w in worst.values())} "
               f"warn, {sum(w == 'fail' for w in worst.values())} failed")
    echo(f"log: {log.path}")
    if code not in (0, 1):
        echo(f"pytest exited {code}", err=True)
    sys.exit(code_out)


def _nccl_cluster(cluster, hosts) -> int:
    """The opt-in cluster NCCL check over the selected compute nodes with GPUs; the exit code."""
    from kiln.check.nccl_cluster import find_slow, measure_with, verdict
    from kiln.check.remote import RemoteCheck

    nodes = [h for h in hosts if h.is_compute and h.gpu_count]
    if len(nodes) < 2:
        echo("--nccl-cluster needs at least two compute nodes with GPUs in the selection; nothing was run", err=True)
        return EXIT_BAD_INPUT
    controller = cluster.controllers[0]
    floors = cluster.setting("check_nccl_cluster_busbw_gbps")
    echo(f"all_reduce_perf across {len(nodes)} nodes through Slurm on {controller.name}")
    with RemoteCheck(cluster, [controller], []) as remote:
        gpus = min(h.gpu_count for h in nodes)
        measure = measure_with(remote.node(controller).run, gpus, cluster.setting("slurm_mpi"),
                               cluster.setting("check_nccl_cluster_program"),
                               min([gpus] + [h.cpus for h in nodes if h.cpus]))
        result = find_slow([h.name for h in nodes], measure, floors)
    for m in result.measurements:
        echo(f"  {','.join(m.nodes)}: " + (f"{m.busbw:.1f} GB/s" if m.busbw is not None else f"failed: {m.error}"))
    found = verdict(result, floors)
    echo(f"{found.id} {found.severity}: {found.message}")
    return EXIT_FAILED if found.failed else EXIT_OK
