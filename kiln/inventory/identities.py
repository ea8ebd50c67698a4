"""Names and numbers that must be unique across the whole inventory: host names (case-insensitively, as
DNS and Slurm compare them), and the user and group IDs and names every node gets from the base role.

Each check adds errors naming the file, line and key; none of them reads anything but the inventory.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kiln.inventory.loader import RawInventory
from kiln.inventory.schema import service_uids

# Groups every supported OS has already: a team or user of the same name would take it over
SYSTEM_GROUPS = frozenset({"root", "daemon", "bin", "sys", "adm", "tty", "disk", "wheel", "sudo", "staff", "users",
                           "nogroup", "nobody", "shadow", "utmp", "video", "render", "audio", "kvm", "input",
                           "systemd-journal", "ssh", "sshd", "docker", "mysql", "munge", "slurm"})


# Accounts the packages of kiln's roles create on nodes (base: chrony, sshd, apt, systemd; slurm: slurm,
# munge; accounting: mysql; monitoring: prometheus; nvidia_driver: nvidia-persistenced; storage servers:
# statd, _rpc, gluster): a team user of the same name would be that daemon on every node.
DAEMON_ACCOUNTS = frozenset({"root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news", "uucp",
                             "proxy", "www-data", "backup", "list", "irc", "gnats", "nobody", "_apt", "_chrony",
                             "chrony", "sshd", "messagebus", "systemd-network", "systemd-resolve",
                             "systemd-timesync", "systemd-coredump", "polkitd", "slurm", "munge", "mysql",
                             "prometheus", "nvidia-persistenced", "statd", "_rpc", "gluster", "tss", "dnsmasq"})
# Words sacctmgr reads as commands, entities or keywords, case-insensitively: a team, user, QoS or cluster
# so named breaks the deploy's sacctmgr words (seen on Slurm 22.05: `sacctmgr add qos where` and `add
# account set` answer "Need name of ... to add"; list and show read withdeleted, tree, format, ... as
# options wherever a bare name stands).
SACCTMGR_WORDS = frozenset(("add", "create", "delete", "remove", "list", "show", "modify", "update", "archive", "dump", "load",
                  "reconfigure", "shutdown", "clear", "exit", "quit", "help", "version", "verbose", "quiet",
                  "parsable", "parsable2", "immediate", "oneliner", "readonly", "noheader", "rollup", "json", "yaml",
                  "account", "accounts", "association", "associations", "cluster", "clusters", "configuration",
                  "coordinator", "coordinators", "event", "events", "federation", "federations", "instance", "job",
                  "jobs", "problem", "problems", "qos", "resource", "resources", "reservation", "reservations",
                  "runawayjobs", "stats", "transaction", "transactions", "tres", "user", "users", "wckey", "wckeys",
                  "where", "set", "withassoc", "withcoord", "withdeleted", "withsubaccounts", "withrawqoslevel",
                  "wolimits", "wopinfo", "wopi", "wopl", "woplimits", "tree", "format", "names", "name", "parent",
                  "defaultaccount", "defaultqos", "defaultwckey", "adminlevel", "fairshare", "share", "shares",
                  "description", "organization", "partition", "partitions", "all", "none"))
SLURM_OWN = {"root": "Slurm's own root account"}  # the account every association hangs from


def sacctmgr_word(name: str) -> str | None:
    """The sacctmgr word ``name`` would be read as, or None."""
    folded = name.lower()
    return folded if folded in SACCTMGR_WORDS else None


def check_slurm_names(raw: RawInventory, values: dict[str, Any], add: Any) -> None:
    """One rule for every name kiln hands to Slurm: the case Slurm keeps (it stores account, user and QoS
    names in lower case: two names that differ only in case are one to it), none of sacctmgr's words,
    not Slurm's own root account; team users none of the daemons kiln's roles install. Linear."""
    tfile, tline = raw.origin("kiln_teams")
    seen: dict[str, str] = {}  # folded name -> what first had it

    def one(name: str, what: str, file: str, key: str, line: int | None, folds: bool = True) -> None:
        word = sacctmgr_word(name)
        if word is not None:
            add(file, key, f"{what} {name!r} reads as sacctmgr's word {word!r}: rename it", line)
        if name.lower() in SLURM_OWN and what.startswith("team"):
            add(file, key, f"{what} {name!r} would take {SLURM_OWN[name.lower()]}: rename it", line)
        if folds and name != name.lower():
            add(file, key, f"{what} {name!r} has upper-case letters: Slurm keeps it as {name.lower()!r}, so kiln "
                "and Slurm would name it differently; write it in lower case", line)
        kind = what.split(" ")[0]
        other = seen.setdefault(f"{kind}:{name.lower()}", name)
        if other != name:
            add(file, key, f"{what} {name!r} and {other!r} differ only in case: Slurm reads them as one", line)

    for i, team in enumerate(values.get("kiln_teams", [])):
        one(team.name, "team", tfile, f"kiln_teams[{i}].name", tline)
        for j, user in enumerate(team.users):
            key = f"kiln_teams[{i}].users[{j}].name"
            one(user.name, "user", tfile, key, tline)
            if user.name.lower() in DAEMON_ACCOUNTS:
                add(tfile, key, f"user {user.name!r} is the account of a daemon kiln's roles install: rename the user",
                    tline)
    qfile, qline = raw.origin("kiln_qos")
    for i, q in enumerate(values.get("kiln_qos", [])):
        one(q.name, "QoS", qfile, f"kiln_qos[{i}].name", qline)
    name = values.get("kiln_cluster_name")
    if isinstance(name, str):
        cfile, cline = raw.origin("kiln_cluster_name")
        one(name, "cluster", cfile, "kiln_cluster_name", cline)


def check_host_names(raw: RawInventory, add: Any) -> None:
    """Host names differ case-insensitively (gpu01 and GPU01 are one machine to DNS and to Slurm)."""
    by_folded: dict[str, list[str]] = defaultdict(list)
    for name in raw.hosts:
        by_folded[name.lower()].append(name)
    for names in by_folded.values():
        if len(names) > 1:
            second = names[1]
            add(raw.files.host_source.get(second, raw.files.sources[0]), second,
                f"host names {' and '.join(repr(n) for n in names)} differ only in case: they name one machine; "
                "keep one", raw.files.host_line.get(second))


def check_ids(raw: RawInventory, values: dict[str, Any], add: Any) -> None:
    """Every uid and every gid names one account or group; no team or user takes a system group's name."""
    file, line = raw.origin("kiln_teams")
    uids: dict[int, str] = {}
    gids: dict[int, str] = {}
    group_names: dict[str, str] = {}
    for account, uid in service_uids(values.get("kiln_service_uids", {})).items():
        uids[uid] = gids[uid] = group_names[account] = f"service account {account}"
    for i, team in enumerate(values.get("kiln_teams", [])):
        where = f"kiln_teams[{i}]"
        if team.name in SYSTEM_GROUPS or team.name in group_names:
            add(file, f"{where}.name", f"team {team.name!r} would take the name of "
                f"{group_names.get(team.name, 'a system group')}: rename the team", line)
        if team.gid is not None:
            if team.gid in gids and gids[team.gid] != f"team {team.name}":
                add(file, f"{where}.gid", f"gid {team.gid} of team {team.name!r} is already {gids[team.gid]}'s", line)
            gids.setdefault(team.gid, f"team {team.name}")
            group_names.setdefault(team.name, f"team {team.name}")
        probe = team.probe()
        probe_key = f"{where}.probe_uid" if team.probe_uid is not None else f"{where}.probe_user"
        for key, user in [(f"{where}.users[{j}]", u) for j, u in enumerate(team.users)] + \
                ([(probe_key, probe)] if probe else []):
            me = f"user {user.name}"
            if user.name in SYSTEM_GROUPS or group_names.get(user.name, me) != me:
                named = (f"{where}.name" if key.endswith("probe_uid") else key) if key == probe_key else f"{key}.name"
                add(file, named, f"user {user.name!r} would take the name of "
                    f"{group_names.get(user.name, 'a system group')} (each user gets a group of its own name)", line)
            for table, what in ((uids, "uid"), (gids, "gid (each user's own group has the user's uid)")):
                if user.uid is None:  # a directory team's user: the directory holds the number
                    continue
                if table.get(user.uid, me) != me:
                    add(file, key if key == probe_key else f"{key}.uid", f"uid {user.uid} of {user.name!r} is "
                        f"already the {what.split(' ')[0]} of {table[user.uid]}: give every user and group its own number",
                        line)
                table.setdefault(user.uid, me)
            group_names.setdefault(user.name, me)
    operators = values.get("kiln_operators")
    if operators is not None:
        ofile, oline = raw.origin("kiln_operators")
        me = f"the operators group {operators.group}"
        if operators.group in SYSTEM_GROUPS or group_names.get(operators.group, me) != me:
            add(ofile, "kiln_operators.group", f"group {operators.group!r} would take the name of "
                f"{group_names.get(operators.group, 'a system group')}: name it otherwise", oline)
        if gids.get(operators.gid, me) != me:
            add(ofile, "kiln_operators.gid", f"gid {operators.gid} is already the gid of {gids[operators.gid]}: give "
                "the operators group its own number", oline)
        team_users = {u.name: t for t in values.get("kiln_teams", []) for u in t.users}
        for i, name in enumerate(operators.users):
            if name not in team_users:
                add(ofile, f"kiln_operators.users[{i}]", f"{name!r} is not a user of kiln_teams: operators are team "
                    "users (their accounts exist on every node)", oline)
            elif team_users[name].directory:
                add(ofile, f"kiln_operators.users[{i}]", f"{name!r} comes from the directory (team "
                    f"{team_users[name].name!r}), and kiln's operators group is a local one: make an operator of a "
                    "user with a local account", oline)


def check_directory(raw: RawInventory, values: dict[str, Any], add: Any) -> None:
    """A team marked directory needs kiln_directory: SSSD has nowhere else to read it from; the directory's
    CA file must hold certificates (and no key)."""
    directory = values.get("kiln_directory")
    if directory is not None:
        try:
            directory.ca_certificates(raw.root)
        except ValueError as error:
            file, line = raw.origin("kiln_directory")
            add(file, "kiln_directory.ca_file", str(error), line)
        return
    file, line = raw.origin("kiln_teams")
    for i, team in enumerate(values.get("kiln_teams", [])):
        if team.directory:
            add(file, f"kiln_teams[{i}].directory", f"team {team.name!r} comes from the directory, and the inventory "
                "sets no kiln_directory (uris, base_dn, ca_file): set it, or give the team a gid and its "
                "users uids", line)


def check_team_directories(raw: RawInventory, hosts: dict[str, Any], values: dict[str, Any], add: Any) -> None:
    """A mount with team_directories needs a group for every team: the directories' group must be one number
    on every node and on the filesystem's server, which an inventory gid is, or the directory's (SSSD)."""
    mounted = next(((h, m) for h in hosts.values() for m in h.storage_mounts if m.team_directories), None)
    if mounted is None:
        return
    file, line = raw.origin("kiln_teams")
    for i, team in enumerate(values.get("kiln_teams", [])):
        if not team.has_group:
            add(file, f"kiln_teams[{i}].gid", f"team {team.name!r} has no gid, and {mounted[0].name} mounts "
                f"{mounted[1].path} with team_directories: give the team a gid (its directories' group on every "
                "node and the server)", line)
