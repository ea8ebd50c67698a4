"""Who may log in where over SSH: pam_access in sshd's account stack, with kiln's own rules file.

Part of the base role's configure stage (never in an image: a node booted from one would read a rules
file that is not there yet). On every host kiln writes ``ACCESS_FILE`` first, then puts ``PAM_LINE`` in
sshd's PAM file before anything in its account stack that can end it early or hand it to another file
(``Platform.pam_account_anchor``: Debian's ``@include common-account``, where SSSD's profile puts
``account sufficient pam_localuser.so``; appended after it, a local user never reached it); pam_access reads the rules top down and the first that matches decides:

+ root, the user kiln connects as (``ansible_user``) and the operators group (``kiln_operators``): always;
+ on hosts where users log in (the login group, or the controllers where there is none): the groups of
  the teams whose ``login_hosts`` name the host (every team where unset; a team without a group by its
  users' names), then no one else;
+ on compute nodes: everyone (pam_slurm_adopt, later in the same stack, lets in only users with a job
  on the node);
+ on every other host (controllers, slurmdbd, monitoring and storage servers that are no login host):
  no one else. The teams' users have no shell there either (``base.account_specs``).

Only sshd's stack reads the file: ``su`` and ``runuser`` as root (kiln's isolation suite) are not affected.
"""

from __future__ import annotations

from kiln.inventory.model import Cluster, Host
from roles.context import NodeContext

ACCESS_FILE = "/etc/security/kiln-access.conf"
PAM_LINE = f"account    required     pam_access.so accessfile={ACCESS_FILE}"
PAM_REGEX = r"^account\s+required\s+pam_access\.so\s+accessfile=/etc/security/kiln-access\.conf\s*$"


def user_login_hosts(cluster: Cluster) -> set[str]:
    """Where the teams' users log in: the login hosts, or the controllers where there are none."""
    return {h.name for h in cluster.user_logins}


def admitted_teams(cluster: Cluster, host: Host) -> list:
    """The teams whose users may log in on ``host`` over SSH (none where it is no login host)."""
    if host.name not in user_login_hosts(cluster):
        return []
    return [t for t in cluster.teams if t.login_hosts is None or host.name in t.login_hosts]


def users_shell_here(cluster: Cluster, host: Host) -> bool:
    """Whether the teams' users get a login shell on ``host``: where they log in, or run jobs."""
    return host.name in user_login_hosts(cluster) or host.name in {h.name for h in cluster.compute}


def rules(cluster: Cluster, host: Host) -> list[str]:
    """pam_access's rules for ``host``, first match wins (``+ : who : from``)."""
    out = ["+ : root : ALL"]
    user = host.connection.get("ssh_user")
    if user and user != "root":
        out.append(f"+ : {user} : ALL")
    operators = cluster.setting("operators")
    if operators:
        out.append(f"+ : ({operators.group}) : ALL")
    if host.name in user_login_hosts(cluster):
        for team in admitted_teams(cluster, host):
            if team.has_group:  # a local group or the directory's, as NSS gives it
                out.append(f"+ : ({team.name}) : ALL")
            elif team.users:
                out.append(f"+ : {' '.join(u.name for u in team.users)} : ALL")
        out.append("- : ALL : ALL")
    elif host.name in {h.name for h in cluster.compute}:
        out.append("+ : ALL : ALL")  # pam_slurm_adopt decides: a job on this node, or no login
    else:
        out.append("- : ALL : ALL")
    return out


def access_file(cluster: Cluster, host: Host) -> str:
    return ("# Written by kiln (kiln_teams' login_hosts, kiln_operators). Do not edit.\n"
            "# Read by pam_access for sshd: the first line that matches a login decides.\n"
            + "\n".join(rules(cluster, host)) + "\n")


def configure(ctx: NodeContext) -> None:
    ctx.put(ACCESS_FILE, access_file(ctx.cluster, ctx.node), mode="644", name="base: who may log in over SSH")
    ctx.pam_account_line(PAM_LINE, PAM_REGEX, name="base: pam_access for sshd (kiln's rules)")
