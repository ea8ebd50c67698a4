"""A deploy's operations as they start and end on each host, told to the command's progress display
and written to the run's log (kiln.deploy.runner.Deploy adds it to pyinfra's state)."""

from __future__ import annotations

import time

import gevent
from pyinfra.api.state import BaseStateCallback

from kiln.deploy.plan import op_name


def real_host(host):
    """The host itself where pyinfra hands a callback its context proxy (``pyinfra.context.host``): the greenlet
    that reports the operation later has no context, and the proxy's attributes would raise there (a deploy
    once printed "'gevent._gevent_clocal.local' object has no attribute 'module'" and lost that report)."""
    get = getattr(type(host), "_get_module", None)
    return get(host) if get is not None else host


class OperationEvents(BaseStateCallback):
    """Each operation as it starts and ends on a host: to the command's progress display (``events``:
    step/finish, kiln.cli.progress.Progress) and the run's log (each operation with its result and
    time, the full output of a failed one); a host is reported finished when its last operation is."""

    def __init__(self, deploy, totals: dict[str, int]):
        self.deploy, self.totals = deploy, totals
        self.pending: list = []
        self.done: dict[str, int] = {}
        self.changed: dict[str, int] = {}
        self.started: dict[tuple[str, str], float] = {}

    def _name(self, state, host, op_hash) -> str:
        return op_name(state.ops[host].get(op_hash), op_hash)

    def operation_host_start(self, state, host, op_hash):
        self.started[(host.name, op_hash)] = time.monotonic()
        if self.deploy.events:
            self.deploy.events.step(self.deploy.node(host), self._name(state, host, op_hash))

    def _seconds(self, host, op_hash) -> float:
        return time.monotonic() - self.started.pop((host.name, op_hash), time.monotonic())

    # pyinfra calls these before it marks the operation complete (its change and output are set just
    # after, in the same greenlet): what needs them runs in a greenlet of its own, a moment later.
    def operation_host_success(self, state, host, op_hash, retry_count=0):
        host = real_host(host)
        self.pending.append(gevent.spawn(self._ended, state, host, op_hash, self._seconds(host, op_hash), True))

    def operation_host_error(self, state, host, op_hash, retry_count=0, max_retries=0):
        host = real_host(host)
        self.pending.append(gevent.spawn(self._ended, state, host, op_hash, self._seconds(host, op_hash), False))

    def wait(self) -> None:
        """Every deferred report made (call after the operations ran)."""
        gevent.joinall(self.pending)

    def _ended(self, state, host, op_hash, seconds: float, succeeded: bool) -> None:
        node, name = self.deploy.node(host), self._name(state, host, op_hash)
        data = state.ops[host].get(op_hash)
        meta = data.operation_meta if data else None
        complete = meta is not None and meta.is_complete()
        if not succeeded:
            if self.deploy.log:
                output = meta._combined_output if complete else None
                lines = [line.line for line in output] if output is not None else []
                self.deploy.log.operation(node, name, "failed", seconds, self.deploy.secrets.mask("\n".join(lines)))
            if self.deploy.events:
                self.deploy.events.finish(node, "failed", f"at {name!r}")
            return
        changed = bool(complete and meta.did_change())
        self.done[host.name] = self.done.get(host.name, 0) + 1
        self.changed[host.name] = self.changed.get(host.name, 0) + changed
        if self.deploy.log:
            self.deploy.log.operation(node, name, "changed" if changed else "ok", seconds)
        if self.done[host.name] == self.totals.get(host.name) and self.deploy.events:
            count = self.changed[host.name]
            self.deploy.events.finish(node, "changed" if count else "no change",
                                      f"{count} of {self.totals[host.name]} operations" if count else "")
