"""sshare and sreport read by their one reader (checks/parsers/slurm_usage.py), and kiln usage --reconcile:
kiln's GPU-hours per team beside sreport's over whole hours, with the reason for a gap, and sshare's fair
share (usage factors counted) beside the target."""

from __future__ import annotations

from checks.parsers import slurm_usage
from kiln.usage.reconcile import reconcile, whole_hours

# sshare -a -P -o Account,User,RawShares,NormShares,RawUsage,EffectvUsage,FairShare (Slurm 22.05, Fair Tree):
# accounts indented by depth even under -P; a scavenger team whose jobs ran at UsageFactor 0 has no usage
SSHARE = """Account|User|RawShares|NormShares|RawUsage|EffectvUsage|FairShare
root|||0.000000|1296000||1.000000
 root|root|1|0.009901|0|0.000000|1.000000
 alpha||70|0.693069|1036800|0.800000|
  alpha|ann|1|1.000000|1036800|1.000000|0.500000
 beta||30|0.297030|259200|0.200000|
  beta|ben|1|1.000000|259200|1.000000|1.000000
 scav||1|0.009901|0|0.000000|
a|line|that|is|not|sshare's
"""
# sreport -P -t Seconds -T gres/gpu cluster AccountUtilizationByUser start=... end=...: a banner, the header
SREPORT = """--------------------------------------------------------------------------------
Cluster/Account/User Utilization 2026-11-02T09:00:00 - 2026-11-02T11:59:59 (10800 secs)
Usage reported in TRES Seconds
--------------------------------------------------------------------------------
Cluster|Account|Login|Proper Name|TRES Name|Used
kilntest|root|||gres/gpu|43800
kilntest|root|root|root|gres/gpu|600
kilntest|alpha|||gres/gpu|28800
kilntest|alpha|ann|Ann|gres/gpu|28800
kilntest|beta|||gres/gpu|14400
kilntest|beta|ben|Ben|gres/gpu|14400
kilntest|beta|ben|Ben|gres/gpu|not-a-number
"""


def test_sshare_gives_each_accounts_target_and_effective_usage():
    assert slurm_usage.sshare_command()[:3] == ["sshare", "-a", "-P"]
    shares, left = slurm_usage.read_sshare(SSHARE)
    assert sorted(shares) == ["alpha", "beta", "root", "scav"]  # indents dropped; user lines left aside
    assert shares["alpha"].norm_shares == 0.693069 and shares["alpha"].effective_usage == 0.8
    assert shares["scav"].raw_usage == 0 and shares["alpha"].fair_share is None
    assert left.bad == 1 and "not|sshare's" in left.problem("sshare")  # another field count: left out, named


def test_sreport_gives_gpu_seconds_per_account_under_its_banner():
    cmd = slurm_usage.sreport_gpu_command("2026-11-02T09:00:00", "2026-11-02T12:00:00")
    assert cmd[:7] == ["sreport", "-P", "-t", "Seconds", "-T", "gres/gpu", "cluster"]
    used, left = slurm_usage.read_sreport_gpu(SREPORT)
    # an account's own line is its total; root's is the cluster's, so root's jobs are its users' lines
    assert used == {"root": 600.0, "alpha": 28800.0, "beta": 14400.0}
    assert left.bad == 1 and "not-a-number" in left.problem("sreport")  # a line of no number: named, not read
    used, left = slurm_usage.read_sreport_gpu("sreport: error: Problem talking to the database\n")
    assert used == {} and left.bad == 1 and "Problem talking" in left.problem("sreport")


def test_the_window_is_whole_hours_that_have_ended():
    h = 3600
    assert whole_hours(10 * h + 600, 14 * h + 120, 20 * h) == (10 * h, 14 * h)
    assert whole_hours(10 * h + 600, 20 * h, 12 * h + 400) == (10 * h, 12 * h)  # 12:00's rollup has run
    assert whole_hours(10 * h + 600, 20 * h, 12 * h + 5) == (10 * h, 11 * h)  # it may not have yet
    assert whole_hours(10 * h + 600, 20 * h, 10 * h + 900) == (10 * h, 10 * h)  # none has ended yet


def test_teams_within_one_percent_agree_and_a_gap_is_named():
    used, _ = slurm_usage.read_sreport_gpu(SREPORT)
    shares, _ = slurm_usage.read_sshare(SSHARE)
    rows = {r["team"]: r for r in reconcile(
        [{"team": "alpha", "gpu_hours": 8.05}, {"team": "beta", "gpu_hours": 5.0}, {"team": "scav", "gpu_hours": 2.0}],
        used, shares)}
    assert rows["alpha"]["sreport_gpu_hours"] == 8.0 and rows["alpha"]["reason"] == ""  # +0.6 %
    assert rows["alpha"]["fair_share_used"] == 0.8 and rows["alpha"]["fair_share_target"] == 0.693069
    assert rows["beta"]["difference"] == 1.0 and "not explained by kiln" in rows["beta"]["reason"]
    # scav used GPUs but sreport has none of it, and its fair-share usage is 0 (UsageFactor 0)
    assert rows["scav"]["difference_share"] is None and "no usage for this account" in rows["scav"]["reason"]
    assert rows["scav"]["fair_share_raw_usage"] == 0
    # a small account whose gap is kiln's own rounding to three decimals (CI: root, 0.011 against 0.0108)
    small = reconcile([{"team": "root", "gpu_hours": 0.011}], {"root": 0.0108 * 3600}, shares)
    assert small[0]["reason"] == "" and small[0]["difference_share"] > 0.01, small
    assert "not explained" in reconcile([{"team": "root", "gpu_hours": 0.013}], {"root": 0.0108 * 3600}, shares)[0]["reason"]
    left = reconcile([{"team": "beta", "gpu_hours": 5.0}], used, shares, left_out="1 sacct record(s) ...")
    assert "could not read some of sacct's records" in left[0]["reason"]


def test_sshare_recorded_on_the_testbed_is_read_whole():
    """Slurm 22.05.8's own output (tests/recorded): accounts indented, FairShare empty for an account."""
    from tests.conftest import REPO
    text = (REPO / "tests" / "recorded" / "sshare-slurm22.05-testbed.txt").read_text()
    shares, left = slurm_usage.read_sshare(text)
    assert left.bad == 0 and sorted(shares) == ["language", "root", "vision"]
    assert shares["vision"].norm_shares == 0.594059 and shares["language"].norm_shares == 0.39604
    assert shares["vision"].effective_usage + shares["language"].effective_usage == 1.0
    assert shares["vision"].fair_share is None and shares["root"].raw_usage > 0


def test_sreport_recorded_on_the_testbed_is_read_whole():
    """Slurm 22.05.8's own output (tests/recorded), the hour its nine jobs ran, once rolled up."""
    from tests.conftest import REPO
    text = (REPO / "tests" / "recorded" / "sreport-gpu-slurm22.05-testbed.txt").read_text()
    used, left = slurm_usage.read_sreport_gpu(text)
    assert left.bad == 0
    assert used == {"root": 0.0, "language": 720.0, "vision": 540.0}  # root ran nothing of its own


def test_a_target_unlike_the_inventorys_names_what_else_holds_shares():
    """Slurm's NormShares is a team's shares over everything under root: an account left from a team the
    inventory no longer has takes its part, and the reconcile says so, naming it."""
    stale = (SSHARE.replace(" scav||1|0.009901|", " old_team||30|0.229008|")  # 70 + 30 + 30 + root's 1
             .replace("|70|0.693069|", "|70|0.534351|").replace("|30|0.297030|", "|30|0.229008|"))
    rows = {r["team"]: r for r in reconcile(
        [{"team": "alpha", "gpu_hours": 8.0}, {"team": "beta", "gpu_hours": 4.0}], *_read(stale),
        intended={"alpha": 0.7, "beta": 0.3}, root_children=slurm_usage.root_children(stale))}
    assert slurm_usage.root_children(stale) == {"user root": 1.0, "alpha": 70.0, "beta": 30.0, "old_team": 30.0}
    assert rows["alpha"]["fair_share_intended"] == 0.7
    note = rows["alpha"]["fair_share_note"]
    assert "not the inventory's 70.0%" in note and "old_team (30)" in note and "user root (1)" in note, note
    assert "sacctmgr" in note
    # root's own share alone, against small shares: named as Slurm's, and not as something to remove
    small = SSHARE.replace("|70|0.693069|", "|7|0.636364|").replace("|30|0.297030|", "|3|0.272727|")
    rows = reconcile([{"team": "alpha", "gpu_hours": 8.0}], *_read(small), intended={"alpha": 0.7, "beta": 0.3},
                     root_children={"user root": 1.0, "alpha": 7.0, "beta": 3.0})
    assert "user root (1)" in rows[0]["fair_share_note"] and "Slurm's own share" in rows[0]["fair_share_note"]
    # the testbed's 40/60 with root's 1: within a point, nothing to say
    rows = reconcile([{"team": "alpha", "gpu_hours": 8.0}], *_read(SSHARE), intended={"alpha": 0.7, "beta": 0.3},
                     root_children=slurm_usage.root_children(SSHARE))
    assert rows[0]["fair_share_note"] == ""


def _read(sshare_text: str):
    used, _ = slurm_usage.read_sreport_gpu(SREPORT)
    shares, _ = slurm_usage.read_sshare(sshare_text)
    return used, shares
