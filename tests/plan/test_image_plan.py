"""The image recipe for every supported OS: what `kiln image build --plan` prints (bootstrap commands,
install-stage operations, files), reviewed like the roles' op lists (KILN_UPDATE_PLANS=1 regenerates
tests/plan/expected/image-<os>.json); and what may never be in an image."""

from __future__ import annotations

import json
import os as os_module
from dataclasses import replace

import pytest

from kiln.image.base import bootstrap_commands
from kiln.image.recipe import recipe
from kiln.inventory.schema import Team
from roles.platform import PLATFORMS
from tests.conftest import REPO
from tests.plan.test_roles_plan import cluster_for

EXPECTED = REPO / "tests" / "plan" / "expected"
# Cluster configuration and secrets: the configure stage writes them, never an image.
NEVER_IN_AN_IMAGE = ("/etc/hosts", "/etc/munge/munge.key", "/etc/slurm/slurm.conf", "/etc/slurm/gres.conf",
                     "/etc/slurm/cgroup.conf", "/etc/slurm/topology.conf", "/etc/slurm/slurmdbd.conf",
                     "/etc/kiln/node-checks.json", "/etc/chrony/chrony.conf", "/etc/chrony.conf")


def on(os: str, cluster):
    return replace(cluster, hosts={n: replace(h, os=os) for n, h in cluster.hosts.items()})


@pytest.mark.parametrize("os", sorted(PLATFORMS))
@pytest.mark.parametrize("target", ["gpu", "slurm_controller"])
@pytest.mark.proves("images", tier="plan")
def test_image_plan_matches_the_reviewed_one(os, target):
    r = recipe(on(os, cluster_for(os)), target)
    actual = {"name": r.name, "roles": list(r.roles), "bootstrap": bootstrap_commands(os, "ROOT"),
              "install": [[name, list(cmds)] for name, cmds in r.steps], "files": list(r.files)}
    path = EXPECTED / f"image-{os}-{target}.json"
    if os_module.environ.get("KILN_UPDATE_PLANS"):
        path.write_text(json.dumps(actual, indent=1) + "\n")
    assert actual == json.loads(path.read_text())


@pytest.mark.parametrize("os", sorted(PLATFORMS))
def test_no_cluster_file_secret_or_service_start_in_an_image(os):
    for target in ("gpu", "slurm_controller", "login"):
        r = recipe(on(os, cluster_for(os)), target)
        written = {f["path"] for f in r.files}
        assert not written & set(NEVER_IN_AN_IMAGE), (target, written & set(NEVER_IN_AN_IMAGE))
        commands = "\n".join(c for _, cmds in r.steps for c in cmds)
        for path in NEVER_IN_AN_IMAGE:
            assert f"upload {path}\n" not in commands + "\n"
        assert "systemctl start" not in commands and "systemctl restart" not in commands
        run = [c for c in commands.split("\n") if not c.startswith(("upload ", "chown ", "chmod "))]  # files are no runs
        assert not [c for c in run if "sacctmgr" in c or "mysql" in c], target


def test_one_image_serves_any_cluster_size_and_team_list():
    cluster = on("debian12", cluster_for("debian12"))
    base = recipe(cluster, "gpu").name
    more = dict(cluster.hosts)
    more["gpu99"] = replace(cluster.hosts["gpu01"], name="gpu99", address="10.0.0.99")
    bigger = replace(cluster, hosts=more, groups={**cluster.groups, "gpu": cluster.groups["gpu"] + ("gpu99",)},
                     teams=cluster.teams + (Team(name="physics", shares=5),))
    assert recipe(bigger, "gpu").name.endswith(base[-12:])


def test_a_pin_change_is_a_new_image():
    assert recipe(on("debian12", cluster_for("debian12")), "gpu").digest != \
        recipe(on("debian12", cluster_for("debian12", slurm="22.05.8-4+deb12u4")), "gpu").digest
