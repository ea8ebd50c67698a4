"""Names and numbers that must be unique across the whole inventory: host names (case-insensitively, as
DNS and Slurm compare them), and the user and group IDs and names every node gets from the base role.

Each check adds errors naming the file, line and key; none of them reads anything but the inventory.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kiln.inventory.loader import RawInventory

# Groups every supported OS has already: a team or user of the same name would take it over
SYSTEM_GROUPS = frozenset({"root", "daemon", "bin", "sys", "adm", "tty", "disk", "wheel", "sudo", "staff", "users",
                           "nogroup", "nobody", "shadow", "utmp", "video", "render", "audio", "kvm", "input",
                           "systemd-journal", "ssh", "sshd", "docker", "mysql", "munge", "slurm"})


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
    for account, uid in values.get("kiln_service_uids", {}).items():
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
        for j, user in enumerate(team.users):
            key, me = f"{where}.users[{j}]", f"user {user.name}"
            if user.name in SYSTEM_GROUPS or group_names.get(user.name, me) != me:
                add(file, f"{key}.name", f"user {user.name!r} would take the name of "
                    f"{group_names.get(user.name, 'a system group')} (each user gets a group of its own name)", line)
            for table, what in ((uids, "uid"), (gids, "gid (each user's own group has the user's uid)")):
                if table.get(user.uid, me) != me:
                    add(file, f"{key}.uid", f"uid {user.uid} of {user.name!r} is already the {what.split(' ')[0]} of "
                        f"{table[user.uid]}: give every user and group its own number", line)
                table.setdefault(user.uid, me)
            group_names.setdefault(user.name, me)
