"""The one way kiln/image runs a build command: output captured, a time bound, and a failure or a
timeout raised as the caller's own error class with what it was doing and the command's last words."""

from __future__ import annotations

import subprocess


def run_step(cmd: list[str], what: str, timeout: float, error: type[Exception]) -> None:
    """Run ``cmd``; raise ``error("could not <what>: ...")`` when it fails or runs past ``timeout``."""
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise error(f"could not {what}: {cmd[0]} timed out after {timeout:.0f} s") from exc
    if result.returncode != 0:
        raise error(f"could not {what}: {cmd[0]} exited {result.returncode}: "
                    f"{(result.stderr or result.stdout).strip()[-2000:]}")
