"""What a long kiln command is doing while it runs, for the person who started it.

Three ways to show it, chosen once per command (``Progress.for_command``):

- ``live``: on a terminal, a panel redrawn in place (rich's Live): hosts done out of the total, failed
  so far, elapsed time, and what the slowest hosts are doing now (role and operation, for how long).
  Lines printed meanwhile (``note``) scroll above it. NO_COLOR and TERM=dumb are honoured (rich).
- ``lines``: output that is not a terminal (a CI log, a pipe): one line per event, each stamped with
  the elapsed time: a host done or failed, a note, and every ``HEARTBEAT_S`` the slowest hosts.
  ``verbose`` adds a line for every step a host starts.
- ``quiet``: ``--json``: nothing at all; standard output carries the JSON alone.

Every event also goes to the run's log (``kiln.runlog.RunLog``) when one is given, whatever is shown.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from kiln.cli.common import visible
from kiln.hostlist import fold

HEARTBEAT_S = 30.0
SLOWEST = 5  # in-flight hosts shown


class Progress:
    def __init__(self, title: str, hosts: list[str], mode: str = "lines", verbose: int = 0,
                 stream: TextIO | None = None, log=None):
        if mode not in ("live", "lines", "quiet"):
            raise ValueError(f"progress mode {mode!r}")
        self.title, self.total, self.mode, self.verbose = title, len(hosts), mode, verbose
        self.stream = stream or sys.stdout
        self.log = log
        self.started = time.monotonic()
        # Written by the workers (kiln check's threads), read by rich's refresh thread: every write and
        # every copy holds the lock (a copy alone is not atomic: the allocations it makes can start the
        # garbage collector, which runs Python code and lets another thread in).
        self._lock = threading.Lock()
        self.doing: dict[str, tuple[str, float]] = {}   # host -> (what, since)
        self.done: dict[str, str] = {}                  # host -> outcome
        self._heartbeat = self.started
        self._live = None

    @classmethod
    def for_command(cls, title: str, hosts: list[str], as_json: bool, verbose: int = 0, log=None,
                    stream: TextIO | None = None) -> "Progress":
        """``quiet`` with --json (when shown on standard output, which then carries the JSON alone),
        ``live`` on a terminal, else ``lines``. ``stream``: where to show it (default standard output)."""
        stream = stream or sys.stdout
        if as_json and stream is sys.stdout:
            mode = "quiet"
        elif stream.isatty() and not verbose:
            mode = "live"
        else:
            mode = "lines"
        return cls(title, hosts, mode, verbose, stream=stream, log=log)

    # --- the run's events ---
    def note(self, line: str) -> None:
        """A message about the run as a whole (connecting, a batch starts)."""
        if self.log:
            self.log.event(None, line)
        self._print(line)

    def step(self, host: str, what: str) -> None:
        """``host`` starts ``what`` (a role's operation, a rollout step)."""
        with self._lock:
            self.doing[host] = (what, time.monotonic())
        if self.log:
            self.log.event(host, f"start {what}")
        if self.verbose and self.mode == "lines":
            self._print(f"{host}: {what}")
        self._tick()

    def finish(self, host: str, outcome: str, detail: str = "") -> None:
        """``host`` is done: ``outcome`` is a word (changed, failed, ok...), ``detail`` what to know."""
        with self._lock:
            self.doing.pop(host, None)
            self.done[host] = outcome
        if self.log:
            self.log.event(host, f"{outcome} {detail}".rstrip())
        if self.mode == "lines":
            self._print(f"{host}: {outcome}{': ' + detail if detail else ''} ({self._counts()})")
        self._tick()

    @property
    def failed(self) -> list[str]:
        with self._lock:
            done = list(self.done.items())
        return [h for h, o in done if o in ("failed", "unreachable")]

    # --- showing it ---
    def _counts(self) -> str:
        failed = len(self.failed)
        return f"{len(self.done)}/{self.total} done" + (f", {failed} failed" if failed else "")

    def _elapsed(self) -> str:
        return f"{time.monotonic() - self.started:6.1f}s"

    def slowest(self) -> list[tuple[str, str, float]]:
        """(host, what it does, seconds at it) of the in-flight hosts longest at their step."""
        now = time.monotonic()
        with self._lock:
            doing = list(self.doing.items())
        ranked = sorted(doing, key=lambda item: item[1][1])[:SLOWEST]
        return [(host, what, now - since) for host, (what, since) in ranked]

    def _print(self, line: str) -> None:
        if self.mode == "quiet":
            return
        if self._live is not None:
            self._live.console.print(visible(line), markup=False, highlight=False)
            return
        self.stream.write(f"[{self._elapsed()}] {visible(line)}\n")
        self.stream.flush()

    def _tick(self) -> None:
        if self.mode == "lines" and self.doing and time.monotonic() - self._heartbeat >= HEARTBEAT_S:
            self._heartbeat = time.monotonic()
            self._print(f"{self.title}: {self._counts()}; slowest: "
                        + "; ".join(f"{h} {what} ({s:.0f} s)" for h, what, s in self.slowest()))
        # live: rich redraws the panel from render() four times a second

    def render(self):
        """The live panel (a rich renderable): one line a host whatever the terminal's width (what it does is
        cut short to fit, its seconds stay)."""
        return _Panel(f"{self.title}  {self._counts()}  {time.monotonic() - self.started:.0f} s",
                      f"   failed: {fold(self.failed)}" if self.failed else "", self.slowest())

    def __enter__(self) -> "Progress":
        if self.mode == "live":
            from rich.console import Console
            from rich.live import Live

            self._live = Live(self.render(), console=Console(file=self.stream), refresh_per_second=4,
                              transient=True, get_renderable=self.render)
            self._live.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


class _Panel:
    """The live panel, laid out for the width rich gives it."""

    def __init__(self, head: str, failed: str, slowest: list[tuple[str, str, float]]):
        self.head, self.failed, self.slowest = head, failed, slowest

    def __rich_console__(self, console, options):
        from rich.text import Text

        head = Text(self.head, style="bold", no_wrap=True, overflow="ellipsis")
        if self.failed:
            head.append(self.failed, style="red")
        yield head
        for host, what, seconds in self.slowest:
            took = f"{seconds:.0f} s"
            room = max(1, options.max_width - len(host) - len(took) - 6)
            what = what[:90]
            shown = what if len(what) <= room else what[:max(0, room - 1)] + "…"
            yield Text(f"  {host}  {shown}  {took}", no_wrap=True, overflow="ellipsis")
