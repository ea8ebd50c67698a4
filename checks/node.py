"""How a suite reaches a node: one ``run(command)`` that returns exit code and output. The remote runner
wraps a testinfra host (kiln/check/remote.py), the node-local runner a subprocess; suites see only this."""

from __future__ import annotations

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


def local_node(name: str, timeout: float = 120) -> Node:
    def run(command: str) -> Result:
        try:
            out = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return Result(124, "", f"timed out after {timeout:.0f} s: {command}")
        return Result(out.returncode, out.stdout, out.stderr)
    return Node(name, run, local=True)
