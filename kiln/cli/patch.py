"""`kiln patch`: roll roles out over a live Slurm cluster, batch by batch, without killing a job."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from kiln.cli.common import (EXIT_BAD_INPUT, EXIT_CHANGES, EXIT_FAILED, EXIT_OK, complete_hosts, complete_roles,
                             default_inventory, echo, forks_option, inventory_option, json_option, load_or_exit,
                             verbose_option)


@click.command()
@inventory_option
@click.option("--roles", "role_list", shell_complete=complete_roles, default=None,
              help="comma-separated roles to apply (required unless --resume)")
@click.option("--limit", shell_complete=complete_hosts, default=None,
              help="Ansible host pattern: the hosts to patch")
@click.option("--max-unavailable", default="1", show_default=True,
              help="compute nodes out of service at once, counting any already out: N or P%")
@click.option("--canary", default=1, show_default=True, help="compute nodes in the first batch")
@click.option("--failure-budget", default=1, show_default=True, help="failed nodes that stop the rollout")
@click.option("--reboot", type=click.Choice(["never", "needed", "always"]), default="needed", show_default=True,
              help="reboot after applying: never, when a role says so, or always (Slurm's RebootProgram)")
@click.option("--drain-timeout", default="1h", show_default=True,
              help="how long to wait for a drained node's jobs (e.g. 90s, 30m, 2h); then it is left unpatched")
@click.option("--notify", "notify", default=None, metavar="SIGNAL",
              help="send SIGNAL (e.g. USR1) to the jobs on each drained node that asked for it (their comment holds "
              "kiln:checkpoint), batch shell and steps, to checkpoint; other jobs are never signalled")
@click.option("--grace", default="0s", show_default=True,
              help="how long signalled jobs get to checkpoint (with --notify) before a requeue")
@click.option("--requeue", is_flag=True, help="after the grace, requeue the jobs still there that Slurm may "
              "requeue (they start again elsewhere); other jobs are waited for, never killed")
@click.option("--reserve-ahead", default="0s", show_default=True,
              help="a maintenance reservation on each batch's nodes begins this long before its drain: until "
              "then only jobs that end before it start there")
@click.option("--window", default="2h", show_default=True, help="the length of each batch's maintenance reservation")
@click.option("--workload-check", is_flag=True, help="after each batch's checks, the workload suite on its nodes "
              "(kiln check --suite workload), judged against the medians of the last run over the cluster")
@click.option("--resume", is_flag=True, help="continue the rollout whose process stopped (from its journal)")
@click.option("--dry-run", is_flag=True, help="print the batches; change nothing. Exit 3: nodes would be patched, "
              "0: none")
@forks_option()
@verbose_option
@json_option
def patch(inventory: Path | None, role_list: str | None, limit: str | None, max_unavailable: str, canary: int,
          failure_budget: int, reboot: str, drain_timeout: str, notify: str | None, grace: str, requeue: bool,
          reserve_ahead: str, window: str, workload_check: bool, resume: bool, dry_run: bool, forks: int,
          verbose: int, as_json: bool) -> None:
    """Patch a live cluster: exit 0 every node patched, 1 a node failed or the rollout stopped, 2 bad input,
    3 (--dry-run) nodes would be patched."""
    import roles
    from kiln.inventory.limit import LimitError, resolve_limit
    from kiln.patch import journal as journals
    from kiln.patch.maintenance import parse_signal
    from kiln.patch.plan import PlanError
    from kiln.patch.rollout import Options
    from kiln.secrets import SecretsError, load_or_create, secrets_path

    inventory = inventory or default_inventory()
    cluster = load_or_exit(inventory)
    directory = journals.rollouts_dir(inventory, cluster.name)
    pending = journals.unfinished(directory)
    say = (lambda line: echo(line, err=True)) if as_json else echo

    def bad(message: str) -> None:
        echo(f"{message}; nothing was touched", err=True)
        sys.exit(EXIT_BAD_INPUT)

    if resume:
        if pending is None:
            bad(f"--resume: no unfinished rollout in {directory}")
        records = journals.read(pending)
        start = next(r for r in records if r["event"] == "start")
        options = Options(**start["options"])
    else:
        if pending is not None and not dry_run:
            bad(f"an unfinished rollout is recorded in {pending}: continue it with kiln patch --resume "
                "(or move that journal away)")
        names = [r.strip() for r in (role_list or "").split(",") if r.strip()]
        unknown = [r for r in names if r not in roles.ORDER]
        if unknown or not names:
            bad(f"--roles: {'unknown role(s) ' + ', '.join(unknown) if unknown else 'give the roles to apply'}; "
                f"kiln has {', '.join(roles.ORDER)}")
        try:
            signal = parse_signal(notify) if notify else ""
            if (requeue or _seconds(grace, "--grace")) and not signal:
                raise ValueError("--grace and --requeue go with --notify SIGNAL (jobs are told to checkpoint first)")
            options = Options(names, max_unavailable, canary, failure_budget, reboot,
                              _seconds(drain_timeout, "--drain-timeout"), notify=signal,
                              grace=_seconds(grace, "--grace"), requeue=requeue,
                              lead=_seconds(reserve_ahead, "--reserve-ahead"), window=_seconds(window, "--window"),
                              workload_check=workload_check)
        except ValueError as e:
            bad(str(e))
    if options.failure_budget < 1 or options.canary < 0:
        bad("--failure-budget must be 1 or more and --canary 0 or more")
    if options.workload_check and not resume:
        from kiln.check.workload import baseline_path, read_baseline
        if not read_baseline(baseline_path(inventory, cluster.name)):
            bad(f"--workload-check: no medians of the cluster in {baseline_path(inventory, cluster.name)}: run kiln "
                "check --suite workload over the cluster first (a batch is judged against them)")
    try:
        hosts = resolve_limit(cluster, limit) if not resume else []
        if not secrets_path(cluster).exists():
            raise SecretsError(f"no secrets for cluster {cluster.name!r} in {secrets_path(cluster)}: a live cluster "
                               "is patched with the secrets it was deployed with (run kiln deploy first)")
        secrets = load_or_create(cluster, create=False)
    except (LimitError, SecretsError) as e:
        bad(str(e))

    from kiln.cli.deploy import gevent_patch
    gevent_patch()
    from kiln.patch import report
    from kiln.patch.plan import Plan
    from kiln.patch.rollout import Rollout
    from kiln.patch.slurmctl import SlurmError

    if dry_run:
        journal = journals.Journal(Path("/dev/null"))  # a dry run writes no journal
    else:
        journal_path = pending if resume else directory / f"{time.strftime('%Y%m%dT%H%M%S')}.jsonl"
        journal = journals.Journal(journal_path, journals.read(journal_path) if resume else None)
    from functools import partial
    from kiln.patch.rollout import check_nodes, deploy_roles
    rollout = Rollout(cluster, secrets, journal, options, progress=say, apply=partial(deploy_roles, forks=forks),
                      check=partial(check_nodes, forks=forks))
    try:
        if resume:
            plan = Plan.from_dict(journal.start["plan"])
            say(f"resuming the rollout in {journal_path}")
        else:
            plan = rollout.new_plan(hosts) if dry_run else rollout.start(hosts)
    except PlanError as e:
        rollout.checker.close()
        bad(str(e))
    except SlurmError as e:
        rollout.checker.close()
        echo(f"the controller does not answer ({e}); nothing was changed: bring it back, then run kiln patch again",
             err=True)
        sys.exit(EXIT_FAILED)
    if dry_run:
        rollout.checker.close()
        echo(json.dumps(plan.as_dict(), indent=2) if as_json else report.plan_text(plan, options))  # JSON alone
        sys.exit(EXIT_CHANGES if plan.service or any(plan.compute) or plan.service_after else EXIT_OK)
    say(report.plan_text(plan, options, resumed=resume) + f"\njournal: {journal_path}")
    from kiln.cli.progress import Progress
    from kiln.runlog import RunLog
    log = RunLog(inventory, cluster.name, "patch", sys.argv[1:])
    nodes = [*plan.service, *(n for batch in plan.compute for n in batch)]
    try:
        with Progress.for_command("patch", nodes, as_json, verbose, log) as progress:
            rollout.progress, rollout.events = progress.note, progress
            outcome = rollout.run(plan)
    finally:
        log.close()
    journal.close()
    html = journal_path.with_suffix(".html")
    html.write_text(report.html(journals.read(journal_path), cluster.name))
    from kiln.patch.maintenance import job_paths
    summary = {**report.summary(outcome, str(journal_path), str(html), job_paths(journals.read(journal_path))),
               "log": str(log.path)}
    if as_json:
        echo(json.dumps(summary, indent=2))
    else:
        echo(report.summary_text(summary, verbose))
        echo(f"log:     {log.path}")
    sys.exit(EXIT_FAILED if outcome.stopped or outcome.failed or
             any(r["result"] == "not patched" for r in outcome.results.values()) else EXIT_OK)


def _seconds(text: str, option: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    text = text.strip()
    try:
        value = float(text[:-1]) * units[text[-1]] if text[-1:] in units else float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 30 * 86400 or value != value:
        raise ValueError(f"{option} {text!r}: give seconds, or a number with s, m, h or d (at most 30 days)")
    return value
