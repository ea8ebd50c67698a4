"""SchedMD's Slurm upgrade rules as data (#33's version window): releases read from every distribution's
package versions, no downgrade, at most two earlier majors (three from 24.11 on), and the daemons' order."""

from __future__ import annotations

import pytest

from kiln.patch.slurm_versions import ORDER, order_problem, release_of, upgrade_problem


@pytest.mark.parametrize("version, release", [
    ("22.05.8-4+deb12u3", "22.05"),       # Debian 12
    ("24.11.5-1", "24.11"),               # Debian 13
    ("1:24.11.5-1", "24.11"),             # an epoch
    ("21.08.5-2ubuntu1", "21.08"),        # Ubuntu 22.04
    ("23.11.4-1.2ubuntu5", "23.11"),      # Ubuntu 24.04
    ("22.05.9-1.el9", "22.05"),           # EPEL 9
    ("25.11.0~rc1-1", "25.11"),
    ("22.5.8", None), ("slurm", None), ("", None), ("22.05", None),
])
def test_releases_are_read_from_package_versions(version, release):
    assert release_of(version) == release


@pytest.mark.parametrize("current, target, words", [
    ("22.05.8-4+deb12u3", "22.05.9-1", None),           # a patch release
    ("22.05.8-4+deb12u3", "23.11.4-1", None),           # two majors up: inside the window
    ("22.05.8-4+deb12u3", "24.05.1-1", "skips 2 major release(s): 24.05 upgrades from 23.02, 23.11 only; "
                                        "go through 23.11 first"),
    ("23.02.7-1", "24.11.5-1", None),                   # 24.11 reads three earlier majors
    ("23.02.7-1", "25.05.1-1", "go through 24.11 first"),  # the farthest 23.02 can go in one step
    ("24.05.5-1", "25.11.0-1", None),
    ("24.11.5-1", "22.05.8-4+deb12u3", "downgrade"),
    ("24.11.5-1", "26.05.1-1", "not a release kiln knows"),
    ("garbage", "24.11.5-1", "not a Slurm version"),
])
def test_the_version_window(current, target, words):
    problem = upgrade_problem(current, target)
    assert (problem is None) if words is None else (problem is not None and words in problem), problem


def test_daemons_keep_their_order_and_the_rollout_order_is_schedmds():
    assert order_problem("23.11.4-1", "23.11.4-1", "22.05.8-4") is None
    assert "slurmdbd >= slurmctld >= slurmd" in order_problem("22.05.8-4", "23.11.4-1", "22.05.8-4")
    assert "slurmdbd >= slurmctld >= slurmd" in order_problem("23.11.4-1", "22.05.8-4", "23.11.4-1")
    assert [step.split()[0] for step in ORDER] == ["back", "slurmdbd", "slurmctld", "slurmd,", "client"]
