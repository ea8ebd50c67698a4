"""The one verdict type every check returns, and the error a parser raises on output it cannot read.

Runs on the operator's Python and on a node's system python3 (>= 3.9): standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

FAIL, WARN, OK = "fail", "warn", "ok"


class CheckError(ValueError):
    """Output a parser cannot read: malformed, truncated or from an unknown tool version.
    A check turns it into a failing verdict ``<ID>_UNREADABLE``, never into a pass."""


class UnknownFormat(CheckError):
    """Output laid out in a way kiln does not read (another tool version's columns or units): running the
    tool again gives the same, so a runner that retries stops at once."""


@dataclass(frozen=True)
class Verdict:
    id: str          # e.g. GPU_ECC_UNCORRECTED; stable, upper case, says what failed
    severity: str    # fail (drains the node) | warn (reported) | ok
    message: str     # what a person can act on, e.g. "gpu3: 2 uncorrected volatile ECC errors"
    suite: str = ""

    @property
    def failed(self) -> bool:
        return self.severity == FAIL

    def as_dict(self) -> dict:
        return {"id": self.id, "severity": self.severity, "message": self.message, "suite": self.suite}


def ok(check_id: str, message: str) -> Verdict:
    return Verdict(check_id, OK, message)


def fail(check_id: str, message: str) -> Verdict:
    return Verdict(check_id, FAIL, message)


def warn(check_id: str, message: str) -> Verdict:
    return Verdict(check_id, WARN, message)


def with_passes(verdicts: list[Verdict], ids: list[str], message: str) -> list[Verdict]:
    """``verdicts`` plus an ``ok`` for each id that has none, so every check shows in the report."""
    seen = {v.id for v in verdicts}
    return verdicts + [ok(i, message) for i in ids if i not in seen]
