"""The values inside Slurm's outputs, read one way everywhere: times, TRES lists, counts. Pure, standard
library only.

- **Times.** Slurm prints ``2026-12-03T10:12:42`` in the local time of the command's process. kiln runs
  every Slurm command with ``SLURM_ENV`` (``TZ=UTC``, ``LC_ALL=C``), so ``epoch`` reads every time as
  UTC: a job that crosses a daylight-saving change is never an hour off. ``Unknown``, ``None``, ``N/A``
  and the empty field are "no time" (None); anything else is no Slurm time (None, and ``TIME`` does not
  match it, so a framed reader can refuse the record).
- **TRES lists.** ``cpu=2,mem=1G,node=1,billing=2,gres/gpu=2,gres/gpu:h100=2`` -> key -> value
  (``tres``); ``tres_count`` is one key's whole number (0 when absent or not a count).
"""

from __future__ import annotations

import calendar
import re
import time

# The environment of every Slurm command kiln runs: times in UTC, messages in English.
SLURM_ENV = {"TZ": "UTC", "LC_ALL": "C", "LANG": "C"}
NO_TIME = ("", "Unknown", "None", "N/A", "(null)")
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d|Unknown|None|N/A|\(null\)|", re.ASCII)
TRES = re.compile(r"(?:[a-z_]+(?:/[A-Za-z0-9_:.-]+)?=[0-9.]+[KMGTPE]?(?:,|$))*", re.ASCII)
BILLING_UNITS = 100  # Slurm's billing TRES under kiln's weights: hundredths of the currency per hour
COUNT = re.compile(r"\d{1,12}", re.ASCII)


def epoch(text: str) -> float | None:
    """A Slurm time printed under ``SLURM_ENV`` -> epoch seconds; None for no time or no Slurm time."""
    text = text.strip()
    if text in NO_TIME or not TIME.fullmatch(text):
        return None
    try:
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S")))
    except ValueError:  # 2026-02-30T..: the shape of a time, not a time
        return None


def tres(text: str) -> dict[str, str]:
    """A TRES list -> key -> value (a part without ``=`` is left out)."""
    return dict(part.split("=", 1) for part in text.strip().split(",") if "=" in part)


def tres_count(text: str, key: str = "gres/gpu") -> int:
    """One key's whole number in a TRES list (``gres/gpu`` by default); 0 when absent or not a count."""
    return count(tres(text).get(key))


def count(value: str | None) -> int:
    """A whole number Slurm printed, 0 for none or anything else."""
    value = (value or "").strip()
    return int(value) if COUNT.fullmatch(value) else 0


def env_words() -> str:
    """``SLURM_ENV`` as the words before a command in a shell line (``TZ=UTC LC_ALL=C LANG=C sacct ...``)."""
    return " ".join(f"{key}={value}" for key, value in SLURM_ENV.items())
