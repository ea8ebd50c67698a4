"""Records of Slurm's delimited output read in a form that no value inside them can forge.

Slurm prints user- and admin-set text (job names, comments, drain reasons) as it was given: a ``|``, a
newline or a ``key=value`` inside such a value is printed as is. Two rules make a record unforgeable:

- Fields are separated by a **separator chosen for this one call** (``separator()``: 16 random hex
  digits between two ``|``); ``sacct --delimiter``, ``sinfo -o`` and ``squeue -O``'s field suffixes take any string. A
  value written before the call cannot hold it.
- A record **begins and ends with a field Slurm itself fills** (a job id, a node name, a number: no
  newline can be in them). Records are separated by the newline between the last field of one and the
  first of the next, so a newline inside a free-text field in the middle is part of that field.

``records`` splits on the separator only (never ``str.splitlines``, which also breaks at ``\\r``,
``\\x0b``, ``\\x0c``, ``\\x1c``-``\\x1e``, ``\\x85``, U+2028 and U+2029 inside a value), and returns the records
that parse whole with a count and first example of those that do not: never a guess.

``lines`` is the one way to split output that has no free text into lines.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field


def separator() -> str:
    """A field separator for one call: ``|k<16 hex digits>|``."""
    return f"|k{secrets.token_hex(8)}|"


def lines(text: str) -> list[str]:
    """``text`` split at ``\\n`` only (what Slurm writes between records), empty lines left out."""
    return [line for line in text.split("\n") if line.strip()]


@dataclass
class Records:
    rows: list[list[str]] = field(default_factory=list)
    bad: int = 0            # records that did not parse whole
    first_bad: str = ""     # the first of them, cut to 200 characters

    def refuse(self, text: str) -> None:
        self.bad += 1
        if not self.first_bad:
            self.first_bad = text[:200]

    def problem(self, what: str) -> str:
        """'' when every record parsed; else what a person reads: how many and the first one."""
        if not self.bad:
            return ""
        return f"{self.bad} {what} record(s) that kiln cannot read whole were left out (first: {self.first_bad!r})"


def records(text: str, sep: str, fields: int, first: str = r"\S+", last: str = r"\S+") -> Records:
    """The records of ``text`` whose ``fields`` fields are separated by ``sep``, the first field matching
    ``first`` and the last ``last`` (patterns of a field Slurm fills, which hold no newline)."""
    out = Records()
    if fields < 2:
        raise ValueError("a framed record has at least two fields")
    text = text.strip("\n")
    if not text.strip():
        return out
    parts = text.split(sep)
    current: list[str] = [parts[0]]
    first_re, last_re = re.compile(first), re.compile(last)

    def close(row: list[str]) -> None:
        if len(row) == fields and first_re.fullmatch(row[0]) and last_re.fullmatch(row[-1]):
            out.rows.append(row)
        else:
            out.refuse(sep.join(row))

    for part in parts[1:]:
        if len(current) == fields - 1:
            # the last field of this record, a newline, the first field of the next one
            end, newline, start = part.partition("\n")
            current.append(end)
            close(current)
            current = [start] if newline else []
        else:
            current.append(part)
    if current and (len(current) > 1 or current[0].strip()):
        close(current)
    return out
