"""``sshare`` and ``sreport``: the one reader of each. Pure, standard library only.

Both print ``|``-separated lines (``-P``) under a header line naming the fields; the fields are found by
that header, so a release that adds or orders columns differently is read the same, and a line with
another number of fields is left out and counted. What they print is named by kiln's inventory
(accounts and users: names kiln validates, no ``|``) or by Slurm (numbers). sshare indents an account by
its depth in the tree with spaces, even under ``-P``: the indent is dropped.

- ``sshare -a -P``: fair share as Slurm counts it now. ``RawUsage`` is billing x seconds x the QoS's
  UsageFactor, decayed by ``PriorityDecayHalfLife``; ``EffectvUsage`` is an account's share of its
  parent's usage, the figure Slurm sets beside ``NormShares`` (the target).
- ``sreport -P -t Seconds -T gres/gpu cluster AccountUtilizationByUser``: GPU-seconds per account and
  user from slurmdbd's hourly rollups, so only whole hours that have ended are in it. Its ``root`` line
  is the whole cluster; root's own jobs are its users' lines.
"""

from __future__ import annotations

from dataclasses import dataclass

from checks.parsers.delimited import Records, lines

SSHARE_FIELDS = ("Account", "User", "RawShares", "NormShares", "RawUsage", "EffectvUsage", "FairShare")


def sshare_command() -> list[str]:
    """Every account and user of the fair-share tree, with the header line."""
    return ["sshare", "-a", "-P", "-o", ",".join(SSHARE_FIELDS)]


def sreport_gpu_command(since: str, until: str) -> list[str]:
    """GPU-seconds per account and user in [since, until) (UTC, whole hours: slurmdbd's rollups)."""
    return ["sreport", "-P", "-t", "Seconds", "-T", "gres/gpu", "cluster", "AccountUtilizationByUser",
            f"start={since}", f"end={until}"]


DEPTH = "\0depth"  # a key no header names


def _table(text: str, needed: tuple[str, ...]) -> tuple[list[dict[str, str]], Records]:
    """The rows under the first line that names every field of ``needed`` (banner lines above it are
    sreport's title), each a dict by the header's names; lines of another field count are left out."""
    rows, left = [], Records()
    header: list[str] | None = None
    for line in lines(text):
        parts = [p.strip() for p in line.split("|")]
        if header is None:
            if set(needed) <= set(parts):
                header = parts
            continue
        if len(parts) != len(header):
            left.refuse(line)
            continue
        row = dict(zip(header, parts))
        row[DEPTH] = len(line) - len(line.lstrip(" "))  # sshare's indent: the line's depth in the tree
        rows.append(row)
    if header is None and text.strip():
        left.refuse(text.strip().split("\n")[0])
    return rows, left


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and value >= 0 else None  # not NaN, not negative


@dataclass(frozen=True)
class Share:
    account: str
    raw_shares: float | None
    norm_shares: float | None    # the target: the account's shares over its siblings'
    raw_usage: float | None      # billing-seconds x UsageFactor, decayed
    effective_usage: float | None  # its share of the parent's usage
    fair_share: float | None     # Slurm's fair-share factor (0..1), None for an account under Fair Tree


def read_sshare(text: str) -> tuple[dict[str, Share], Records]:
    """Accounts (lines without a user) of ``sshare_command``'s output, by name."""
    rows, left = _table(text, ("Account", "User", "RawUsage"))
    out = {}
    for row in rows:
        account = row["Account"]
        if not account or row.get("User"):
            continue
        out[account] = Share(account, _number(row.get("RawShares", "")), _number(row.get("NormShares", "")),
                             _number(row.get("RawUsage", "")), _number(row.get("EffectvUsage", "")),
                             _number(row.get("FairShare", "")))
    return out, left


def sshare_users(text: str) -> tuple[list[str], Records]:
    """The user of each user line of ``sshare_command``'s output (an account's lines have none): whose
    usage the caller was shown. Under ``PrivateData=usage`` a user is shown their own lines only."""
    rows, left = _table(text, ("Account", "User"))
    return [row["User"] for row in rows if row.get("User")], left


def root_children(text: str) -> dict[str, float]:
    """The RawShares of everything directly under root in ``sshare_command``'s output: accounts by their
    name, root's own users as ``user NAME`` (Slurm gives the root user 1 share). Each account's NormShares
    is its RawShares over these."""
    rows, _ = _table(text, ("Account", "User", "RawShares"))
    out = {}
    for row in rows:
        shares = _number(row.get("RawShares", ""))
        if row[DEPTH] != 1 or shares is None:
            continue
        out[f"user {row['User']}" if row.get("User") else row["Account"]] = shares
    return out


def read_sreport_gpu(text: str) -> tuple[dict[str, float], Records]:
    """GPU-seconds per account of ``sreport_gpu_command``'s output: an account's line without a login is its
    total; ``root``'s is the whole cluster's, so root's own jobs are the sum of its users' lines."""
    rows, left = _table(text, ("Account", "Login", "Used"))
    totals: dict[str, float] = {}
    users: dict[str, float] = {}
    for row in rows:
        if row.get("TRES Name", "gres/gpu") != "gres/gpu":
            continue
        used = _number(row["Used"])
        if used is None:
            left.refuse("|".join(v for k, v in row.items() if k != DEPTH))
            continue
        into = users if row.get("Login") else totals
        into[row["Account"]] = into.get(row["Account"], 0.0) + used
    if "root" in totals:
        totals["root"] = users.get("root", 0.0)
    return totals, left
