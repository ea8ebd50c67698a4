"""How a suite reaches a node: one ``run(command)`` that returns exit code and output. The remote runner
wraps a testinfra host (kiln/check/remote.py), the node-local runner a subprocess; suites see only this."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Result:
    rc: int
    stdout: str
    stderr: str = ""


class Node:
    def __init__(self, name: str, run: Callable[[str], Result], local: bool = False):
        self.name, self._run, self.local = name, run, local

    def run(self, command: str) -> Result:
        return self._run(command)


NO_ANSWER = 124  # a bounded command's exit code when it did not finish in time
# Every command a runner gives a node runs in the C locale: the parsers read tools' English output (df's
# header, dmesg -T's day and month names, decimal points), and a node's own LANG must not localize it.
C_LOCALE = {"LC_ALL": "C", "LANG": "C"}
C_LOCALE_SH = "LC_ALL=C LANG=C; export LC_ALL LANG; "


def as_user(user: str, *argv: str) -> str:
    """``argv`` run as ``user`` (no login shell, no environment of root's beyond the C locale)."""
    return shlex.join(["runuser", "-u", user, "--", *argv])


def bounded(command: str, seconds: int) -> str:
    """``command`` (sh text) as a subshell that ends within about ``seconds`` + 1, whatever the command
    does: after ``seconds`` its whole process group is killed (``timeout -s KILL``), and should even that
    not end it (a process in uninterruptible sleep on a hung mount keeps ``timeout`` waiting), a watcher
    kills ``timeout`` itself a second later and the command is abandoned: the subshell then exits 124 with
    "no answer in N s" on stderr. Output goes through files, and the watcher holds no pipe, so nothing
    left behind keeps the caller's pipes (or its SSH channel) open. No polling: a command that answers at
    once costs a few processes, not a loop."""
    return ("(d=$(mktemp -d) || exit 255; "
            f"timeout -s KILL {seconds} sh -c {shlex.quote(command)} </dev/null >\"$d/o\" 2>\"$d/e\" & p=$!; "
            f"(sleep {seconds + 1}; kill -9 $p) </dev/null >/dev/null 2>&1 & w=$!; "
            "wait $p; rc=$?; kill $w 2>/dev/null; "
            "cat \"$d/o\"; cat \"$d/e\" >&2; rm -rf \"$d\"; "
            f"if [ $rc = 137 ] || [ $rc = {NO_ANSWER} ]; then echo \"no answer in {seconds} s\" >&2; exit {NO_ANSWER}; fi; "
            "exit $rc)")


def local_node(name: str, timeout: float = 120) -> Node:
    """Commands run here, in ``sh``; one still running after ``timeout`` has its process group killed
    and is left behind if it cannot die (exit 124), so the runner itself never hangs."""
    def run(command: str) -> Result:
        proc = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True,
                                env={**os.environ, **C_LOCALE})
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                proc.communicate(timeout=2)
            except subprocess.TimeoutExpired:  # something unkillable holds the pipes: leave it
                pass
            return Result(NO_ANSWER, "", f"timed out after {timeout:.0f} s: {command}")
        return Result(proc.returncode, stdout, stderr)
    return Node(name, run, local=True)
