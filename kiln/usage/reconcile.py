"""``kiln usage --reconcile``: each team's GPU-hours as kiln counts them beside Slurm's own reports.

sreport counts from slurmdbd's hourly rollups: an hour is in it only once it has ended (slurmdbd rolls
it up then). kiln therefore compares whole hours, [the hour ``since`` falls in, the last hour that ended
before ``until``), and counts its own figures over that same window. Beside them, sshare's fair share as
Slurm counts it now (billing x the QoS's UsageFactor, decayed): a scavenger job of UsageFactor 0 uses
GPU-hours but no fair share. A gap over ``TOLERANCE`` gets the reason kiln can name. Pure.
"""

from __future__ import annotations

from checks.parsers.slurm_usage import Share

HOUR = 3600
TOLERANCE = 0.01  # a gap larger than 1 % of sreport's figure is named
# kiln's report gives GPU-hours to three decimals: a gap within that rounding (half a thousandth of an hour,
# 1.8 GPU-seconds) is no gap, however small both figures are (0.011 against sreport's 0.0108 is 1.5 %)
ROUNDING = 0.0005


ROLLUP_GRACE = 300  # slurmdbd rolls an hour up in the seconds after it ends: give it five minutes


def whole_hours(since: float, until: float, now: float) -> tuple[float, float]:
    """The window sreport can answer for: from the hour ``since`` is in to the last hour ended before
    ``until`` and rolled up by ``now`` (empty when none has)."""
    start = since - since % HOUR
    end = min(until, now - ROLLUP_GRACE)
    end -= end % HOUR
    return start, max(start, end)


def share_note(target: float | None, intended: float | None, root_children: dict[str, float],
               teams: set[str]) -> str:
    """Why Slurm's fair-share target (NormShares) is not the inventory's (the team's shares over all teams'),
    when they differ by more than one point: what else holds shares under root."""
    if target is None or intended is None or abs(target - intended) <= TOLERANCE:
        return ""
    others = {k: v for k, v in root_children.items() if k not in teams and v}
    if not others:
        return (f"Slurm's target {100 * target:.1f}% is not the inventory's {100 * intended:.1f}%: the accounts' "
                "shares are not the inventory's; run kiln deploy")
    held = ", ".join(f"{name} ({shares:g})" for name, shares in sorted(others.items()))
    advice = ("remove what is stale with sacctmgr, or give it a team in the inventory"
              if set(others) - {"user root"} else
              "that is Slurm's own share for root; teams' shares in the hundreds make it negligible")
    return (f"Slurm's target {100 * target:.1f}% is not the inventory's {100 * intended:.1f}%: beside the "
            f"inventory's teams, root's shares go to {held}: {advice}")


def reconcile(kiln_teams: list[dict], sreport_seconds: dict[str, float], shares: dict[str, Share],
              left_out: str = "", intended: dict[str, float] | None = None,
              root_children: dict[str, float] | None = None) -> list[dict]:
    """Per team (kiln's report rows of the whole-hour window): kiln's GPU-hours, sreport's, the gap and
    its reason; sshare's target and effective usage beside them, with the inventory's target
    (``intended``) and, where they differ, what else holds shares under root (``root_children``, from
    ``slurm_usage.root_children``)."""
    intended = intended or {}
    out = []
    for team in kiln_teams:
        name = team["team"]
        ours = team["gpu_hours"]
        theirs = sreport_seconds.get(name, 0.0) / HOUR
        gap = ours - theirs
        share = gap / theirs if theirs else (0.0 if not ours else None)
        reason = ""
        if (share is None or abs(share) > TOLERANCE) and abs(gap) > ROUNDING + 1e-9:
            if left_out:
                reason = f"kiln could not read some of sacct's records ({left_out})"
            elif name not in sreport_seconds:
                reason = "no usage for this account in the window in sreport (not in its rollups)"
            else:
                reason = ("not explained by kiln: compare the account's runs in sacct (every run, -D) with "
                          "sreport's AccountUtilizationByUser for GPUs")
        fair = shares.get(name)
        out.append({"team": name, "gpu_hours": ours, "sreport_gpu_hours": round(theirs, 3),
                    "difference": round(gap, 3), "difference_share": None if share is None else round(share, 4),
                    "reason": reason,
                    "fair_share_target": fair.norm_shares if fair else None,
                    "fair_share_intended": intended.get(name),
                    "fair_share_note": share_note(fair.norm_shares if fair else None, intended.get(name),
                                                  root_children or {}, set(intended)),
                    "fair_share_used": fair.effective_usage if fair else None,
                    "fair_share_raw_usage": fair.raw_usage if fair else None,
                    "fair_share_factor": fair.fair_share if fair else None})
    return out
