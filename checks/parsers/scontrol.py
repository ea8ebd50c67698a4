"""``scontrol show job -d`` and ``scontrol -o show node`` read as records whose free text cannot forge a
field. Pure, standard library only.

scontrol prints ``key=value`` words and no JSON on the Slurm releases kiln runs (22.05 has no
``scontrol --json``). What users and admins write is printed as given: a job name holding
`` Account=other`` or a newline and ``   Account=other``, a drain reason holding a newline and another
node's line. So:

- a job's name runs from ``JobName=`` to Slurm's own ``UserId=`` line; the lines whose key is free text
  (``FREE_TEXT``) are one value each, continued by lines that are no field; every other line must be
  ``key=value`` words;
- a key that appears twice in one record, or a line that is none of these, makes the record unreadable
  (``SlurmRecordError``): never a guess;
- a node record is one line beginning ``NodeName=``; its free text comes last (``Reason=... [user@time]``,
  then ``Comment=``, ``Extra=``); a node listed twice makes the whole answer unreadable.
"""

from __future__ import annotations

import re

# Lines of ``scontrol show job`` whose value is text a user or an admin chose: the whole rest of the line
FREE_TEXT = ("Command", "WorkDir", "StdErr", "StdIn", "StdOut", "Comment", "AdminComment", "SystemComment",
             "Reservation", "Container", "ContainerID", "Extra", "MailUser", "Power", "TresPerNode",
             "TresPerTask", "CpusPerTres", "MemPerTres", "TresPerJob", "TresBind", "TresFreq")
KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_/:]*")
NODE_FREE_TEXT = ("Reason", "Comment", "Extra")


class SlurmRecordError(ValueError):
    """Output that does not parse whole: what was wrong, never a guess."""


def _words(line: str, into: dict[str, list[str]], continues: bool = False) -> None:
    """``key=value`` words into ``into`` (key -> every value given); a word without ``=`` continues the value
    before it where ``continues`` (scontrol -o show node's ``OS=Linux 6.1.0 #1 SMP ...``), else is refused."""
    last = None
    for word in line.split(" "):
        if not word:
            continue
        key, eq, value = word.partition("=")
        if eq and KEY.fullmatch(key):
            into.setdefault(key, []).append(value)
            last = key
        elif continues and last is not None:
            into[last][-1] += " " + word
        else:
            raise SlurmRecordError(f"a word that is not key=value: {word[:80]!r}")


def show_job(text: str) -> dict[str, str | list[str]]:
    """One job of ``scontrol show job -d ID``: key -> value, ``JobName`` whole, ``Nodes`` the list of its
    per-node GRES lines (``Nodes=kiln02 CPU_IDs=0 Mem=512 GRES=gpu:h100:1(IDX:0)``).

    Slurm prints the name raw (a newline in it too) and then ``\n   UserId=``: the name runs to the first
    such line. A line that is not a field (``   Key=`` words, or ``     Nodes=``) continues the free-text
    field before it (a pretty-printed JSON comment). Text that imitates fields can only add keys the
    record has already, which makes it refuse, not guess."""
    text = text.strip("\n")
    m = re.match(r"JobId=(\d{1,12}) JobName=(.*?)\n(?=   UserId=)", text, re.S)
    if m:
        name, rest = m.group(2), text[m.end():]
    else:
        head, _, rest = text.partition("\n")
        m = re.fullmatch(r"JobId=(\d{1,12}) JobName=(.*)", head, re.S)
        if not m:
            raise SlurmRecordError(f"not a job record: {head[:80]!r}")
        name = m.group(2)
    fields: dict[str, list[str]] = {"JobId": [m.group(1)], "JobName": [name]}
    nodes: list[str] = []
    free: str | None = None  # the free-text field a line that is no field continues
    for line in rest.split("\n"):
        body = line.lstrip(" ")
        key = body.split("=", 1)[0]
        is_field = "=" in body and KEY.fullmatch(key) is not None and (
            line.startswith("     Nodes=") or (line.startswith("   ") and not line.startswith("    ")))
        if not is_field:
            if free is None:
                if not line.strip():
                    continue
                raise SlurmRecordError(f"a line of no field: {line[:80]!r}")
            fields[free][-1] += "\n" + line
        elif line.startswith("     Nodes="):
            nodes.append(body)
            free = None
        elif key in FREE_TEXT:
            fields.setdefault(key, []).append(body.split("=", 1)[1])
            free = key
        else:
            _words(body, fields)
            free = None
    out: dict[str, str | list[str]] = {}
    for key, values in fields.items():
        if len(values) > 1:
            raise SlurmRecordError(f"{key}= is given {len(values)} times in one job record")
        out[key] = values[0]
    out["Nodes"] = nodes
    return out


def show_nodes(text: str) -> dict[str, dict[str, str]]:
    """``scontrol -o show node``: node name -> key -> value (Reason stripped, without its ``[user@time]``).
    Slurm prints the free text last, in the order
    Reason (ending ``[user@time]``), Comment, Extra: the first of them in the line is real, so a comment
    holding ``Reason=kiln: ...`` is no reason; Comment and Extra are not read. A word without ``=`` before
    them continues the value before it (``OS=Linux 6.1.0-18-amd64 #1 SMP ...``)."""
    out: dict[str, dict[str, str]] = {}
    for line in text.split("\n"):
        if not line.strip():
            continue
        if not line.startswith("NodeName="):
            raise SlurmRecordError(f"a line of no node: {line[:80]!r}")
        cut = min((i for i in (line.find(f" {k}=") for k in NODE_FREE_TEXT) if i >= 0), default=len(line))
        fields: dict[str, list[str]] = {}
        _words(line[:cut], fields, continues=True)
        if line.startswith(" Reason=", cut):
            m = re.match(r" Reason=(.*?) \[[^\[\]]*@[^\[\]]*\](?= Comment=| Extra=|$)", line[cut:])
            fields["Reason"] = [(m.group(1) if m else line[cut + 8:]).strip()]
        _add_record(out, fields, "NodeName", "node")
    return out


def _add_record(out: dict[str, dict[str, str]], fields: dict[str, list[str]], key: str, what: str) -> None:
    """One ``-o`` record into ``out`` under its ``key`` field; a key given twice in it, or a record listed
    twice, makes the answer unreadable."""
    doubled = [k for k, v in fields.items() if len(v) > 1]
    if doubled:
        raise SlurmRecordError(f"{doubled[0]}= is given twice in one {what} record")
    name = fields[key][0]
    if name in out:
        raise SlurmRecordError(f"{what} {name!r} is listed twice")
    out[name] = {k: v[0] for k, v in fields.items()}


def show_node_command(name: str | None = None) -> list[str]:
    """``scontrol -o show node [NAME]``: every node (or one) a line, for ``show_nodes``."""
    return ["scontrol", "-o", "show", "node", *([name] if name else [])]


def show_job_command(job: str) -> list[str]:
    """``scontrol show job -d ID``: one job with its per-node GRES lines, for ``show_job``."""
    return ["scontrol", "show", "job", "-d", job]


def show_reservation_command(name: str) -> list[str]:
    """``scontrol -o show reservation NAME``, for ``show_reservations``."""
    return ["scontrol", "-o", "show", "reservation", name]


def show_reservations(text: str) -> dict[str, dict[str, str]]:
    """``scontrol -o show reservation``: reservation name -> key -> value. Every word is ``key=value``
    (a word without ``=`` continues the value before it); a key twice in one line, or a reservation listed
    twice, makes the answer unreadable. ``No reservations in the system`` and ``Reservation X not found``
    are no reservation."""
    out: dict[str, dict[str, str]] = {}
    for line in text.split("\n"):
        if not line.strip() or line.startswith(("No reservations", "Reservation ")):
            continue
        if not line.startswith("ReservationName="):
            raise SlurmRecordError(f"a line of no reservation: {line[:80]!r}")
        fields: dict[str, list[str]] = {}
        _words(line, fields, continues=True)
        _add_record(out, fields, "ReservationName", "reservation")
    return out


SHOW_CONFIG_COMMAND = ["scontrol", "show", "config"]


def show_config(text: str) -> dict[str, str]:
    """``scontrol show config``: the running slurmctld's settings, name -> value (``AuthInfo`` ->
    ``cred_expire=30``). Each setting is a line ``Name<spaces>= value``; lines without `` = `` (the banner,
    plugin sections' headers) are left aside, and the first of a name twice (a plugin's section repeating
    it) is kept."""
    out: dict[str, str] = {}
    for line in text.split("\n"):
        name, sep, value = line.partition(" = ")
        name = name.strip()
        if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name):
            out.setdefault(name, value.strip())
    return out


PING_COMMAND = ["scontrol", "ping"]


def ping_up(text: str) -> bool:
    """Whether ``scontrol ping`` says some slurmctld is UP."""
    return re.search(r"^Slurmctld\([^)]*\) at \S+ is UP", text, re.M) is not None


# Shell tests of the deploy's waits: true once slurmctld answers UP (what ping_up reads), and once the
# node's own slurmd answers (``scontrol show slurmd`` exits 0).
PING_UP_SHELL = " ".join(PING_COMMAND) + " | grep -q 'is UP'"
SLURMD_ANSWERS_SHELL = "scontrol show slurmd"


VERSION_COMMAND = ["scontrol", "version"]


def read_version(text: str) -> str:
    """``scontrol version`` -> ``22.05.8``; anything else raises SlurmRecordError (a ValueError)."""
    m = re.fullmatch(r"\s*slurm(?:-wlm)? (\d+\.\d+\.\d+\S*)\s*", text)
    if not m:
        raise SlurmRecordError(f"scontrol version printed {text.strip()[:80]!r}: not a Slurm version kiln reads")
    return m.group(1)
