"""The base role: what every node of the cluster has, before any other role runs.

Defaults (all from the inventory; see kiln/inventory/schema.py for each setting):

+ /etc/hosts: every inventory host with its address (``ansible_host``), so names resolve the same
  on every node without DNS; written from the inventory, never from facts of other hosts.
+ package manager: no recommended/weak packages, retries, ``kiln_package_proxy`` when set.
+ service accounts ``slurm``, ``munge`` and ``systemd-journal-upload`` (the journal's uploader to the log host,
  roles/logs.py) with fixed UID = GID from ``kiln_service_uids`` (default 980, 981, 982), created before any
  package would create them with a random one.
+ each team's group (``gid``) and users (``uid``, personal group with GID = UID, member of the team
  group, /bin/bash where users log in or run jobs and no shell elsewhere, home created unless a storage
  mount provides /home: 0700, and one kiln created is kept closed to other users, ``chmod o-rwx``, on
  every deploy).
+ ``kiln_directory``: SSSD reads the directory teams' users and groups (roles/directory.py); kiln makes
  no local account for them.
+ who may log in over SSH (roles/login_access.py): pam_access with kiln's rules in sshd's account stack:
  root, kiln's connection user and operators everywhere; each team on the login hosts its
  ``login_hosts`` names; anyone on compute nodes (pam_slurm_adopt decides); nobody else elsewhere.
+ ``kiln_operators``: the sudo package (install stage: images carry it) and /etc/sudoers.d/kiln-operators (``%GROUP ALL=(ALL:ALL) ALL``,
  NOPASSWD when ``password: false``; 0440, checked by ``visudo -c`` before it is placed); the group with
  its gid, its members (team users) in it. Unset: the file is removed, sudo left as it is.
+ limits: memlock and nofile unlimited/65536 for everyone, root included (RDMA, NCCL).
+ sysctls from ``kiln_sysctls`` in /etc/sysctl.d/90-kiln.conf, applied when the file changes.
+ login hosts (the controllers where there are none): all of one user's login sessions together get
  ``kiln_login_user_limits`` (a drop-in for every user-UID.slice: CPUQuota, MemoryMax, TasksMax; root's
  user-0.slice is given its own drop-in of the same name, which wins, lifting them), then
  ``systemctl daemon-reload``, which applies them to slices already running. Elsewhere, or with the setting
  null, the drop-ins are removed.
+ time: chrony, with ``kiln_ntp_servers`` when set; not started in containers (the host keeps the
  clock there, and chrony cannot set it).

Stages: ``install`` holds what a node image carries (packages, package manager settings, service
accounts, limits) and nothing of the cluster's make-up; ``configure`` writes the cluster's own files
(/etc/hosts, team users, chrony servers, sysctls) and starts services.
"""

from __future__ import annotations

import posixpath

from pyinfra.operations import server

from kiln.inventory.schema import service_uids
from kiln.shell import quote
from roles import directory, login_access
from roles.context import NodeContext, render, when_changed
from roles.operations import DAEMON_RELOAD, accounts, managed_directory, path_absent, pinned_packages, service_restarted, service_running


def install(ctx: NodeContext) -> None:
    cluster, platform = ctx.cluster, ctx.platform
    proxy = cluster.setting("package_proxy")
    if platform.uses_apt:
        ctx.put("/etc/apt/apt.conf.d/90kiln", render("base/apt.conf.j2", proxy=proxy), mode="644",
                name="base: apt settings")
    else:
        ctx.put("/etc/dnf/dnf.conf", render("base/dnf.conf.j2", proxy=proxy), mode="644", name="base: dnf settings")
    _accounts(ctx, service=True)
    directory.install(ctx)
    ctx.put("/etc/security/limits.d/90-kiln.conf", render("base/limits.conf.j2"), mode="644",
            name="base: memlock and nofile limits")
    pinned_packages(name="base: chrony", ctx=ctx, packages={platform.chrony_package: None})
    if cluster.setting("operators"):  # in the image: a package added at configure would read as drift
        pinned_packages(name="base: sudo", ctx=ctx, packages={"sudo": None})


def account_specs(cluster, platform, node) -> tuple[list[tuple[str, int, bool]], list[dict]]:
    """(groups, users) every node must have: service accounts and the teams' users, fixed IDs."""
    homes = "/home" in {m.path for m in node.storage_mounts}
    groups: list[tuple[str, int, bool]] = []
    users: list[dict] = []
    for account, uid in sorted(service_uids(cluster.setting("service_uids")).items()):
        groups.append((account, uid, True))
        users.append({"name": account, "uid": uid, "group": account, "groups": [], "shell": platform.nologin,
                      "home": f"/var/lib/{account}", "create_home": False, "system": True})
    operators = cluster.setting("operators")
    if operators:
        groups.append((operators.group, operators.gid, False))
    shell = "/bin/bash" if login_access.users_shell_here(cluster, node) else platform.nologin
    for team in cluster.teams:
        if team.directory:  # SSSD gives its group and users (roles/directory.py): no local account
            continue
        if team.gid is not None:
            groups.append((team.name, team.gid, False))
        for user in team.users:
            groups.append((user.name, user.uid, False))
            also = [operators.group] if operators and user.name in operators.users else []
            users.append({"name": user.name, "uid": user.uid, "group": user.name,
                          "groups": ([team.name] if team.gid is not None else []) + also, "shell": shell,
                          "home": f"/home/{user.name}", "create_home": not homes, "system": False})
        probe = team.probe()
        if probe:  # the isolation suite's account: what a user of the team can reach, and no login
            groups.append((probe.name, probe.uid, False))
            users.append({"name": probe.name, "uid": probe.uid, "group": probe.name,
                          "groups": [team.name] if team.gid is not None else [], "shell": platform.nologin,
                          "home": "/nonexistent", "create_home": False, "system": False})
    return groups, users


def _accounts(ctx: NodeContext, service: bool) -> None:
    """The service accounts (install: before any package creates them) or the teams' (configure)."""
    groups, users = account_specs(ctx.cluster, ctx.platform, ctx.node)
    services = {u["name"] for u in users if u["system"]}
    if service:
        accounts(name="base: service accounts, fixed IDs", ctx=ctx,
                 groups=[g for g in groups if g[0] in services], users=[u for u in users if u["system"]])
        return
    teams = [g for g in groups if g[0] not in services]
    for user in users:
        if user["create_home"] and not user["system"]:
            ctx.watch_path(user["home"])  # closed to other users (operations.accounts)
    if teams:
        accounts(name=f"base: {len(users) - len(services)} team users, fixed IDs", ctx=ctx,
                 groups=teams, users=[u for u in users if not u["system"]])


SSHD_CONF = "/etc/ssh/sshd_config.d/00-kiln.conf"  # before any other drop-in: sshd takes the first value


def _sshd(ctx: NodeContext) -> None:
    """sshd takes keys only (no password, no keyboard-interactive) unless kiln_ssh_password_login; a
    running sshd reloads after its configuration tested whole (sshd -t), so a bad file never locks out."""
    conf = ctx.put(SSHD_CONF, render("base/sshd.conf.j2", password=ctx.cluster.setting("ssh_password_login")),
                   mode="644", name="base: sshd takes keys only")
    service = quote(ctx.platform.ssh_service)
    server.shell(name="base: reload sshd (if its drop-in changed)",
                 commands=[f"systemctl is-active -q {service} || exit 0; /usr/sbin/sshd -t && systemctl reload {service}"],
                 _if=when_changed(conf))


USER_SLICES = "/etc/systemd/system/user-.slice.d/50-kiln.conf"
# the same name in the more specific directory wins over the user-.slice.d one: root is not held back
ROOT_SLICE = "/etc/systemd/system/user-0.slice.d/50-kiln.conf"
ROOT_UNLIMITED = ["CPUQuota=", "MemoryMax=infinity", "TasksMax=infinity"]


def login_slice_files(limits) -> list[tuple[str, str]]:
    """(path, content) of the two slice drop-ins for ``limits`` (kiln_login_user_limits): every user's, root's."""
    header = "# Written by kiln (kiln_login_user_limits). Do not edit.\n[Slice]\n"
    return [(USER_SLICES, header + "\n".join(limits.slice_lines()) + "\n"),
            (ROOT_SLICE, header + "\n".join(ROOT_UNLIMITED) + "\n")]


def _login_limits(ctx: NodeContext) -> None:
    limits = ctx.cluster.setting("login_user_limits")
    if limits is None or ctx.node.name not in {h.name for h in ctx.cluster.user_logins}:
        removed = []
        for path in (USER_SLICES, ROOT_SLICE):
            ctx.watch_path(path)
            removed.append(path_absent(name=f"base: no {path}", ctx=ctx, path=path))
        server.shell(name="base: lift the login limits (if removed)", commands=[DAEMON_RELOAD], _if=when_changed(*removed))
        return
    for folder in (posixpath.dirname(USER_SLICES), posixpath.dirname(ROOT_SLICE)):
        ctx.watch_path(folder)
        managed_directory(name=f"base: {folder}", ctx=ctx, path=folder, user="root", group="root", mode="755")
    written = [ctx.put(path, content, mode="644", name=f"base: {what}")
               for (path, content), what in zip(login_slice_files(limits), ("limits of each user's login sessions",
                                                                          "root's login sessions unlimited"))]
    server.shell(name="base: apply the login limits (if changed)", commands=[DAEMON_RELOAD], _if=when_changed(*written))


SUDOERS = "/etc/sudoers.d/kiln-operators"


def _sudo(ctx: NodeContext) -> None:
    """The operators group's sudo rule, checked whole by visudo before it replaces the file; none without
    kiln_operators (sudo itself is then not installed by kiln, nor removed)."""
    operators = ctx.cluster.setting("operators")
    ctx.watch_path(SUDOERS)
    if not operators:
        path_absent(name=f"base: no {SUDOERS}", ctx=ctx, path=SUDOERS)
        return
    ctx.put(SUDOERS, operators.sudoers(), mode="440", name="base: sudo for the operators group",
            check="visudo -cqf {}")


def configure(ctx: NodeContext) -> None:
    cluster, platform = ctx.cluster, ctx.platform
    hosts = [(h.address, h.name) for h in cluster.hosts.values()]
    ctx.put("/etc/hosts", render("base/hosts.j2", cluster_name=cluster.name, hosts=hosts), mode="644",
            name="base: /etc/hosts from the inventory")
    directory.configure(ctx)  # first: the directory's groups name team directories and pam_access rules
    _accounts(ctx, service=False)
    servers = cluster.setting("ntp_servers")
    if servers:
        ctx.mark("chrony_conf", ctx.put(platform.chrony_conf, render("base/chrony.conf.j2", servers=servers),
                                        mode="644", name="base: chrony servers"))
    _sshd(ctx)
    login_access.configure(ctx)
    _sudo(ctx)
    _login_limits(ctx)
    sysctls = sorted(ctx.node.sysctls.items())
    if sysctls:
        conf = ctx.put("/etc/sysctl.d/90-kiln.conf", render("base/sysctl.conf.j2", sysctls=sysctls), mode="644",
                       name="base: sysctls")
        server.shell(name="base: apply sysctls (if changed)", commands=["sysctl -q -p /etc/sysctl.d/90-kiln.conf"],
                     _if=when_changed(conf))
    if not ctx.in_container:
        unit = ctx.watch_unit(ctx.platform.chrony_service)
        service_running(name="base: chrony running", ctx=ctx, unit=unit)
        if ctx.marks.get("chrony_conf"):
            # The package starts chrony with its own servers: restart even right after a start.
            service_restarted(name="base: restart chrony (if its servers changed)", unit=unit,
                              _if=when_changed(*ctx.marks["chrony_conf"]))
