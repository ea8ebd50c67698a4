"""Drift suite: does the node still hold what the image it was booted from holds?

The reference is the image's manifest, which every kiln image carries at /etc/kiln/image-manifest.json
(``kiln drift --image NAME`` gives one from the image store instead, as ``expect["drift"]["manifest"]``).
Compared: packages added, removed or at another version; holds the image had and the node lost;
enabled units; the checksums of the files the image's roles manage. A node not booted from an image
has nothing to compare here (kiln drift still compares it with kiln's own pins and files).

Drift is reported (warn), never drains a node: a package installed by hand breaks no job; the
operator decides (kiln deploy restores holds and kiln's files; a package added by hand is removed by
hand or kept on purpose).
"""

from __future__ import annotations

import fnmatch
import json

from checks.node import Node
from checks.parsers.packages import (ENABLED_UNITS, HOLDS, PACKAGES, parse_enabled_units, parse_holds,
                                     parse_packages, parse_sha256sum)
from checks.verdict import Verdict, ok, warn

MANIFEST = "/etc/kiln/image-manifest.json"
READ_MANIFEST = f"cat {MANIFEST} 2>/dev/null || true"
SHOWN = 8  # names listed in a message; the JSON of kiln drift has them all


def _quote(word: str) -> str:
    return "'" + word.replace("'", "'\"'\"'") + "'"


def files_command(paths: list[str]) -> str:
    return "sha256sum -- " + " ".join(_quote(p) for p in sorted(paths)) + " 2>/dev/null; true"


def commands(expect: dict) -> list[str]:
    return [READ_MANIFEST, PACKAGES, HOLDS, ENABLED_UNITS]


def manifest_files(manifest: dict) -> dict[str, str | None]:
    return {f["path"]: f.get("sha256") for files in (manifest.get("roles") or {}).values() for f in files}


def reference(node: Node, expect: dict) -> dict | None:
    """The manifest to compare with: the one given, else the node's own; None when there is none."""
    given = (expect.get("drift") or {}).get("manifest")
    if given:
        return given
    text = node.run(READ_MANIFEST).stdout.strip()
    if not text:
        return None
    return json.loads(text)


def _ignored(name: str, patterns) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def compare(manifest: dict, node: Node, expect: dict | None = None) -> dict:
    """What differs between ``manifest`` and the node, as lists and maps (empty when nothing); names
    matching the inventory's ``kiln_drift_ignore_packages``/``_units`` globs are left out on both sides."""
    drift = (expect or {}).get("drift") or {}
    skip_p, skip_u = drift.get("ignore_packages") or [], drift.get("ignore_units") or []
    packages = {n: v for n, v in parse_packages(node.run(PACKAGES).stdout).items() if not _ignored(n, skip_p)}
    holds = {n for n in parse_holds(node.run(HOLDS).stdout) if not _ignored(n, skip_p)}
    units = {u for u in parse_enabled_units(node.run(ENABLED_UNITS).stdout) if not _ignored(u, skip_u)}
    manifest = {**manifest, "packages": {n: v for n, v in (manifest.get("packages") or {}).items() if not _ignored(n, skip_p)},
                "held": [n for n in manifest.get("held") or [] if not _ignored(n, skip_p)],
                "enabled_units": [u for u in manifest.get("enabled_units") or [] if not _ignored(u, skip_u)]}
    want = manifest["packages"]
    files = manifest_files(manifest)
    found = parse_sha256sum(node.run(files_command(list(files))).stdout) if files else {}
    return {
        "image": manifest.get("name", ""),
        "packages_added": {n: v for n, v in sorted(packages.items()) if n not in want},
        "packages_removed": {n: v for n, v in sorted(want.items()) if n not in packages},
        "packages_changed": {n: [v, packages[n]] for n, v in sorted(want.items()) if n in packages and packages[n] != v},
        "holds_lost": sorted(set(manifest.get("held") or []) - holds),
        "holds_added": sorted(holds - set(manifest.get("held") or [])),
        "units_enabled": sorted(units - set(manifest.get("enabled_units") or [])),
        "units_disabled": sorted(set(manifest.get("enabled_units") or []) - units),
        "files_changed": sorted(p for p, digest in files.items() if found.get(p) != digest),
    }


def drifted(found: dict) -> bool:
    return any(v for k, v in found.items() if k != "image")


def _names(items) -> str:
    items = list(items)
    return ", ".join(items[:SHOWN]) + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


def run(node: Node, expect: dict) -> list[Verdict]:
    try:
        manifest = reference(node, expect)
    except ValueError as e:
        return [warn("DRIFT_MANIFEST_UNREADABLE", f"{MANIFEST} is not JSON ({e}): rebuild the image or remove the file")]
    if manifest is None:
        return [ok("DRIFT_IMAGE", "not booted from a kiln image: nothing to compare (kiln drift compares kiln's pins "
                   "and files)")]
    found = compare(manifest, node, expect)
    image = found["image"]
    verdicts = [ok("DRIFT_IMAGE", f"booted from image {image}")]
    p = [f"added {_names(f'{n} {v}' for n, v in found['packages_added'].items())}" if found["packages_added"] else "",
         f"removed {_names(found['packages_removed'])}" if found["packages_removed"] else "",
         f"at another version {_names(f'{n} {a} -> {b}' for n, (a, b) in found['packages_changed'].items())}"
         if found["packages_changed"] else ""]
    p = [x for x in p if x]
    verdicts.append(warn("DRIFT_PACKAGES", f"packages differ from image {image}: {'; '.join(p)}: install or remove "
                         "them to match, or rebuild the image with them") if p else
                    ok("DRIFT_PACKAGES", f"packages as in image {image}"))
    verdicts.append(warn("DRIFT_HOLDS", f"held in image {image} but not here: {_names(found['holds_lost'])}: an "
                         "upgrade may move them; kiln deploy holds them again") if found["holds_lost"] else
                    ok("DRIFT_HOLDS", "every hold of the image in place"))
    verdicts.append(warn("DRIFT_FILES", f"files the image's roles manage changed: {_names(found['files_changed'])}: "
                         "kiln deploy writes them back (kiln drift shows the diff)") if found["files_changed"] else
                    ok("DRIFT_FILES", "managed files as in the image"))
    u = ([f"enabled here only: {_names(found['units_enabled'])}"] if found["units_enabled"] else []) + \
        ([f"disabled here: {_names(found['units_disabled'])}"] if found["units_disabled"] else [])
    verdicts.append(warn("DRIFT_UNITS", f"enabled units differ from image {image}: {'; '.join(u)}") if u else
                    ok("DRIFT_UNITS", "enabled units as in the image"))
    return verdicts
