"""The drift suite and the package parsers, on output recorded from a testbed node (tests/recorded)."""

from __future__ import annotations

import json

from checks import drift
from checks.node import Node, Result
from checks.parsers.packages import (ENABLED_UNITS, HOLDS, PACKAGES, parse_enabled_units, parse_holds,
                                     parse_packages, parse_sha256sum)
from tests.conftest import REPO

RECORDED = (REPO / "tests" / "recorded" / "packages-compute-debian12.txt").read_text().split("====\n")
DPKG, HOLD_TEXT, UNIT_TEXT = RECORDED


def test_installed_packages_include_held_ones_and_leave_out_removed_and_half_installed():
    packages = parse_packages(DPKG)
    assert packages["slurmd"] == "22.05.8-4+deb12u3"          # hi: held and installed
    assert packages["nvidia-smi"] == "535.261.03-1"
    assert "chrony" not in packages                            # rc: removed, configuration left
    half = "munge\t0.5.15-2\tiF \nsudo\t1.9.13p3-1+deb12u1\tiU \nless\t590-2.1~deb12u2\tii \n"
    assert parse_packages(half) == {"less": "590-2.1~deb12u2"}  # half-configured, unpacked: not installed
    assert len(packages) > 150


def test_holds_units_and_checksums():
    assert parse_holds(HOLD_TEXT) == ["libpam-slurm-adopt", "nvidia-smi", "slurm-client", "slurmd"]
    units = parse_enabled_units(UNIT_TEXT)
    assert "slurmd.service" in units and "munge.service" in units and "chrony.service" not in units
    digest = "a" * 64
    assert parse_sha256sum(f"{digest}  /etc/a b\nsha256sum: /etc/x: No such file\n") == {"/etc/a b": digest}


def _manifest() -> dict:
    return {"name": "kiln-testbed_compute-0123456789ab", "packages": parse_packages(DPKG),
            "held": parse_holds(HOLD_TEXT), "enabled_units": parse_enabled_units(UNIT_TEXT),
            "roles": {"base": [{"path": "/etc/security/limits.d/90-kiln.conf", "sha256": "b" * 64}]}}


def _node(manifest: dict | None, dpkg: str = DPKG, holds: str = HOLD_TEXT, units: str = UNIT_TEXT,
          limits_sha: str = "b" * 64) -> Node:
    answers = {drift.READ_MANIFEST: json.dumps(manifest) if manifest else "", PACKAGES: dpkg, HOLDS: holds,
               ENABLED_UNITS: units,
               drift.files_command(["/etc/security/limits.d/90-kiln.conf"]):
                   f"{limits_sha}  /etc/security/limits.d/90-kiln.conf\n"}
    return Node("n1", lambda command: Result(0, answers.get(command, ""), ""))


def _by_id(verdicts):
    return {v.id: v for v in verdicts}


def test_a_node_as_its_image_has_no_drift():
    verdicts = _by_id(drift.run(_node(_manifest()), {}))
    assert all(v.severity == "ok" for v in verdicts.values()), verdicts


def test_each_kind_of_drift_is_reported_and_only_that():
    manifest = _manifest()
    dpkg = DPKG.replace("slurmd\t22.05.8-4+deb12u3\thi ", "slurmd\t22.05.8-4+deb12u3\tii ") + "tree\t2.1.0-1\tii \n"
    dpkg = dpkg.replace("less\t590-2.1~deb12u2\tii ", "less\t590-3\tii ")
    holds = HOLD_TEXT.replace("slurmd\n", "")
    units = UNIT_TEXT + "site-agent.service enabled enabled\n"
    found = _by_id(drift.run(_node(manifest, dpkg, holds, units, "c" * 64), {}))
    assert found["DRIFT_PACKAGES"].severity == "warn"
    assert "tree 2.1.0-1" in found["DRIFT_PACKAGES"].message and "less 590-2.1~deb12u2 -> 590-3" in found["DRIFT_PACKAGES"].message
    assert "slurmd" not in found["DRIFT_PACKAGES"].message          # unheld is still installed, same version
    assert found["DRIFT_HOLDS"].severity == "warn" and "slurmd" in found["DRIFT_HOLDS"].message
    assert found["DRIFT_FILES"].severity == "warn" and "90-kiln.conf" in found["DRIFT_FILES"].message
    assert found["DRIFT_UNITS"].severity == "warn" and "site-agent.service" in found["DRIFT_UNITS"].message
    ignoring = {"drift": {"ignore_packages": ["tree", "les?"], "ignore_units": ["site-*"]}}
    quiet = _by_id(drift.run(_node(manifest, dpkg, holds, units, "c" * 64), ignoring))
    assert quiet["DRIFT_PACKAGES"].severity == "ok" and quiet["DRIFT_UNITS"].severity == "ok"


def test_a_removed_package_and_no_manifest():
    dpkg = "\n".join(line for line in DPKG.splitlines() if not line.startswith("less\t")) + "\n"
    found = _by_id(drift.run(_node(_manifest(), dpkg), {}))
    assert found["DRIFT_PACKAGES"].severity == "warn" and "removed less" in found["DRIFT_PACKAGES"].message
    only = drift.run(_node(None), {})
    assert [(v.id, v.severity) for v in only] == [("DRIFT_IMAGE", "ok")]


def test_a_given_manifest_wins_over_the_nodes_own():
    given = {**_manifest(), "name": "other", "packages": {}}
    found = _by_id(drift.run(_node(_manifest()), {"drift": {"manifest": given}}))
    assert "other" in found["DRIFT_IMAGE"].message and found["DRIFT_PACKAGES"].severity == "warn"


def test_an_unreadable_manifest_warns_never_passes():
    node = Node("n1", lambda command: Result(0, "{not json" if command == drift.READ_MANIFEST else "", ""))
    assert [(v.id, v.severity) for v in drift.run(node, {})] == [("DRIFT_MANIFEST_UNREADABLE", "warn")]
