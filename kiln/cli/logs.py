"""kiln logs: what the log host holds of some hosts' journals, or of one job (kiln/log_host.py)."""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import click

from checks.parsers.slurm_values import env_words
from kiln.cli.common import (EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, complete_hosts, default_inventory, echo,
                             inventory_option, json_option, load_or_exit, utc_time)

JOB_MARGIN = 5  # seconds before a job's submission and after its end that its nodes' entries are shown (its epilog)


@click.command()
@inventory_option
@click.argument("hosts", nargs=-1, shell_complete=complete_hosts)
@click.option("--job", "job_id", default=None, help="one job: Slurm's entries naming it and its nodes' entries "
              "while it ran (Slurm's accounting says where and when)")
@click.option("--since", default=None, help="from this time, UTC (default: an hour ago; with --job: its submission)")
@click.option("--until", default=None, help="until this time, UTC (default: now; with --job: its end)")
@click.option("--grep", "pattern", default=None, help="only entries whose message matches this regular expression")
@click.option("-n", "--lines", default=200, show_default=True, type=click.IntRange(0, 1_000_000),
              help="the newest this many entries; 0: all")
@json_option
def logs(inventory: Path | None, hosts: tuple[str, ...], job_id: str | None, since: str | None, until: str | None,
         pattern: str | None, lines: int, as_json: bool) -> None:
    """Show what the log host received from HOSTS (every host when none is named), or of one job: exit 0,
    1 when the log host or Slurm's accounting cannot be read, 2 bad input."""
    from kiln import log_host
    from kiln.check.remote import RemoteCheck

    cluster = load_or_exit(inventory or default_inventory())
    receiver = log_host.log_host(cluster)
    if receiver is None:
        echo("this cluster ships no journal: kiln_log_shipping is off, or the inventory has no monitoring group",
             err=True)
        sys.exit(EXIT_BAD_INPUT)
    unknown = [h for h in hosts if h not in cluster.hosts]
    if unknown:
        echo(f"not hosts of the inventory: {', '.join(unknown)}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    if job_id is not None and not re.fullmatch(r"\d{1,12}", job_id):
        echo(f"--job {job_id!r} is not a Slurm job id (digits)", err=True)
        sys.exit(EXIT_BAD_INPUT)
    try:
        grep = re.compile(pattern) if pattern else None
        now = datetime.now(timezone.utc).replace(microsecond=0)
        start = utc_time(since, now - timedelta(hours=1))
        end = utc_time(until, now)
    except (re.error, click.BadParameter) as e:
        echo(f"--grep: {e}" if isinstance(e, re.error) else str(e), err=True)
        sys.exit(EXIT_BAD_INPUT)
    names = list(hosts) or list(cluster.hosts)
    job = None
    with RemoteCheck(cluster, [receiver] + cluster.controllers[:1], []) as remote:
        if job_id is not None:
            job = _job(cluster, remote, job_id)
            if isinstance(job, str):
                echo(job, err=True)
                sys.exit(EXIT_FAILED)
            names = list(hosts) or job["hosts"]
            start = utc_time(since, datetime.fromtimestamp(job["since"] - JOB_MARGIN, timezone.utc))
            end = utc_time(until, datetime.fromtimestamp(job["until"] + JOB_MARGIN, timezone.utc))
        out = remote.node(receiver).run(log_host.read_command([cluster.hosts[n] for n in names],
                                                              start.timestamp(), end.timestamp()))
    entries, bad = log_host.parse(out.stdout)
    if out.rc != 0 and not entries:
        echo(f"the log host {receiver.name} did not answer ({(out.stderr or out.stdout).strip()[-300:]})", err=True)
        sys.exit(EXIT_FAILED)
    if job is not None:
        named = log_host.job_pattern(job_id)
        controllers = {h.name for h in cluster.controllers}
        entries = [e for e in entries if e.host not in controllers or named.search(e.message)]
    if grep:
        entries = [e for e in entries if grep.search(e.message)]
    if lines:
        entries = entries[-lines:]
    if as_json:
        echo(json.dumps({"log_host": receiver.name, "job": job, "entries": [e.as_dict() for e in entries],
                         "unreadable": bad}, indent=1))
        sys.exit(EXIT_OK)
    if job is not None:
        echo(f"job {job_id} of {job['user']} ({job['account']}) on {', '.join(job['hosts']) or 'no node'}, "
             f"{datetime.fromtimestamp(job['since'], timezone.utc):%Y-%m-%dT%H:%M:%S} to "
             f"{datetime.fromtimestamp(job['until'], timezone.utc):%Y-%m-%dT%H:%M:%S} (UTC)")
    for e in entries:
        echo(log_host.line(e))
    if not entries:
        echo(f"no entries on the log host {receiver.name} for {', '.join(names)} from {start:%Y-%m-%dT%H:%M:%S} "
             f"to {end:%Y-%m-%dT%H:%M:%S} (UTC)")
    if bad:
        echo(f"{bad} line(s) of the log host's answer were not journal entries and were left out", err=True)
    sys.exit(EXIT_OK)


def _job(cluster, remote, job_id: str) -> dict | str:
    """Where and when job ``job_id`` ran, from Slurm's accounting on the controller; a message when it cannot."""
    from checks.parsers.delimited import separator
    from kiln.hostlist import expand
    from kiln.shell import command
    from kiln.usage import sacct

    controller = cluster.controllers[0]
    sep = separator()
    out = remote.node(controller).run(f"{env_words()} {command(*sacct.job_command(job_id, sep))}")
    if out.rc != 0:
        return f"Slurm's accounting on {controller.name} could not be read (exit {out.rc}): {(out.stderr or out.stdout).strip()[:300]}"
    runs, left_out = sacct.read(out.stdout, sep)
    runs = [r for r in runs if r.job_id == job_id]
    if not runs:
        return f"Slurm's accounting has no job {job_id}" + (f" ({left_out})" if left_out else "")
    nodes = [n for r in runs if r.nodes and r.nodes != "None assigned" for n in expand(r.nodes)]
    ran = [h for h in dict.fromkeys(nodes) if h in cluster.hosts]
    now = datetime.now(timezone.utc).timestamp()
    since = min((t for r in runs for t in (r.submit, r.start) if t is not None), default=now)
    until = max((r.end for r in runs if r.end), default=now)
    return {"id": job_id, "user": runs[-1].user, "account": runs[-1].account, "hosts":
            [h.name for h in cluster.controllers] + [h for h in ran if h not in {c.name for c in cluster.controllers}],
            "since": since, "until": until}
