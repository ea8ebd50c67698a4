"""nccl-tests (``all_reduce_perf`` and friends): result rows, wrong values and the average bus bandwidth."""

from __future__ import annotations

import re
from dataclasses import dataclass

from checks.verdict import CheckError


@dataclass(frozen=True)
class NcclResult:
    rows: list[tuple[int, float, int]]   # (size bytes, out-of-place busbw GB/s, #wrong out+in place)
    validated: bool                      # False when run with -c 0 (#wrong prints N/A)
    average_busbw: float | None          # "# Avg bus bandwidth" line
    out_of_bounds: int | None            # "# Out of bounds values : N"

    @property
    def max_busbw(self) -> float:
        return max(bw for _, bw, _ in self.rows)

    @property
    def wrong(self) -> int:
        return sum(w for _, _, w in self.rows)


# size count type [redop] [root] (older nccl-tests print no root) then, out of place and in place: time algbw busbw #wrong
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+[a-z0-9_]+(?:\s+[a-z]+)?(?:\s+-?\d+(?=\s))?\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)"
                  r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s*$")


# What a launcher puts before each line: "[0] ", srun -l's "0: ", mpirun --tag-output's "[1,0]<stdout>:"
_PREFIX = re.compile(r"^(?:\[\d+(?:,\d+)*\](?:<std(?:out|err)>)?:? ?|\s*\d+: )")
# Older nccl-tests print the maximum relative error instead of a count of wrong values (validation on)
MAX_RELATIVE_ERROR = 1e-3


def _wrong(value: str) -> int | None:
    """Wrong values of one column: a count (#wrong), 1 for a relative error above MAX_RELATIVE_ERROR
    (the older 'error' column), None when the run did not validate (N/A)."""
    if value.isdigit():
        return int(value)
    try:
        return int(float(value) > MAX_RELATIVE_ERROR)
    except ValueError:
        return None


def parse_nccl_tests(text: str) -> NcclResult:
    rows = []
    average = bounds = None
    validated = True
    for line in text.splitlines():
        line = _PREFIX.sub("", line, count=1)
        m = _ROW.match(line)
        if m:
            wrong = [_wrong(m.group(6)), _wrong(m.group(10))]
            validated = validated and None not in wrong
            rows.append((int(m.group(1)), float(m.group(5)), sum(w for w in wrong if w)))
            continue
        avg = re.match(r"^#\s*Avg bus bandwidth\s*:\s*([\d.]+)", line)
        if avg:
            average = float(avg.group(1))
        oob = re.match(r"^#\s*Out of bounds values\s*:\s*(\d+)", line)
        if oob:
            bounds = int(oob.group(1))
    if not rows:
        raise CheckError("nccl-tests printed no result row")
    if average is None:
        raise CheckError("nccl-tests output is cut short (no '# Avg bus bandwidth' line)")
    return NcclResult(rows, validated, average, bounds)
