"""Recorded Slurm answers in the framed form kiln asks for (checks/parsers/delimited.py): the fields of a
line written with ``|`` joined by a call's separator, and the record's first field again at its end, as
``sacct --delimiter=SEP -o ...,JobIDRaw`` and ``sinfo -o %N<SEP>...<SEP>%N`` print them."""

from __future__ import annotations

SEP = "|k0123456789abcdef|"


def frame(text: str, fields: int, sep: str = SEP) -> str:
    """Each ``|``-separated line of ``text`` (its last field may hold ``|``) as one framed record of
    ``fields`` + 1 fields; lines that are not records are kept as they are."""
    out = []
    for line in text.split("\n"):
        if not line:
            continue
        parts = line.split("|", fields - 1)
        out.append(sep.join(parts + [parts[0]]) if len(parts) == fields else line)
    return "\n".join(out) + "\n"


def record(*fields: str, sep: str = SEP) -> str:
    """One framed record of ``fields`` as given (free text may hold newlines, ``|``, anything but ``sep``)."""
    return sep.join(fields) + "\n"
