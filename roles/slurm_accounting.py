"""Slurm accounting from the inventory's teams: the cluster registered in slurmdbd, the QoS of
``kiln_qos`` (roles/slurm_qos.py), one account per team with its fair-share shares, GPU limit and QoS,
and the team's users in it.

Fair-share lives here: ``kiln_teams`` (name, shares, gpu_limit, users) becomes, per team,
``sacctmgr add account NAME Fairshare=SHARES GrpTRES=gres/gpu=LIMIT`` and ``sacctmgr add user``;
slurm.conf's multifactor priority weights fair-share (templates/slurm/slurm.conf.j2). Accounts or users
that are not in the inventory are left alone (removing them could orphan running jobs).

Every sacctmgr command is built once, below, from quoted words (``kiln.shell.command``): the fact
(``SlurmAccountingState``) reads the database, the operation (``slurm_accounts``) closes the gap, and
``accounts_script`` is the same work as a script for a fresh controller whose slurmdbd is not up yet.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra import host
from pyinfra.api import FactBase, operation

from checks.parsers import sacctmgr
from kiln.inventory.schema import Qos, Team
from kiln.shell import command, quote
from roles import slurm_qos


@dataclass(frozen=True)
class Association:
    account: str
    user: str          # "" for the account's own association
    fairshare: str     # as sacctmgr prints it, e.g. "60"
    grp_tres: str      # e.g. "gres/gpu=2", "" when unset
    qos: str = ""      # e.g. "high,normal" (sacctmgr sorts them)
    default_qos: str = ""


@dataclass(frozen=True)
class SlurmAccounting:
    """What the accounting database holds for one cluster."""

    reachable: bool
    cluster_registered: bool
    associations: tuple[Association, ...]
    qos: tuple[slurm_qos.QosRow, ...] = ()

    def account(self, name: str) -> Association | None:
        return next((a for a in self.associations if a.account == name and not a.user), None)

    def users(self, account: str) -> set[str]:
        return {a.user for a in self.associations if a.account == account and a.user}

    def qos_row(self, name: str) -> slurm_qos.QosRow | None:
        return next((q for q in self.qos if q.name == name), None)


class SlurmAccountingState(FactBase):
    """Clusters and associations from ``sacctmgr``; ``reachable`` is False when slurmdbd does not answer."""

    def command(self, cluster: str) -> str:
        return (f"command -v sacctmgr >/dev/null && c=$({command(*CLUSTERS)} 2>/dev/null)"
                f" && {{ echo REACHABLE {quote(cluster)}; echo \"$c\"; echo ---; "
                f"{command(*sacctmgr.show_command('assoc', f'cluster={cluster}', fields=ASSOC_FIELDS))}; echo '--- qos'; "
                f"{command(*slurm_qos.show_command())};"
                " }; true")

    @staticmethod
    def default() -> SlurmAccounting:
        return SlurmAccounting(False, False, ())

    def process(self, output: list[str]) -> SlurmAccounting:
        return parse_sacctmgr(output)


ASSOC_FIELDS = ("account", "user", "fairshare", "grptres", "qos", "defaultqos")
CLUSTERS = sacctmgr.show_command("cluster", fields=("cluster",))


def parse_sacctmgr(output: list[str]) -> SlurmAccounting:
    """Parse SlurmAccountingState's output: ``REACHABLE <cluster>``, cluster names, ``---``, then
    ``account|user|fairshare|grptres|qos|defaultqos`` lines, then ``--- qos`` and the QoS lines."""
    lines = [line.rstrip() for line in output]
    if not lines or not lines[0].startswith("REACHABLE "):
        return SlurmAccounting(False, False, ())
    cluster = lines[0].split(" ", 1)[1].strip()
    try:
        split = lines.index("---")
    except ValueError:
        return SlurmAccounting(True, False, ())
    clusters = {row["cluster"] for row in sacctmgr.read("\n".join(lines[1:split]), ("cluster",))[0]}
    end = lines.index("--- qos") if "--- qos" in lines else len(lines)
    assocs = tuple(Association(*(row[f] for f in ASSOC_FIELDS))
                   for row in sacctmgr.read("\n".join(lines[split + 1:end]), ASSOC_FIELDS)[0])
    qos = slurm_qos.rows("\n".join(lines[end + 1:]))
    return SlurmAccounting(True, cluster in clusters, assocs, qos)


def _grp_tres(team: Team) -> str:
    return f"gres/gpu={team.gpu_limit}" if team.gpu_limit is not None else ""


def add_cluster(cluster: str) -> str:
    return command("sacctmgr", "-i", "add", "cluster", cluster)


def add_account(cluster: str, team: Team) -> str:
    tres = [f"GrpTRES={_grp_tres(team)}"] if team.gpu_limit is not None else []
    return command("sacctmgr", "-i", "add", "account", team.name, f"Cluster={cluster}", f"Fairshare={team.shares}",
                   *tres)


def set_account(cluster: str, team: Team) -> str:
    return command("sacctmgr", "-i", "modify", "account", "where", f"name={team.name}", f"cluster={cluster}", "set",
                   f"Fairshare={team.shares}", f"GrpTRES={_grp_tres(team) or 'gres/gpu=-1'}")


def add_user(cluster: str, team: Team, user: str) -> str:
    return command("sacctmgr", "-i", "add", "user", user, f"Account={team.name}", f"Cluster={cluster}")


_WAIT_FOR_DBD = (f"for i in $(seq 120); do {command(*CLUSTERS)} >/dev/null 2>&1 && break; sleep 1; done; "
                 f"{command(*CLUSTERS)} >/dev/null || {{ echo 'slurmdbd did not answer in 120 s' >&2; exit 1; }}")


@operation()
def slurm_accounts(cluster: str, teams: list[Team], qos: list[Qos] = ()):
    """
    Register the cluster in the accounting database, make each QoS, and make each team an account with
    its fair-share shares, GPU limit (``GrpTRES=gres/gpu=N``), QoS and users.

    + cluster: Slurm ClusterName
    + teams: the inventory's teams
    + qos: the inventory's QoS (``kiln_qos``)

    kiln reports only what it changes. When slurmdbd is not reachable while the deploy is prepared (a
    fresh controller), the commands wait for it and check each item first.

    .. code:: python

        slurm_accounts(cluster="hopper", teams=list(cluster.teams), qos=list(cluster.setting("qos")))
    """
    state = host.get_fact(SlurmAccountingState, cluster=cluster)
    if not state.reachable:
        yield from accounts_script(cluster, teams, qos)
        return
    if not state.cluster_registered:
        yield add_cluster(cluster)
    missing = [q for q in qos if state.qos_row(q.name) is None]
    for q in missing:  # every QoS exists before one preempts another or a team names it
        yield slurm_qos.add_qos(q)
    for q in qos:
        row = state.qos_row(q.name)
        if row is None or slurm_qos.differs(row, q):
            yield slurm_qos.set_qos(q)
    for team in teams:
        current = state.account(team.name)
        if current is None:
            yield add_account(cluster, team)
        elif current.fairshare != str(team.shares) or current.grp_tres != _grp_tres(team):
            yield set_account(cluster, team)
        if current is None and team.qos or current and slurm_qos.team_qos_differs(current.qos, current.default_qos,
                                                                                      team):
            yield slurm_qos.set_team_qos(cluster, team)
        present = state.users(team.name)
        for user in team.users:
            if user.name not in present:
                yield add_user(cluster, team, user.name)


def accounts_script(cluster: str, teams: list[Team], qos: list[Qos] = ()) -> list[str]:
    """Commands that wait for slurmdbd, then add the cluster, QoS, accounts and users that are missing
    and set every QoS and every account's shares, GPU limit and QoS: right on a fresh or a converged
    database alike."""
    def show(entity: str, *conditions: str, field: str) -> str:
        return command(*sacctmgr.show_command(entity, *conditions, fields=(field,)))
    out = [_WAIT_FOR_DBD, f"{show('cluster', field='cluster')} | grep -qx {quote(cluster)} || {add_cluster(cluster)}"]
    for q in qos:
        out.append(f"{show('qos', q.name, field='name')} | grep -qx {quote(q.name)} || {slurm_qos.add_qos(q)}")
    out += [f"{slurm_qos.set_qos(q)} >/dev/null" for q in qos]
    for team in teams:
        out.append(f"{show('account', team.name, field='account')} | grep -qx {quote(team.name)} "
                   f"|| {add_account(cluster, team)}")
        out.append(f"{set_account(cluster, team)} >/dev/null")
        if team.qos:
            out.append(f"{slurm_qos.set_team_qos(cluster, team)} >/dev/null")
        for user in team.users:
            out.append(f"{show('assoc', f'cluster={cluster}', f'account={team.name}', f'user={user.name}', field='user')}"
                       f" | grep -qx {quote(user.name)} || {add_user(cluster, team, user.name)}")
    return out
