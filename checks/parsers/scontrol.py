"""``scontrol show job -d`` and ``scontrol -o show node`` read as records whose free text cannot forge a
field, and Slurm's host lists expanded within a bound. Pure, standard library only.

scontrol prints ``key=value`` words and no JSON on the Slurm releases kiln runs (22.05 has no
``scontrol --json``). What users and admins write is printed as given: a job name holding
`` Account=other`` or a newline and ``   Account=other``, a drain reason holding a newline and another
node's line. So:

- a job's name is all of its first line after ``JobName=``; the lines whose key is free text
  (``FREE_TEXT``) are one value each; every other line must be ``key=value`` words;
- a key kiln reads that appears twice in one record, or a line that is neither, makes the record
  unreadable (``SlurmRecordError``): never a guess;
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
HOSTLIST_LIMIT = 100_000  # names one host list may stand for; more is refused before it is expanded


class SlurmRecordError(ValueError):
    """Output that does not parse whole: what was wrong, never a guess."""


def _words(line: str, into: dict[str, list[str]]) -> None:
    for word in line.split(" "):
        if not word:
            continue
        key, eq, value = word.partition("=")
        if not eq or not KEY.fullmatch(key):
            raise SlurmRecordError(f"a word that is not key=value: {word[:80]!r}")
        into.setdefault(key, []).append(value)


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
    """``scontrol -o show node``: node name -> key -> value. Slurm prints the free text last, in the order
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
        last = None
        for word in line[:cut].split(" "):
            key, eq, value = word.partition("=")
            if eq and KEY.fullmatch(key):
                fields.setdefault(key, []).append(value)
                last = key
            elif word and last is not None:
                fields[last][-1] += " " + word
        if line.startswith(" Reason=", cut):
            m = re.match(r" Reason=(.*?) \[[^\[\]]*@[^\[\]]*\](?= Comment=| Extra=|$)", line[cut:])
            fields["Reason"] = [m.group(1) if m else line[cut + 8:]]
        doubled = [k for k, v in fields.items() if len(v) > 1]
        if doubled:
            raise SlurmRecordError(f"{doubled[0]}= is given twice in one node record")
        name = fields["NodeName"][0]
        if name in out:
            raise SlurmRecordError(f"node {name!r} is listed twice")
        out[name] = {k: v[0] for k, v in fields.items()}
    return out


def hostlist_size(expression: str) -> int:
    """How many names ``expression`` stands for, counted without expanding it."""
    total = 0
    for term in _terms(expression):
        size = 1
        for ranges in re.findall(r"\[([^\[\]]*)\]", term):
            size *= sum(_range_size(r) for r in ranges.split(","))
        total += size
    return total


def expand_hostlist(expression: str, limit: int = HOSTLIST_LIMIT) -> list[str]:
    """``gpu[01-02],cpu05`` -> ['gpu01', 'gpu02', 'cpu05'] (several ranges per name, text after a bracket,
    zero padding as written); a list of more than ``limit`` names is refused before it is expanded."""
    expression = expression.strip()
    if not expression or expression in ("(null)", "None", "n/a"):
        return []
    size = hostlist_size(expression)
    if size > limit:
        raise SlurmRecordError(f"host list {expression[:60]!r} stands for {size} names, over {limit}")
    names: list[str] = []
    for term in _terms(expression):
        parts = re.split(r"\[([^\[\]]*)\]", term)
        found = [parts[0]]
        for i in range(1, len(parts), 2):
            items = [n for r in parts[i].split(",") for n in _range(r)]
            found = [f + n + parts[i + 1] for f in found for n in items]
        names += found
    for name in names:
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,128}", name):
            raise SlurmRecordError(f"host list {expression[:60]!r} names {name[:60]!r}, not a node name")
    return names


def _terms(expression: str) -> list[str]:
    """The comma-separated names of a host list, commas inside brackets kept."""
    terms, depth, start = [], 0, 0
    for i, c in enumerate(expression):
        if c == "[":
            depth += 1
            if depth > 1:
                raise SlurmRecordError(f"nested brackets in host list {expression[:60]!r}")
        elif c == "]":
            depth -= 1
            if depth < 0:
                raise SlurmRecordError(f"unbalanced brackets in host list {expression[:60]!r}")
        elif c == "," and depth == 0:
            terms.append(expression[start:i])
            start = i + 1
    if depth:
        raise SlurmRecordError(f"unbalanced brackets in host list {expression[:60]!r}")
    terms.append(expression[start:])
    if any(not t for t in terms):
        raise SlurmRecordError(f"an empty name in host list {expression[:60]!r}")
    return terms


def _bounds(text: str) -> tuple[str, str]:
    m = re.fullmatch(r"(\d{1,18})(?:-(\d{1,18}))?", text)
    if not m or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
        raise SlurmRecordError(f"{text[:40]!r} is not a range of a host list")
    return m.group(1), m.group(2) or m.group(1)


def _range_size(text: str) -> int:
    a, b = _bounds(text)
    return int(b) - int(a) + 1


def _range(text: str) -> list[str]:
    a, b = _bounds(text)
    width = len(a) if a.startswith("0") and len(a) > 1 else 0
    return [f"{i:0{width}d}" for i in range(int(a), int(b) + 1)]
