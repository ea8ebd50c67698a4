"""SchedMD's rules for upgrading Slurm, as data and pure functions (doc/html/upgrades.shtml):

+ major releases come in order (RELEASES, ``YY.MM``); a daemon reads the state and the database of at
  most two earlier majors, three from 24.11 on (25.11 accepts 25.05, 24.11 and 24.05): a jump past the
  window fails at start, kills running jobs and loses accounting;
+ no downgrade once a newer major has started (its state and database are converted);
+ the order: the database backed up, slurmdbd first (its first start converts the database and may take
  long), then slurmctld, then slurmd in batches, then the client commands; at every moment
  slurmdbd >= slurmctld >= slurmd and the commands.

kiln reads package versions as the distributions write them (Debian ``22.05.8-4+deb12u3``, an epoch
``1:24.11.5-1``, Ubuntu ``23.11.4-1.2ubuntu5``, EPEL ``22.05.9-1.el9``).
"""

from __future__ import annotations

import re

RELEASES = ("17.02", "17.11", "18.08", "19.05", "20.02", "20.11", "21.08", "22.05", "23.02", "23.11", "24.05",
            "24.11", "25.05", "25.11")
WIDER_WINDOW_FROM = "24.11"  # from here on a release reads three earlier majors, not two
ORDER = ("back up StateSaveLocation, /etc/slurm and the accounting database (mysqldump, slurmdbd stopped)",
         "slurmdbd (its first start converts the database: wait for it)",
         "slurmctld",
         "slurmd, in rolling batches",
         "client commands (login nodes)")

_VERSION = re.compile(r"^(?:\d+:)?(\d{2})\.(\d{2})\.\d+(?:[-~+.].*)?$")


def release_of(version: str) -> str | None:
    """``YY.MM`` of a package version, or None when it is not one kiln can read."""
    m = _VERSION.match(version.strip())
    return f"{m.group(1)}.{m.group(2)}" if m else None


def window(target: str) -> int:
    """How many earlier majors ``target`` can upgrade from."""
    return 3 if target >= WIDER_WINDOW_FROM else 2


def upgrade_problem(current: str, target: str) -> str | None:
    """Why going from package version ``current`` to ``target`` breaks SchedMD's rules, or None."""
    cur, new = release_of(current), release_of(target)
    if cur is None or new is None:
        bad = current if cur is None else target
        return f"{bad!r} is not a Slurm version kiln can read (YY.MM.patch with the package's suffix)"
    for r in (cur, new):
        if r not in RELEASES:
            return f"Slurm {r} is not a release kiln knows ({RELEASES[0]} to {RELEASES[-1]})"
    if new < cur:
        return f"Slurm {cur} -> {new} is a downgrade: a newer major's state and database cannot be read back"
    steps = RELEASES.index(new) - RELEASES.index(cur)
    if steps > window(new):
        allowed = ", ".join(RELEASES[RELEASES.index(new) - window(new):RELEASES.index(new)])
        reachable = max(r for r in RELEASES if r > cur and RELEASES.index(r) - RELEASES.index(cur) <= window(r))
        return (f"Slurm {cur} -> {new} skips {steps - 1} major release(s): {new} upgrades from {allowed} only; "
                f"go through {reachable} first")
    return None


def order_problem(dbd: str, controller: str, slurmd: str) -> str | None:
    """Why a cluster with these daemon versions breaks slurmdbd >= slurmctld >= slurmd, or None."""
    found = {name: release_of(v) for name, v in (("slurmdbd", dbd), ("slurmctld", controller), ("slurmd", slurmd))}
    if None in found.values():
        return "a daemon's version cannot be read: " + ", ".join(f"{k} {v!r}" for k, v in found.items())
    if not found["slurmdbd"] >= found["slurmctld"] >= found["slurmd"]:
        return ("slurmdbd >= slurmctld >= slurmd must hold at every step of an upgrade: "
                + ", ".join(f"{k} {v}" for k, v in found.items()))
    return None
