"""Pure parsers of what a node's package manager and systemd say: installed packages, holds, enabled
units, file checksums. Used by the image manifest (kiln/image/manifest.py) and the drift suite alike.
Standard library only (ships to nodes)."""

from __future__ import annotations

DPKG_QUERY = "dpkg-query -W -f '${Package}\\t${Version}\\t${db:Status-Abbrev}\\n'"
RPM_QUERY = "rpm -qa --qf '%{NAME}\\t%{VERSION}-%{RELEASE}\\tii \\n'"
PACKAGES = f"if command -v dpkg-query >/dev/null; then {DPKG_QUERY}; else {RPM_QUERY}; fi"
HOLDS_APT = "apt-mark showhold"
HOLDS_DNF = "dnf -q versionlock list 2>/dev/null | sed -E 's/^([^:]*:)?(.+)-[^-]+-[^-]+$/\\2/'"
HOLDS = f"if command -v apt-mark >/dev/null; then {HOLDS_APT}; else {HOLDS_DNF}; fi"
ENABLED_UNITS = "systemctl list-unit-files --state=enabled --no-legend --no-pager"


def parse_packages(text: str) -> dict[str, str]:
    """Installed package -> version, from ``DPKG_QUERY``/``RPM_QUERY``. Only fully installed ones:
    dpkg's status abbreviation is the wanted action (``i`` install, ``h`` hold, ...) then the state,
    which must be ``i`` (installed); a package half-configured by an interrupted install (``iF``,
    ``iU``) or removed with its configuration left (``rc``) is not installed."""
    out = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and parts[2][1:2] == "i" and parts[0]:
            out[parts[0]] = parts[1]
    return out


def parse_holds(text: str) -> list[str]:
    return sorted({line.strip() for line in text.splitlines() if line.strip()})


def parse_enabled_units(text: str) -> list[str]:
    """Unit files enabled (``systemctl list-unit-files --state=enabled``: ``NAME enabled PRESET``)."""
    out = set()
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 2 and words[1] == "enabled":
            out.add(words[0])
    return sorted(out)


def parse_sha256sum(text: str) -> dict[str, str]:
    """path -> checksum, from ``sha256sum -- PATH...`` (paths it could not read are absent)."""
    out = {}
    for line in text.splitlines():
        digest, sep, path = line.partition("  ")
        if sep and len(digest) == 64:
            out[path] = digest
    return out


def kernel_packages(packages: dict[str, str]) -> dict[str, str]:
    return {n: v for n, v in packages.items()
            if (n.startswith("linux-image-") and not n.endswith("-dbg")) or n in ("kernel", "kernel-core")}
