"""The rollout journal: one JSON record a line, each written and fsync'd before the step it names
takes effect, so a rollout whose process was killed resumes from it (``kiln patch --resume``).

Records: ``start`` (options, plan), ``step`` (node, step, phase begin|done, details), ``sample``
(compute nodes in service), ``batch`` (begin|done, timings), ``node`` (final result), ``end``.
A torn last line (the process died while writing it) is ignored.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def rollouts_dir(inventory: Path, cluster: str) -> Path:
    """Where a cluster's rollout journals live: beside the inventory, in .kiln/ (never in git)."""
    return Path(inventory).resolve().parent / ".kiln" / "rollouts" / cluster


class Journal:
    def __init__(self, path: Path, records: list[dict] | None = None):
        self.path = Path(path)
        self.records: list[dict] = list(records or [])
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.is_file():
            data = self.path.read_bytes()
            if data and not data.endswith(b"\n"):  # a torn last write: cut it before appending
                with open(self.path, "r+b") as f:
                    f.truncate(data.rfind(b"\n") + 1)
        self._file = open(self.path, "a", encoding="utf-8")

    def write(self, event: str, **fields) -> dict:
        record = {"t": round(time.time(), 3), "event": event, **fields}
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self.records.append(record)
        return record

    def close(self) -> None:
        self._file.close()

    # --- reading back ---

    def done(self, node: str, step: str) -> dict | None:
        """The ``done`` record of ``step`` on ``node``, if the step finished."""
        return next((r for r in self.records if r["event"] == "step" and r["node"] == node and r["step"] == step
                     and r["phase"] == "done"), None)

    def begun(self, node: str, step: str) -> dict | None:
        return next((r for r in reversed(self.records) if r["event"] == "step" and r["node"] == node
                     and r["step"] == step and r["phase"] == "begin"), None)

    def result(self, node: str) -> dict | None:
        return next((r for r in self.records if r["event"] == "node" and r["node"] == node), None)

    @property
    def start(self) -> dict:
        return next(r for r in self.records if r["event"] == "start")

    @property
    def ended(self) -> bool:
        return any(r["event"] == "end" for r in self.records)


def read(path: Path) -> list[dict]:
    records = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break  # torn last write
    return records


def unfinished(directory: Path) -> Path | None:
    """The newest journal in ``directory`` without an ``end`` record."""
    if not directory.is_dir():
        return None
    for path in sorted(directory.glob("*.jsonl"), reverse=True):
        records = read(path)
        if records and not any(r["event"] == "end" for r in records):
            return path
    return None
