"""Whether the node sees the directory's users and groups as the directory gives them: SYSTEM_DIRECTORY
(the system suite, so the node-local health check runs it too).

Asked of the node's own NSS: ``getent`` through SSSD alone (``-s sss``), through the local files alone
(``-s files``) and as every program sees it (nsswitch.conf's order). It fails on what is wrong with this
node, which drains it: sssd not running (the directory's users are unknown here and their jobs fail), a
local account or group of a directory name (it hides the directory's entry, with another uid, and files
written here get the wrong owner), NSS not asking SSSD (nsswitch.conf without ``sss``). What would be
wrong on every node alike, a name the directory does not hold or a user outside the team's group, is a
warning: it is the directory's data to fix, and draining the whole cluster would not fix it. SSSD answers
from its cache while the directory is away, so a directory outage alone changes nothing here.

Expectations (``expect["system"]["directory"]``): ``{"users": {user: team}, "groups": [team, ...]}``
(kiln/check/expectations.py, from the inventory's directory teams).
"""

from __future__ import annotations

import shlex

from checks.verdict import Verdict, fail, ok, warn

MARK = "kiln-directory"
SOURCES = (("sssd", None), ("passwd-sss", "-s sss passwd"), ("passwd", "passwd"), ("passwd-files", "-s files passwd"),
           ("group-sss", "-s sss group"), ("group", "group"), ("group-files", "-s files group"))


def command(directory: dict) -> str:
    """One shell line: sssd's state, then each getent answer under a line naming it."""
    users = " ".join(shlex.quote(u) for u in sorted(directory["users"]))
    groups = " ".join(shlex.quote(g) for g in sorted(directory["groups"]))
    parts = [f"echo {MARK} sssd; systemctl is-active sssd"]
    for name, query in SOURCES[1:]:
        keys = users if query.endswith("passwd") else groups
        parts.append(f"echo {MARK} {name}; getent {query} {keys}")
    return "; ".join(parts) + "; true"


def parse(output: str) -> dict[str, list[list[str]]]:
    """section -> its lines, each split at ':' (a passwd or group entry); the sssd section holds one word."""
    sections: dict[str, list[list[str]]] = {}
    current = None
    for line in output.splitlines():
        line = line.rstrip("\n")
        if line.startswith(MARK + " "):
            current = line[len(MARK) + 1:].strip()
            sections[current] = []
        elif current is not None and line.strip():
            sections[current].append(line.strip().split(":"))
    return sections


def _entries(sections: dict, name: str, fields: int) -> dict[str, list[str]]:
    return {e[0]: e for e in sections.get(name, []) if len(e) >= fields}


def _compare(sections: dict, database: str, names: dict[str, str], active: bool, faults: list, doubts: list) -> dict:
    """Each of ``names`` (name -> how a message names it) as SSSD, the local files and NSS give it from
    ``database``: a local entry that hides the directory's, or one NSS does not ask SSSD for, is a fault of
    this node; one SSSD lacks, a doubt. Returns SSSD's entries."""
    fields, kind, remove = (7, "account", "userdel") if database == "passwd" else (4, "group", "groupdel")
    sss, seen, local = (_entries(sections, f"{database}{source}", fields) for source in ("-sss", "", "-files"))
    for name in sorted(names):
        said = names[name]
        if name in local:
            theirs = f", the directory's {sss[name][2]}" if name in sss else ""
            faults.append(f"{said} is a local {kind} here ({'uid' if fields == 7 else 'gid'} {local[name][2]}{theirs}) "
                          f"that hides the directory's: {remove} {name} on this node")
        elif name in sss and name not in seen:
            faults.append(f"SSSD knows {said} but the node's NSS does not ask it: the {database} line of "
                          "/etc/nsswitch.conf needs sss (kiln deploy)")
        elif name not in sss and active:
            doubts.append(f"the directory gives no {'user ' if fields == 7 else ''}{said}, or SSSD has not reached it yet")
    return sss


def judge(directory: dict, output: str) -> Verdict:
    sections = parse(output)
    if "sssd" not in sections:
        said = next((line.strip() for line in output.splitlines() if line.strip()), "no output")
        return fail("SYSTEM_DIRECTORY", f"the node's users could not be read ({said[:120]}): kiln deploy")
    state = " ".join(" ".join(e) for e in sections["sssd"]) or "unknown"
    users, groups = directory["users"], sorted(directory["groups"])
    faults, doubts = [], []
    if state != "active":
        faults.append(f"sssd is {state}: the directory's users ({len(users)}) are unknown here and their jobs fail on "
                      "this node (systemctl start sssd; journalctl -u sssd says why it stopped)")
    active = state == "active"
    sss = _compare(sections, "passwd", {u: f"{u} ({t})" for u, t in users.items()}, active, faults, doubts)
    gsss = _compare(sections, "group", {g: f"group {g}" for g in groups}, active, faults, doubts)
    for user in sorted(users):
        group = gsss.get(users[user])
        if user in sss and group is not None and user not in group[3].split(",") and sss[user][3] != group[2]:
            doubts.append(f"{user} is not in the directory's group {users[user]} (memberUid): the team's "
                          "directories stay shut to them")
    if faults:
        return fail("SYSTEM_DIRECTORY", "; ".join(faults + doubts))
    if doubts:
        return warn("SYSTEM_DIRECTORY", "; ".join(doubts) + ": the directory's entries are its administrators' to "
                    "fix (kiln reads them only)")
    shown = ", ".join(f"{u} {sss[u][2]}" for u in sorted(users))
    return ok("SYSTEM_DIRECTORY", f"from the directory through SSSD: users {shown or '(none listed)'}; groups "
              + ", ".join(f"{g} {gsss[g][2]}" for g in groups))
