"""One log file per run of deploy, check or patch, beside the inventory (``.kiln/logs/CLUSTER/``).

Every event of the run, per host, with the time since the run began: each operation or step started
and its result with its duration, and the full output of what failed (masked by the caller: secrets
never reach it). A line is written and flushed as it happens, so a run that dies leaves its log up to
that point. The path is printed at the end of the run. Never in git (.kiln/ is ignored).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

KEEP = 200  # newest logs kept per cluster; older ones are removed when a run starts


def logs_dir(inventory: Path, cluster: str) -> Path:
    return Path(inventory).resolve().parent / ".kiln" / "logs" / cluster


class RunLog:
    def __init__(self, inventory: Path, cluster: str, command: str, argv: list[str] | None = None):
        directory = logs_dir(inventory, cluster)
        directory.mkdir(parents=True, exist_ok=True)
        for old in sorted(directory.glob("*.log"))[:-KEEP or None]:
            old.unlink(missing_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S")
        self.path = directory / f"{stamp}-{command}.log"
        n = 1
        while self.path.exists():
            n += 1
            self.path = directory / f"{stamp}-{command}-{n}.log"
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        self._file = os.fdopen(fd, "w", buffering=1)
        self.started = time.monotonic()
        self._file.write(f"# kiln {command} {' '.join(argv or [])}".rstrip()
                         + f"\n# started {time.strftime('%Y-%m-%d %H:%M:%S %z')}\n")
        self._starts: dict[tuple[str, str], float] = {}

    def event(self, host: str | None, text: str) -> None:
        self._file.write(f"{time.monotonic() - self.started:9.2f} {host or '-'} {text}\n")

    def operation(self, host: str, name: str, result: str, seconds: float, output: str = "") -> None:
        """One operation on ``host``: its result and duration; ``output`` (failed ones) in full."""
        self.event(host, f"{result} {name!r} in {seconds:.2f} s")
        for line in output.splitlines():
            self._file.write(f"{'':9} {host} | {line}\n")

    def close(self) -> None:
        if not self._file.closed:
            self.event(None, "end")
            self._file.close()
