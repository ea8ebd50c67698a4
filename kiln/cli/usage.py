"""`kiln usage`: GPU-hours, CPU-hours, cost and idle allocation per team and user, from Slurm's accounting;
each team's storage against its quota, from the filesystems' servers (kiln/usage/storage.py)."""

from __future__ import annotations

import csv
import io
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import click

from checks.parsers.slurm_values import env_words
from kiln.cli.common import (EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, default_inventory, echo, inventory_option, load_or_exit,
                             utc_time)


@click.command()
@inventory_option
@click.option("--since", default=None, help="start of the window, UTC (default: the first of this month)")
@click.option("--until", default=None, help="end of the window, UTC (default: now)")
@click.option("--team", default=None, help="only this team (a Slurm account)")
@click.option("--json", "as_json", is_flag=True, help="the whole report as JSON")
@click.option("--csv", "as_csv", is_flag=True, help="one line per team as CSV")
@click.option("--reconcile", is_flag=True,
              help="also each team's GPU-hours beside sreport's and sshare's, over the window's whole hours")
@click.option("--html", "html_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="also write the report as one self-contained HTML page with plots")
def usage(inventory: Path | None, since: str | None, until: str | None, team: str | None, as_json: bool,
          as_csv: bool, reconcile: bool, html_file: Path | None) -> None:
    """Report usage and cost per team: exit 0, or 1 when Slurm's accounting cannot be read, 2 bad input."""
    from checks.parsers.delimited import separator
    from kiln.check.remote import RemoteCheck
    from kiln.shell import command
    from checks.parsers import slurm_usage
    from kiln.usage import reconcile as reconcile_mod
    from kiln.usage import report as report_mod
    from kiln.usage import sacct

    cluster = load_or_exit(inventory or default_inventory())
    now = datetime.now(timezone.utc).replace(microsecond=0)
    try:
        start = utc_time(since, now.replace(day=1, hour=0, minute=0, second=0))
        end = utc_time(until, now)
    except click.BadParameter as e:
        echo(str(e), err=True)
        sys.exit(EXIT_BAD_INPUT)
    if end <= start:
        echo(f"--until {end:%Y-%m-%dT%H:%M:%S} is not after --since {start:%Y-%m-%dT%H:%M:%S}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    if team is not None and team not in {t.name for t in cluster.teams}:
        echo(f"--team: {team!r} is not a team of the inventory ({', '.join(t.name for t in cluster.teams) or 'none'})",
             err=True)
        sys.exit(EXIT_BAD_INPUT)
    controller = cluster.controllers[0]
    from kiln.usage import storage as storage_mod
    quota_asked = storage_mod.asked(cluster)
    hours = reconcile_mod.whole_hours(start.timestamp(), end.timestamp(), now.timestamp()) if reconcile else None
    asked_from = datetime.fromtimestamp(hours[0], timezone.utc) if hours else start  # sacct from that hour on
    window = (f"{asked_from:%Y-%m-%dT%H:%M:%S}", f"{end:%Y-%m-%dT%H:%M:%S}")
    sep = separator()
    slurm_reports = []
    with RemoteCheck(cluster, [controller], []) as remote:
        node = remote.node(controller)
        out = node.run(f"{env_words()} {command(*sacct.command(*window, sep))}")
        res = node.run(f"{env_words()} {command(*sacct.reservations_command(*window))}") if out.rc == 0 else out
        if hours and out.rc == 0:
            h0, h1 = (datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") for t in hours)
            slurm_reports = [("GPU-hours per account (sreport)",
                              node.run(f"{env_words()} {command(*slurm_usage.sreport_gpu_command(h0, h1))}")),
                             ("fair share (sshare)", node.run(f"{env_words()} {command(*slurm_usage.sshare_command())}"))]
        quota_answers = {}
        for (host, volume), line in quota_asked.items():  # each volume's server
            result = remote.node(cluster.hosts[host]).run(line)
            quota_answers[(host, volume)] = (result.rc, result.stdout, result.stderr)
    for name, result in (("the jobs (sacct)", out), ("the reservations (sacctmgr)", res), *slurm_reports):
        if result.rc != 0:
            echo(f"{name} on {controller.name} exited {result.rc}: {(result.stderr or result.stdout).strip()[:300]}",
                 err=True)
            sys.exit(EXIT_FAILED)
    jobs, left_out = sacct.read(out.stdout, sep)
    if left_out:
        echo(f"kiln usage: {left_out}", err=True)
    reservations = sacct.parse_reservations(res.stdout)
    if team is not None:
        jobs = [j for j in jobs if j.account == team]
    data = report_mod.report(jobs, cluster, start.timestamp(), end.timestamp(),
                             cluster.setting("usage_gpu_hour_prices"), cluster.setting("usage_currency"),
                             reservations)
    data["left_out"] = left_out
    data["storage_quotas"], quota_problems = storage_mod.rows(cluster, quota_answers)
    for problem in quota_problems:  # the jobs' figures stand without them
        echo(f"kiln usage: {problem}", err=True)
    if hours:
        data["reconcile"] = _reconciled(jobs, cluster, hours, slurm_reports, left_out)
    if team is not None:
        data["teams"] = [t for t in data["teams"] if t["team"] == team]
        if hours:
            data["reconcile"]["teams"] = [t for t in data["reconcile"]["teams"] if t["team"] == team]
        data["team_gpu_hours_per_day"] = {team: data["team_gpu_hours_per_day"].get(team, [])}
        data["storage_quotas"] = [q for q in data["storage_quotas"] if q["team"] == team]
    if html_file is not None:
        from kiln.usage.html_page import HtmlUnavailable, page
        try:
            html_file.write_text(page(data), encoding="utf-8")
        except HtmlUnavailable as e:
            echo(str(e), err=True)
            sys.exit(EXIT_BAD_INPUT)
        except OSError as e:
            echo(f"--html {html_file}: {e.strerror}", err=True)
            sys.exit(EXIT_BAD_INPUT)
    if as_json:
        echo(json.dumps(data, indent=1))
    elif as_csv:
        buf = io.StringIO()
        keys = list(data["teams"][0]) if data["teams"] else ["team"]
        writer = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
        writer.writeheader()
        writer.writerows([{k: spreadsheet_cell(v) for k, v in row.items()} for row in data["teams"]])
        echo(buf.getvalue().rstrip("\n"))
    else:
        _print(data, start, end)
    sys.exit(EXIT_OK)


def _reconciled(jobs: list, cluster, hours: tuple[float, float], slurm_reports: list, left_out: str) -> dict:
    """kiln's GPU-hours per team over the window's whole hours beside sreport's and sshare's."""
    from checks.parsers import slurm_usage
    from kiln.usage import reconcile as reconcile_mod
    from kiln.usage import report as report_mod

    since, until = hours
    if until <= since:
        return {"since": since, "until": until, "teams": [],
                "note": "no whole hour of the window has ended yet: sreport counts slurmdbd's hourly rollups"}
    used, bad_sreport = slurm_usage.read_sreport_gpu(slurm_reports[0][1].stdout)
    shares, bad_sshare = slurm_usage.read_sshare(slurm_reports[1][1].stdout)
    for what, bad in (("sreport", bad_sreport), ("sshare", bad_sshare)):
        if bad.problem(what):
            echo(f"kiln usage: {bad.problem(what)}", err=True)
    ours = report_mod.report(jobs, cluster, since, until, cluster.setting("usage_gpu_hour_prices"),
                             cluster.setting("usage_currency"))
    total = sum(t.shares for t in cluster.teams)
    intended = {t.name: t.shares / total for t in cluster.teams}
    rows = reconcile_mod.reconcile(ours["teams"], used, shares, left_out, intended,
                                   slurm_usage.root_children(slurm_reports[1][1].stdout))
    return {"since": since, "until": until, "teams": rows,
            "note": "whole hours only: sreport counts slurmdbd's hourly rollups, an hour once it has ended"}


def spreadsheet_cell(value):
    """A CSV cell a spreadsheet shows as text: a string starting with = + - @, a tab or a carriage return
    (a formula to Excel, LibreOffice and Google Sheets) gets a leading apostrophe, as OWASP advises.
    Numbers stay numbers."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def _money(value: float | None, currency: str) -> str:
    return "-" if value is None else f"{value:,.2f} {currency}"


def _print(data: dict, start: datetime, end: datetime) -> None:
    cur = data["currency"]
    echo(f"usage of cluster {data['cluster']} from {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC "
         f"({data['totals']['jobs']} jobs)")
    echo(f"  {'team':<16} {'GPU-h':>10} {'CPU-h':>10} {'share':>13} {'cost':>16} {'per useful GPU-h':>18} "
         f"{'idle GPU-h':>11} {'lost GPU-h':>11} {'per kept GPU-h':>16}")
    for t in data["teams"]:
        share = f"{100 * t['share_used']:.0f}%/{100 * t['share_target']:.0f}%" if t["share_target"] is not None else "-"
        echo(f"  {t['team']:<16} {t['gpu_hours']:>10.2f} {t['cpu_hours']:>10.2f} {share:>13} "
             f"{_money(t['cost'], cur):>16} {_money(t['cost_per_useful_gpu_hour'], cur):>18} {t['idle_gpu_hours']:>11.2f} "
             f"{t['lost_gpu_hours']:>11.2f} {_money(t['cost_per_kept_gpu_hour'], cur):>16}")
    for r in data["reservations"]:
        used = f"{100 * r['used_share']:.0f}%" if r["used_share"] is not None else "-"
        echo(f"  reservation {r['reservation']} ({r['nodes']}): {r['used_gpu_hours']:.2f} of {r['reserved_gpu_hours']:.2f}"
             f" GPU-h used ({used})")
    for q in data.get("storage_quotas", []):
        if not q["set"]:
            echo(f"  storage {q['team']} {q['path']}: no quota set on volume {q['volume']} (kiln deploy sets {q['limit']})")
            continue
        used = "-" if q["used_bytes"] is None else f"{q['used_bytes'] / 2**30:.2f} GiB"
        share = "" if q["used_share"] is None else f" ({100 * q['used_share']:.0f}%)"
        echo(f"  storage {q['team']} {q['path']}: {used} of {q['limit_bytes'] / 2**30:.2f} GiB{share}"
             + (", at its limit: writes are refused" if q["exceeded"] else ""))
    if data["top_cost_jobs"]:
        echo("  top jobs by cost: " + ", ".join(f"{j['job']} ({j['team']}/{j['user']}, {_money(j['cost'], cur)})"
                                                 for j in data["top_cost_jobs"][:5]))
    rec = data.get("reconcile")
    if rec is not None:
        since, until = (datetime.fromtimestamp(t, timezone.utc) for t in (rec["since"], rec["until"]))
        echo(f"  against Slurm, {since:%Y-%m-%d %H:%M} to {until:%Y-%m-%d %H:%M} UTC ({rec['note']}):")
        for t in rec["teams"]:
            gap = "-" if t["difference_share"] is None else f"{100 * t['difference_share']:+.1f}%"
            fair = ("-" if t["fair_share_used"] is None or t["fair_share_target"] is None
                    else f"{100 * t['fair_share_used']:.0f}%/{100 * t['fair_share_target']:.0f}%")
            echo(f"    {t['team']:<16} kiln {t['gpu_hours']:>9.2f} GPU-h  sreport {t['sreport_gpu_hours']:>9.2f}"
                 f"  {gap:>7}  fair share used/target (sshare) {fair}" + (f"  {t['reason']}" if t["reason"] else ""))
            if t["fair_share_note"]:
                echo(f"    {'':<16} {t['fair_share_note']}")
