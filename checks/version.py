"""Which kiln host programs a host runs: kiln's release and a digest of this package's files as kiln
installs them (every module but the pytest entry), written at deploy beside them as ``VERSION``. Two
hosts with the same line run the same code; ``kiln check`` warns where a host's line is not the
operator's kiln (SYSTEM_KILN_PROGRAMS). Standard library only."""

from __future__ import annotations

import hashlib
from pathlib import Path

FILE = "VERSION"  # in the installed package's directory (/usr/local/lib/kiln/checks/VERSION)
NAME = "kiln-host-programs"


def package_files(package: Path) -> dict[str, bytes]:
    """Relative path (from the package's parent) -> content, for every module kiln installs on hosts."""
    return {str(p.relative_to(package.parent)): p.read_bytes()
            for p in sorted(package.rglob("*.py")) if "__pycache__" not in p.parts and not p.name.startswith("test_")}


def version_line(release: str, files: dict[str, bytes]) -> str:
    """``kiln-host-programs 0.1.0 3f2a9c1d0b7e``: the release and the first 12 hex digits of a SHA-256 over
    each file's path and content, in path order."""
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.encode() + b"\0" + hashlib.sha256(files[path]).digest())
    return f"{NAME} {release} {digest.hexdigest()[:12]}"


def installed(package: Path) -> str:
    """The line the deploy wrote beside this package, or '' where there is none."""
    try:
        return (package / FILE).read_text().strip()
    except OSError:
        return ""
