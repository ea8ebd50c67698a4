"""The isolation suite's probes of Slurm (checks/isolation.py runs them): what a team's probe account is
shown of other users by slurmctld and by slurmdbd, and whether either takes an operator's change from it.

The probe account is a real user with munge credentials like any other, so it reaches both daemons; what
keeps it out is PrivateData (slurm.conf for slurmctld, slurmdbd.conf for slurmdbd) and AdminLevel.

- ISOLATION_JOBS: squeue (slurmctld) shows the probe a job of another user (``PrivateData=jobs``);
- ISOLATION_USAGE: sshare (slurmctld) shows it another user's usage and shares (``PrivateData=usage``);
- ISOLATION_ACCOUNTING: sacctmgr (slurmdbd) shows it another user's associations: who is in which account
  (``PrivateData=users`` in slurmdbd.conf);
- ISOLATION_SLURM_ADMIN: slurmctld takes a reservation from it, or slurmdbd a new account (what limits,
  shares and QoS are set on): it is an operator or administrator, a coordinator of an account (who may
  add accounts below it), or SlurmUser. What either took is deleted
  again at once, as root.

Each listing is asked of root first (once for all probe accounts): a probe passes only when root is shown
something of another user that the probe was not, or says there was nothing to hide.
"""

from __future__ import annotations

import shlex
from typing import Callable

from checks.node import Node, as_user
from checks.parsers import sacctmgr, slurm_usage, squeue
from checks.parsers.delimited import Records, separator
from checks.verdict import Verdict, fail, ok

JOB_FIELDS = ("UserName",)
ASSOCIATION_FIELDS = ("Account", "User")
Reader = Callable[[str], "tuple[list[str], Records]"]


def _queue() -> tuple[list[str], Reader]:
    sep = separator()  # made for this one call
    return squeue.jobs_command(sep, JOB_FIELDS), lambda text: _names(squeue.read_jobs(text, sep, JOB_FIELDS), "UserName")


def _shares() -> tuple[list[str], Reader]:
    return slurm_usage.sshare_command(), slurm_usage.sshare_users


def _associations() -> tuple[list[str], Reader]:
    return (sacctmgr.show_command("association", fields=ASSOCIATION_FIELDS),
            lambda text: _names(sacctmgr.read(text, ASSOCIATION_FIELDS), "User"))


def _names(read: tuple[list[dict[str, str]], Records], field: str) -> tuple[list[str], Records]:
    rows, left = read
    return [row[field] for row in rows if row[field]], left


# check id -> (the listing, what it lists, the tool, the protection to name when it gets through)
LISTINGS: dict[str, tuple[Callable[[], tuple[list[str], Reader]], str, str, str]] = {
    "ISOLATION_JOBS": (_queue, "job(s)", "squeue", "set PrivateData=jobs (kiln_slurm_private_data) and kiln deploy"),
    "ISOLATION_USAGE": (_shares, "usage line(s)", "sshare", "set PrivateData=usage in slurm.conf "
                        "(kiln_slurm_private_data) and kiln deploy"),
    "ISOLATION_ACCOUNTING": (_associations, "association(s)", "sacctmgr", "set PrivateData=users in slurmdbd.conf "
                             "(kiln_slurm_private_data) and kiln deploy, which restarts slurmdbd"),
}


def shown(node: Node, check: str, user: str | None) -> tuple[list[str] | None, str]:
    """The user named by each line of ``check``'s listing when ``user`` asks (root: None), or None and why."""
    listing, _, tool, _ = LISTINGS[check]
    command, read = listing()
    out = node.run(as_user(user, *command) if user else shlex.join(command))
    if out.rc != 0:
        return None, (out.stderr or out.stdout).strip()[:200] or f"exit {out.rc}"
    names, left = read(out.stdout)
    if left.bad:
        return None, left.problem(tool)
    return names, ""


class RootView:
    """What root is shown by each listing, asked once for every probe account of the run."""

    def __init__(self, node: Node):
        self.node, self.seen = node, {}

    def __getitem__(self, check: str) -> tuple[list[str] | None, str]:
        if check not in self.seen:
            self.seen[check] = shown(self.node, check, None)
        return self.seen[check]


def listing(node: Node, probe: str, check: str, root: RootView) -> Verdict:
    """``check``'s probe: what ``probe`` is shown of other users, beside what root is."""
    _, what, tool, fix = LISTINGS[check]
    everyone, why = root[check]
    if everyone is None:
        return fail(check, f"root could not read {tool}'s answer ({why}): is Slurm up?")
    seen, why = shown(node, check, probe)
    if seen is None:
        return fail(check, f"{probe} could not read {tool}'s answer ({why}): a user is shown their own")
    foreign = [u for u in seen if u != probe]
    others = sum(1 for u in everyone if u != probe)
    if foreign:
        return fail(check, f"{tool} shows {probe} {len(foreign)} {what} of "
                    f"{', '.join(sorted(set(foreign))[:5])}: {fix}")
    if not others:
        return ok(check, f"{tool} shows root no {what} of another user: nothing {probe} could see (probe again "
                  "when others have some)")
    return ok(check, f"{tool} shows {probe} none of the {others} {what} of other users")


def _account_exists(node: Node, name: str) -> bool | None:
    """Whether slurmdbd holds account ``name``, asked as root (None: no answer kiln reads)."""
    out = node.run(shlex.join(sacctmgr.show_command("account", name, fields=("Account",))))
    if out.rc != 0:
        return None
    rows, left = sacctmgr.read(out.stdout, ("Account",))
    return None if left.bad else any(row["Account"] == name for row in rows)


def slurm_admin(node: Node, probe: str) -> Verdict:
    """An operator's change asked for as the probe: of slurmctld, a reservation ten years out and one minute
    long; of slurmdbd, a new account (what limits, shares and QoS are set on; a QoS itself takes an
    administrator, an account an operator already). Each is taken only from an operator or administrator
    (or SlurmUser), and one taken is deleted again at once, as root. Whether slurmdbd took the account is
    asked of slurmdbd, as root, never read off sacctmgr's words to the probe (which differ between releases:
    "Access/permission denied" on 22.05, "Only admins/operators/coordinators can add accounts" on 24.11);
    one an earlier run left is deleted first."""
    name = f"kiln-isolation-{probe}"
    delete = shlex.join(["sacctmgr", "-i", "delete", "account", "where", f"name={name}"])
    took = []
    out = node.run(as_user(probe, "scontrol", "create", "reservation", f"ReservationName={name}",
                           "StartTime=now+3650days", "Duration=1", "Users=root", "NodeCnt=1"))
    if out.rc == 0:
        node.run(shlex.join(["scontrol", "delete", f"ReservationName={name}"]))
        took.append("a reservation (slurmctld)")
    before = _account_exists(node, name)
    if before:
        node.run(delete)
        before = _account_exists(node, name)
    if before is not False:
        return fail("ISOLATION_SLURM_ADMIN", f"root could not tell whether slurmdbd holds account {name} (is slurmdbd "
                    f"up?){': it is still there after ' + delete if before else ''}")
    node.run(as_user(probe, "sacctmgr", "-i", "add", "account", name))
    after = _account_exists(node, name)
    if after is None:
        return fail("ISOLATION_SLURM_ADMIN", f"root could not tell whether slurmdbd took account {name} from {probe} "
                    "(is slurmdbd up?)")
    if after:
        node.run(delete)
        took.append("a new account (slurmdbd)")
    if took:
        return fail("ISOLATION_SLURM_ADMIN", f"Slurm took {' and '.join(took)} from {probe}: it is an operator or "
                    f"administrator, or coordinates an account (sacctmgr show user {probe} withcoord; set "
                    f"adminlevel=none, delete coordinator names={probe})")
    return ok("ISOLATION_SLURM_ADMIN", f"Slurm refuses an operator's changes (a reservation, a new account) from {probe}")
