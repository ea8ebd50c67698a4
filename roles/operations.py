"""kiln's own pyinfra operations: read facts, compare, yield only the commands that close the gap."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import operation
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.rpm import RpmPackages

from kiln.inventory.schema import Team
from roles.facts import AptHeldPackages, DnfVersionLocks, SlurmAccountingState

APT_INSTALL = ("DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends --allow-downgrades "
               "-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold")


@operation()
def pinned_packages(packages: dict[str, str | None], apt: bool = True):
    """
    Install packages, each at its exact version when one is given, and hold the versioned ones.

    + packages: name -> exact version (``22.05.8-4+deb12u3``), or None for "any version, not held"
    + apt: True on Debian/Ubuntu (apt-get, apt-mark hold); False on Rocky (dnf, dnf versionlock)

    A held package that must move to a new pin is unheld, installed at the pin and held again, so a
    plain ``apt-get upgrade`` never moves it and only a changed pin does. The package index is
    refreshed only when something must be installed.

    .. code:: python

        pinned_packages(packages={"slurmd": "22.05.8-4+deb12u3", "munge": None})
    """
    if apt:
        installed = host.get_fact(DebPackages)
        held = set(host.get_fact(AptHeldPackages))
    else:
        installed = host.get_fact(RpmPackages)
        held = set(host.get_fact(DnfVersionLocks))
    missing = [name for name, version in packages.items()
               if name not in installed or (version and version not in installed[name])]
    pinned = [name for name, version in packages.items() if version]
    if not apt and pinned and "python3-dnf-plugin-versionlock" not in installed:
        missing.insert(0, "python3-dnf-plugin-versionlock")
    spec = (lambda n: f"{n}={packages[n]}" if packages.get(n) else n) if apt else \
        (lambda n: f"{n}-{packages[n]}" if packages.get(n) else n)
    unhold = sorted(set(missing) & held)
    if missing:
        if unhold:
            yield ("apt-mark unhold " if apt else "dnf -q versionlock delete ") + " ".join(unhold)
        if apt:
            yield "apt-get update -q"
            yield f"{APT_INSTALL} {' '.join(shlex.quote(spec(n)) for n in missing)}"
        else:
            yield f"dnf install -y -q {' '.join(shlex.quote(spec(n)) for n in missing)}"
    hold = sorted(n for n in pinned if n not in held or n in unhold)
    if hold:
        if apt:
            yield "apt-mark hold " + " ".join(hold)
        else:
            yield "dnf -q versionlock add " + " ".join(shlex.quote(spec(n)) for n in hold)


def _grp_tres(team: Team) -> str:
    return f"gres/gpu={team.gpu_limit}" if team.gpu_limit is not None else ""


_WAIT_FOR_DBD = ("for i in $(seq 120); do sacctmgr -nP show cluster >/dev/null 2>&1 && break; sleep 1; done; "
                 "sacctmgr -nP show cluster >/dev/null || { echo 'slurmdbd did not answer in 120 s' >&2; exit 1; }")


@operation()
def slurm_accounts(cluster: str, teams: list[Team]):
    """
    Register the cluster in the accounting database and make each team an account with its fair-share
    shares, GPU limit (``GrpTRES=gres/gpu=N``) and users.

    + cluster: Slurm ClusterName
    + teams: the inventory's teams

    Users or accounts that are not in the inventory are left alone (removing them could orphan
    running jobs); kiln reports only what it changes. When slurmdbd is not reachable while the
    deploy is prepared (a fresh controller), the commands wait for it and check each item first.
    """
    state = host.get_fact(SlurmAccountingState, cluster=cluster)
    if not state.reachable:
        yield _WAIT_FOR_DBD
        yield (f"sacctmgr -nP show cluster format=cluster | grep -qx {shlex.quote(cluster)} "
               f"|| sacctmgr -i add cluster {shlex.quote(cluster)}")
        for team in teams:
            name = shlex.quote(team.name)
            tres = f"GrpTRES={_grp_tres(team)}" if team.gpu_limit is not None else ""
            yield (f"sacctmgr -nP show account {name} format=account | grep -qx {name} "
                   f"|| sacctmgr -i add account {name} Cluster={cluster} Fairshare={team.shares} {tres}").rstrip()
            yield (f"sacctmgr -i modify account where name={name} cluster={cluster} set Fairshare={team.shares} "
                   f"GrpTRES={_grp_tres(team) or 'gres/gpu=-1'} >/dev/null")
            for user in team.users:
                uname = shlex.quote(user.name)
                yield (f"sacctmgr -nP show assoc cluster={cluster} account={name} user={uname} format=user "
                       f"| grep -qx {uname} || sacctmgr -i add user {uname} Account={name} Cluster={cluster}")
        return
    if not state.cluster_registered:
        yield f"sacctmgr -i add cluster {shlex.quote(cluster)}"
    for team in teams:
        name = shlex.quote(team.name)
        current = state.account(team.name)
        if current is None:
            tres = f" GrpTRES={_grp_tres(team)}" if team.gpu_limit is not None else ""
            yield f"sacctmgr -i add account {name} Cluster={cluster} Fairshare={team.shares}{tres}"
        elif current.fairshare != str(team.shares) or current.grp_tres != _grp_tres(team):
            yield (f"sacctmgr -i modify account where name={name} cluster={cluster} set Fairshare={team.shares} "
                   f"GrpTRES={_grp_tres(team) or 'gres/gpu=-1'}")
        present = state.users(team.name)
        for user in team.users:
            if user.name not in present:
                yield f"sacctmgr -i add user {shlex.quote(user.name)} Account={name} Cluster={cluster}"


def settled(service: str, seconds: float = 3.0) -> str:
    """A command that fails unless ``service`` stays active for ``seconds`` after a (re)start: a
    daemon can exit right after systemd called its start a success (slurmd with a bad gres.conf)."""
    steps = max(1, int(seconds / 0.5))
    return (f"for i in $(seq {steps}); do sleep 0.5; systemctl is-active --quiet {service} || "
            f"{{ echo '{service} stopped right after it started:' >&2; "
            f"journalctl -u {service} -n 15 --no-pager -o cat >&2; "
            f"tail -n 15 /var/log/slurm/{service}.log >&2 2>/dev/null; exit 1; }}; done")
