"""``sacctmgr show``: the one reader of its output. Pure, standard library only.

``sacctmgr`` has no field separator of the caller's choosing: ``-P`` separates fields with ``|``. What it
prints here is named by kiln's inventory (accounts, users, QoS: names kiln validates, no ``|`` nor a
newline) or by Slurm (numbers, TRES, times), and reservations' names and flags, which an admin sets. A
line with any other number of fields is left out and counted, never guessed. Text: sacctmgr has no
``--json`` on 22.05 (seen on the testbed: "unrecognized option"); nor have sshare and sreport
(checks/parsers/slurm_usage.py).
"""

from __future__ import annotations

from checks.parsers.delimited import Records, lines


def show_command(entity: str, *conditions: str, fields: tuple[str, ...]) -> list[str]:
    """``sacctmgr -n -P show ENTITY CONDITIONS format=FIELDS``."""
    return ["sacctmgr", "-n", "-P", "show", entity, *conditions, "format=" + ",".join(fields)]


def read(text: str, fields: tuple[str, ...]) -> tuple[list[dict[str, str]], Records]:
    """``show_command``'s output: one dict a line (field -> value), and the lines left out."""
    out, left = [], Records()
    for line in lines(text):
        parts = line.split("|")
        if len(parts) != len(fields):
            left.refuse(line)
            continue
        out.append(dict(zip(fields, parts)))
    return out, left
