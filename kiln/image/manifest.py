"""The manifest beside every image: what is in it, read from the built tree.

Pure parsers of the tools' output (``dpkg-query``, ``rpm -qa``, ``apt-mark showhold``, ``systemctl
list-unit-files``) and one reader that runs them in the image root. ``kiln drift`` reads the same
parsers' output from live nodes and compares.
"""

from __future__ import annotations

import hashlib
import re
import platform as host_platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path

DPKG_QUERY = "dpkg-query -W -f '${Package}\\t${Version}\\t${db:Status-Abbrev}\\n'"
RPM_QUERY = "rpm -qa --qf '%{NAME}\\t%{VERSION}-%{RELEASE}\\tii \\n'"
HOLDS_APT = "apt-mark showhold"
HOLDS_DNF = "dnf -q versionlock list 2>/dev/null | sed -E 's/^([^:]*:)?(.+)-[^-]+-[^-]+$/\\2/'"
_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
ENABLED_UNITS = "systemctl list-unit-files --state=enabled --no-legend --no-pager"


def parse_packages(lines: list[str]) -> dict[str, str]:
    """Installed package -> version, from ``DPKG_QUERY`` (only fully installed ones: status ``ii``)."""
    out = {}
    for line in lines:
        parts = line.rstrip("\n").split("\t")
        if len(parts) >= 3 and parts[2].strip().startswith("ii") and parts[0]:
            out[parts[0]] = parts[1]
    return out


def parse_holds(lines: list[str]) -> list[str]:
    return sorted({line.strip() for line in lines if line.strip()})


def parse_enabled_units(lines: list[str]) -> list[str]:
    """Unit files enabled (``systemctl list-unit-files --state=enabled``: ``NAME enabled PRESET``)."""
    return sorted({line.split()[0] for line in lines if line.split() and line.split()[1:2] == ["enabled"]})


def kernels(packages: dict[str, str]) -> dict[str, str]:
    return {n: v for n, v in packages.items()
            if n.startswith("linux-image-") and not n.endswith("-dbg") or n in ("kernel", "kernel-core")}


def file_sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _in_root(root: Path, shell: str) -> list[str]:
    result = subprocess.run(["chroot", str(root), "sh", "-c", shell], capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"{shell.split()[0]} in {root} failed: {result.stderr.strip()[-300:]}")
    return result.stdout.splitlines()


def read_manifest(root: Path, recipe, apt: bool, tools: dict[str, str]) -> dict:
    """The manifest of the image tree at ``root`` built from ``recipe`` (kiln/image/recipe.py)."""
    packages = parse_packages(_in_root(root, DPKG_QUERY if apt else RPM_QUERY))
    holds = parse_holds(_in_root(root, HOLDS_APT if apt else HOLDS_DNF))
    units = parse_enabled_units(_in_root(root, ENABLED_UNITS))
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
        "kernel_packages": kernels(packages),
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
