"""An OS kiln does not support, or not the one the inventory says, stops the run with a clear error."""

from __future__ import annotations

import pytest

from roles.platform import PLATFORMS, UnsupportedPlatform, platform_for
from tests.conftest import REPO


def distro(os_id: str, version: str, pretty: str) -> dict:
    return {"name": os_id, "major": int(version.split(".")[0]), "minor": None,
            "release_meta": {"ID": os_id, "VERSION_ID": version, "PRETTY_NAME": pretty}}


def recorded_debian(major: int = 12) -> dict:
    meta = {}
    for line in (REPO / "tests" / "recorded" / f"os-release-debian{major}.txt").read_text().splitlines():
        key, _, value = line.partition("=")
        if value:
            meta[key] = value.strip('"')
    return {"name": "Debian", "major": major, "minor": None, "release_meta": meta}


@pytest.mark.parametrize("os, d", [
    ("debian12", recorded_debian()),
    ("debian13", recorded_debian(13)),
    ("ubuntu2204", distro("ubuntu", "22.04", "Ubuntu 22.04.5 LTS")),
    ("ubuntu2404", distro("ubuntu", "24.04", "Ubuntu 24.04.1 LTS")),
    ("rocky9", distro("rocky", "9.4", "Rocky Linux 9.4 (Blue Onyx)")),
])
def test_supported(os, d):
    assert platform_for(os, d) is PLATFORMS[os]


def test_a_debian13_node_in_a_debian12_inventory_is_named_and_the_right_value_given():
    with pytest.raises(UnsupportedPlatform) as e:
        platform_for("debian12", recorded_debian(13))
    assert "Debian GNU/Linux 13 (trixie)" in str(e.value) and "set kiln_os: debian13 for this host" in str(e.value)


def test_inventory_and_node_disagree():
    with pytest.raises(UnsupportedPlatform) as e:
        platform_for("ubuntu2204", recorded_debian())
    assert "kiln_os 'ubuntu2204'" in str(e.value) and "Debian GNU/Linux 12" in str(e.value)
    assert "set kiln_os: debian12 for this host" in str(e.value)


@pytest.mark.parametrize("d", [distro("debian", "11", "Debian GNU/Linux 11 (bullseye)"),
                               distro("centos", "7", "CentOS Linux 7"), distro("ubuntu", "20.04", "Ubuntu 20.04")])
def test_unsupported_os(d):
    with pytest.raises(UnsupportedPlatform, match="this OS is not one of them"):
        platform_for("debian12", d)


def test_unreadable_os_release():
    with pytest.raises(UnsupportedPlatform, match="could not read /etc/os-release"):
        platform_for("debian12", {})
