"""The repair every apt install runs first: a node that lost power mid-install is finished (configure),
and a package left half-installed or "reinstall required" (power lost while it unpacked: configure
refuses it) is reinstalled first. The shell logic runs here against stand-in dpkg tools that record
what they were asked; the real tools on a debootstrapped tree were shown by hand (session note)."""

from __future__ import annotations

import subprocess

import pytest

from roles.operations import DPKG_REPAIR

TOOL = """#!/bin/sh
echo "$(basename "$0") $*" >> {log}
case "$(basename "$0") $1" in
  "dpkg --audit") printf '%s' "{audit}" ;;
  "dpkg-query -W") printf '{status}' ;;
  "dpkg --configure") exit {configure_rc} ;;
esac
exit 0
"""


def _run(tmp_path, audit: str, status: str, configure_rc: int = 0) -> list[str]:
    log = tmp_path / "calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("dpkg", "dpkg-query", "apt-get"):
        (bin_dir / tool).write_text(TOOL.format(log=log, audit=audit, status=status, configure_rc=configure_rc))
        (bin_dir / tool).chmod(0o755)
    subprocess.run(["sh", "-c", DPKG_REPAIR], env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, check=False)
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize("abbrev", ["iUR", "iHR", "iH "])
def test_a_package_power_cut_mid_unpack_is_reinstalled_then_everything_configured(tmp_path, abbrev):
    calls = _run(tmp_path, audit="chrony must be reinstalled", status=f"ii |less\\n{abbrev}|chrony\\nrc |gone\\n",
                 configure_rc=1)
    reinstall = [c for c in calls if c.startswith("apt-get install")]
    assert len(reinstall) == 1 and "--reinstall" in reinstall[0] and reinstall[0].endswith(" chrony"), calls
    configures = [i for i, c in enumerate(calls) if c.startswith("dpkg --configure -a")]
    assert len(configures) == 2 and configures[0] < calls.index(reinstall[0]) < configures[1], calls


def test_an_interrupted_configure_alone_is_finished_without_reinstalling(tmp_path):
    calls = _run(tmp_path, audit="slurmd is only half configured", status="ii |less\\niF |slurmd\\n")
    assert not [c for c in calls if c.startswith("apt-get")] and \
        len([c for c in calls if c.startswith("dpkg --configure -a")]) == 2, calls


def test_a_healthy_dpkg_is_left_alone(tmp_path):
    calls = _run(tmp_path, audit="", status="ii |less\\n")
    assert calls == ["dpkg --audit"], calls
