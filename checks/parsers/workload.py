"""kiln's workload probe (checks/workload_step.py): its one ``kiln-workload {JSON}`` line."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from checks.verdict import CheckError, UnknownFormat

MARK = "kiln-workload "


@dataclass(frozen=True)
class WorkloadResult:
    mode: str               # step | allreduce
    device: str             # the GPU's name, or "cpu (N threads)"
    seconds: float          # mean of the timed steps or all-reduces (wall time over count)
    busbw_gbs: float | None  # all-reduce only: bus bandwidth in GB/s


def parse_workload(text: str) -> WorkloadResult:
    """The probe's result from what it printed (other lines, e.g. a library's warnings, are passed over);
    ``CheckError`` with the probe's own words when it could not run, ``UnknownFormat`` when it printed no
    result line or one kiln does not read."""
    lines = [line for line in text.splitlines() if line.startswith(MARK)]
    if not lines:
        tail = " | ".join(line.strip() for line in text.strip().splitlines()[-2:]) or "nothing"
        raise UnknownFormat(f"the workload probe printed no result (its last lines: {tail[:300]})")
    try:
        data = json.loads(lines[-1][len(MARK):])
    except json.JSONDecodeError as e:
        raise UnknownFormat(f"the workload probe's result is cut short or malformed ({e.msg})") from None
    if not isinstance(data, dict):
        raise UnknownFormat("the workload probe's result is not an object")
    if "error" in data:
        raise CheckError(str(data["error"])[:400])
    try:
        mode, device, seconds = str(data["mode"]), str(data["device"]), float(data["seconds"])
        busbw = float(data["busbw_gbs"]) if mode == "allreduce" else None
    except (KeyError, TypeError, ValueError):
        raise UnknownFormat("the workload probe's result lacks its mode, device or seconds") from None
    if mode not in ("step", "allreduce") or not (math.isfinite(seconds) and seconds > 0) or \
            (busbw is not None and not (math.isfinite(busbw) and busbw > 0)):
        raise UnknownFormat(f"the workload probe's result holds no usable figure ({mode}, {seconds} s)")
    return WorkloadResult(mode, device, seconds, busbw)
