"""The manifest beside every image (and in it, as /etc/kiln/image-manifest.json): what is in it,
read from the built tree with the same commands and parsers (checks/parsers/packages.py) the drift
suite runs on live nodes to compare.
"""

from __future__ import annotations

import hashlib
import re
import platform as host_platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from checks.parsers.packages import (ENABLED_UNITS, HOLDS, PACKAGES, kernel_packages, parse_enabled_units,
                                     parse_holds, parse_packages)

_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")


def file_sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def in_root(root: Path, shell: str) -> str:
    result = subprocess.run(["chroot", str(root), "sh", "-c", shell], capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"{shell.split()[0]} in {root} failed: {result.stderr.strip()[-300:]}")
    return result.stdout


def read_manifest(root: Path, recipe, tools: dict[str, str]) -> dict:
    """The manifest of the image tree at ``root`` built from ``recipe`` (kiln/image/recipe.py)."""
    packages = parse_packages(in_root(root, PACKAGES))
    holds = parse_holds(in_root(root, HOLDS))
    units = parse_enabled_units(in_root(root, ENABLED_UNITS))
    os_release = dict(line.split("=", 1) for line in (root / "etc" / "os-release").read_text().splitlines()
                      if "=" in line)
    roles: dict[str, list[dict]] = {}
    for f in recipe.files:
        role = f["operation"].split(":", 1)[0]
        on_disk = file_sha256(root / f["path"].lstrip("/"))
        roles.setdefault(role, []).append({**f, "sha256": on_disk})
    return {
        "name": recipe.name, "recipe": recipe.digest, "cluster": recipe.cluster, "target": recipe.target,
        "built_for_host": recipe.host, "os": recipe.os,
        "os_release": os_release.get("PRETTY_NAME", "").strip('"'), "base": recipe.base,
        "kernel_packages": kernel_packages(packages),
        "packages": packages, "held": holds, "pins": _pins(recipe),
        "roles": {r: roles.get(r, []) for r in recipe.roles},
        "enabled_units": units,
        "built": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "tools": {**tools, "python": host_platform.python_version()},
    }


def _pins(recipe) -> dict[str, str]:
    """Package -> pinned version, as the install stage's package operations asked for them."""
    pins = {}
    for _, commands in recipe.steps:
        for command in commands:
            if " install " not in f" {command} ":
                continue
            for word in command.split():
                name, sep, version = word.strip("'").partition("=")
                if sep and _PACKAGE.match(name):
                    pins[name] = version
    return dict(sorted(pins.items()))
