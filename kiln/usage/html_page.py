"""``kiln usage --html``: the usage report as one self-contained page.

Plots are made by matplotlib (its Agg/SVG backends, no display) and embedded as ``data:`` images, so the
page reads in a browser with no network, and a policy header forbids it any fetch or script. Every value
from Slurm (team, user and job names, states, reservation names) is HTML-escaped; inside the plots the
names are drawn as glyph paths, never markup.

Three plots: GPU-hours per team day by day and each team's share of the cluster's GPU-hours so far against
its fair-share target; cost per team; each team's GPU-hours split into busy, idle and not measured.
"""

from __future__ import annotations

import base64
import io
from datetime import datetime, timezone

from kiln.pages import render


class HtmlUnavailable(RuntimeError):
    """matplotlib is not installed."""


def _pyplot():
    try:
        import matplotlib
    except ImportError as e:  # pragma: no cover - the test extra installs it
        raise HtmlUnavailable("kiln usage --html needs matplotlib: pip install 'kiln[report]'") from e
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "kiln-usage"  # the same report gives the same page
    # Names are text, never TeX: a team called "a$b$c" or "$\\frac{" is drawn as written (mathtext would
    # typeset it, or fail the whole page on an unbalanced "$").
    matplotlib.rcParams["text.parse_math"] = False
    matplotlib.rcParams["text.usetex"] = False
    import matplotlib.pyplot as plt
    return plt


def _svg(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="svg", metadata={"Date": None}, bbox_inches="tight")
    fig.clf()
    return "data:image/svg+xml;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def plots(data: dict) -> dict[str, str]:
    """The report's plots as ``data:`` URIs of SVG images, by name."""
    plt = _pyplot()
    from matplotlib import dates
    teams = [t["team"] for t in data["teams"]]
    colors = {name: f"C{i % 10}" for i, name in enumerate(teams)}
    out = {}

    days = [datetime.strptime(d, "%Y-%m-%d") for d in data["days"]]
    fig, (per_day, share) = plt.subplots(1, 2, figsize=(12, 4))
    per_team = data["team_gpu_hours_per_day"]
    totals = [sum(per_team.get(name, [0.0] * len(days))[i] for name in per_team) for i in range(len(days))]
    top = 0.0
    for t in data["teams"]:
        series = per_team.get(t["team"], [0.0] * len(days))
        per_day.plot(days, series, marker="o", markersize=3, color=colors[t["team"]], label=t["team"])
        running, total_so_far, shares = 0.0, 0.0, []
        for i, value in enumerate(series):
            running += value
            total_so_far += totals[i]
            shares.append(100 * running / total_so_far if total_so_far else float("nan"))
        share.plot(days, shares, color=colors[t["team"]], label=t["team"])
        top = max([top, *(v for v in shares if v == v)])
        if t["share_target"] is not None:
            share.axhline(100 * t["share_target"], color=colors[t["team"]], linestyle="--", linewidth=1)
            top = max(top, 100 * t["share_target"])
    per_day.set_title("GPU-hours per team per day (UTC)")
    per_day.set_ylabel("GPU-hours")
    share.set_title("share of the cluster's GPU-hours so far (dashed: fair-share target)")
    share.set_ylabel("%")
    share.set_ylim(0, min(100.0, 1.25 * top) or 100.0)
    for ax in (per_day, share):
        locator = dates.AutoDateLocator(maxticks=8)
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(dates.ConciseDateFormatter(locator))
        if teams:
            ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    out["gpu_hours_over_time"] = _svg(fig)

    fig, ax = plt.subplots(figsize=(6, 0.5 + 0.4 * max(1, len(teams))))
    ax.barh(teams, [t["cost"] for t in data["teams"]], color=[colors[n] for n in teams])
    ax.set_xlabel(f"cost ({data['currency']})")
    ax.set_title("cost per team")
    ax.invert_yaxis()
    out["cost_per_team"] = _svg(fig)

    fig, ax = plt.subplots(figsize=(6, 0.5 + 0.4 * max(1, len(teams))))
    useful = [t["useful_gpu_hours"] for t in data["teams"]]
    idle = [t["idle_gpu_hours"] for t in data["teams"]]
    unmeasured = [max(0.0, t["gpu_hours"] - u - i) for t, u, i in zip(data["teams"], useful, idle)]
    ax.barh(teams, useful, color="#2a9d8f", label="GPUs busy")
    ax.barh(teams, idle, left=useful, color="#e76f51", label="GPUs idle")
    ax.barh(teams, unmeasured, left=[u + i for u, i in zip(useful, idle)], color="#bbbbbb", label="not measured")
    ax.set_xlabel("allocated GPU-hours")
    ax.set_title("idle allocation per team")
    ax.invert_yaxis()
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    out["idle_allocation"] = _svg(fig)
    plt.close("all")
    return out


def _when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%d %H:%M")


def page(data: dict) -> str:
    """The whole page (templates/pages/usage.html.j2): figures, plots and tables of one ``kiln usage``
    report."""
    images = plots(data)
    cur = data["currency"]
    totals = data["totals"]
    money = f"cost ({cur})"
    teams = [{**t, "share": f"{100 * t['share_used']:.0f}% of {100 * t['share_target']:.0f}%"
              if t["share_target"] is not None else "-"} for t in data["teams"]]
    reservations = [{**r, "window": f"{_when(r['start'])} - {_when(r['end'])}",
                     "used": f"{100 * r['used_share']:.0f}%" if r["used_share"] is not None else "-"}
                    for r in data["reservations"]]
    job_columns = [("job", "job"), ("team", "team"), ("user", "user"), ("name", "name"), ("state", "state"),
                   ("gpus", "GPUs"), ("gpu_hours", "GPU-h"), ("cost", money), ("gpu_util", "GPU util %"),
                   ("idle_gpu_hours", "idle GPU-h")]
    summary = (f"{totals['jobs']:,} jobs, {totals['gpu_hours']:,.2f} GPU-hours, {totals['cost']:,.2f} {cur}"
               + (f", {totals['cost_per_useful_gpu_hour']:,.2f} {cur} per useful GPU-hour"
                  if totals["cost_per_useful_gpu_hour"] is not None else ""))
    return render("usage.html.j2", cluster=data["cluster"], since=_when(data["since"]), until=_when(data["until"]),
                  summary=summary, images=images, teams=teams, reservations=reservations,
                  top_cost_jobs=data["top_cost_jobs"], idle_jobs=data["idle_jobs"], job_columns=job_columns,
                  team_columns=[("team", "team"), ("jobs", "jobs"), ("gpu_hours", "GPU-h"), ("cpu_hours", "CPU-h"),
                                ("share", "share used of target"), ("gpu_limit", "GPU limit"), ("cost", money),
                                ("cost_per_useful_gpu_hour", f"{cur} per useful GPU-h"),
                                ("idle_gpu_hours", "idle GPU-h"), ("lost_gpu_hours", "lost GPU-h (after the last checkpoint of runs requeued, preempted, node failed)"),
                                ("cost_per_kept_gpu_hour", f"{cur} per kept GPU-h (net of lost)"),
                                ("pending_hours", "pending h")],
                  reservation_columns=[("reservation", "reservation"), ("nodes", "nodes"), ("window", "window (UTC)"),
                                       ("gpus", "GPUs"), ("reserved_gpu_hours", "reserved GPU-h"),
                                       ("used_gpu_hours", "used GPU-h"), ("used", "used")])
