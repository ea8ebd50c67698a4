"""QoS per team: kiln_qos validated before anything is touched (names, preemption one way, GPU limits
that can be reached, each team's QoS defined), sacctmgr's words built from quoted words, and the database
compared with the inventory as sacctmgr prints it (one QoS set only when it differs)."""

from __future__ import annotations

import shutil

import pytest

from kiln.inventory import load_cluster, validate
from kiln.inventory.schema import Qos, Team
from roles import slurm_config, slurm_qos
from roles.slurm_accounting import accounts_script, parse_sacctmgr
from tests.conftest import REPO

SMALL = REPO / "tests" / "inventories" / "small"
QOS_YML = """kiln_qos:
  - {name: normal, priority: 10}
  - {name: high, priority: 100, max_wall: "1-00:00:00", max_gpus_per_user: 2, max_gpus_per_team: 4, max_gpus: 8,
     preempt: [scavenger]}
  - {name: scavenger, usage_factor: 0, preempt_mode: requeue, grace_seconds: 10}
"""


def _inventory(tmp_path, qos: str, teams: str | None = None):
    root = tmp_path / "inv"
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(SMALL, root)
    (root / "group_vars" / "all" / "qos.yml").write_text(qos)
    if teams is not None:
        cluster_yml = root / "group_vars" / "all" / "cluster.yml"
        text = cluster_yml.read_text()
        start = text.index("kiln_teams:")
        end = text.index("kiln_storage_mounts:")
        cluster_yml.write_text(text[:start] + teams + text[end:])
    return root


TEAMS = """kiln_teams:
  - {name: alpha, shares: 70, gpu_limit: 4, users: [{name: ann, uid: 3001}], qos: [normal, high, scavenger],
     default_qos: normal}
  - {name: beta, shares: 30, users: [{name: ben, uid: 3002}], qos: [scavenger]}
"""


def test_qos_and_team_qos_are_read(tmp_path):
    cluster = load_cluster(_inventory(tmp_path, QOS_YML, TEAMS))
    qos = {q.name: q for q in cluster.setting("qos")}
    assert qos["high"].max_wall == "1-00:00:00" and qos["scavenger"].usage_factor == 0.0
    teams = {t.name: t for t in cluster.teams}
    assert slurm_qos.team_default_qos(teams["beta"]) == "scavenger"  # the first of its qos
    assert slurm_config.preempts(cluster)
    assert "PreemptType=preempt/qos\nPreemptMode=REQUEUE" in slurm_config.slurm_conf(cluster)
    assert "PreemptType" not in slurm_config.slurm_conf(load_cluster(SMALL))


@pytest.mark.parametrize("qos, teams, key, words", [
    ("kiln_qos: [{name: High}]\n", None, "kiln_qos", "QoS name"),
    ("kiln_qos: [{name: 'a;reboot'}]\n", None, "kiln_qos", "QoS name"),
    ("kiln_qos: [{name: a, max_wall: '1 day'}]\n", None, "kiln_qos", "Slurm time"),
    ("kiln_qos: [{name: a, usage_factor: '0'}]\n", None, "kiln_qos", "number"),
    ("kiln_qos: [{name: a, preempt_mode: suspend}]\n", None, "kiln_qos", "requeue"),
    ("kiln_qos: [{name: a}, {name: a}]\n", None, "kiln_qos[1].name", "defined twice"),
    ("kiln_qos: [{name: a, preempt: [a]}]\n", None, "kiln_qos[0].preempt", "itself"),
    ("kiln_qos: [{name: a, preempt: [scavenge]}, {name: scavenger}]\n", None, "kiln_qos[0].preempt",
     "'scavenger'"),
    ("kiln_qos: [{name: a, preempt: [b]}, {name: b, preempt: [c]}, {name: c, preempt: [a]}]\n", None,
     "kiln_qos[0].preempt", "one way"),
    ("kiln_qos: [{name: a, max_gpus_per_user: 8, max_gpus_per_team: 4}]\n", None, "kiln_qos[0].max_gpus_per_user",
     "never be reached"),
    ("kiln_qos: [{name: a, max_gpus_per_team: 16, max_gpus: 8}]\n", None, "kiln_qos[0].max_gpus_per_team",
     "never be reached"),
    ("kiln_qos: [{name: a}]\n", "kiln_teams:\n  - {name: alpha, shares: 1, qos: [a, hgh]}\n",
     "kiln_teams[0].qos[1]", "not in kiln_qos"),
    ("kiln_qos: [{name: a}]\n", "kiln_teams:\n  - {name: alpha, shares: 1, qos: [a], default_qos: normal}\n",
     "kiln_teams[0].default_qos", "not one of its qos"),
])
def test_invalid_qos_is_refused_naming_file_and_key(tmp_path, qos, teams, key, words):
    cluster, errors = validate(_inventory(tmp_path, qos, teams))
    assert cluster is None, "accepted"
    hits = [e for e in errors if e.key.startswith(key) and words in e.message]
    assert hits, errors
    assert hits[0].file.endswith(("qos.yml", "cluster.yml")), hits[0]


def test_sacctmgr_words_are_quoted_and_clear_what_is_unset():
    q = Qos(name="high", priority=100, max_wall="1-00:00:00", max_gpus_per_user=2, preempt=["scavenger"])
    assert slurm_qos.set_qos(q) == (
        "sacctmgr -i modify qos where name=high set Priority=100 MaxWall=1-00:00:00 MaxTRESPerUser=gres/gpu=2 "
        "MaxTRESPerAccount=gres/gpu=-1 GrpTRES=gres/gpu=-1 Preempt=scavenger PreemptMode=cluster UsageFactor=1 "
        "GraceTime=0")
    team = Team(name="alpha", shares=1, qos=["normal", "high"])
    assert slurm_qos.set_team_qos("c1", team) == ("sacctmgr -i modify account where name=alpha cluster=c1 set "
                                                  "QOS=normal,high DefaultQOS=normal")
    script = "\n".join(accounts_script("c1", [team], [q]))
    assert script.index("add qos high") < script.index("modify qos where name=high") < script.index("QOS=normal,high")


@pytest.mark.parametrize("text, seconds", [("1-00:00:00", 86400), ("2-12", 216000), ("00:01:00", 60), ("90", 5400),
                                           ("5:30", 330), ("", None), ("INFINITE", None), ("1 day", None)])
def test_slurm_durations_read_both_ways(text, seconds):
    assert slurm_qos.seconds(text) == seconds


# sacctmgr -nP show qos format=name,priority,maxwall,maxtrespu,maxtrespa,grptres,preempt,preemptmode,usagefactor,gracetime
# as Slurm 22.05 printed it on the testbed after kiln's deploy
DATABASE = ["REACHABLE c1", "c1", "---",
            "alpha||70|gres/gpu=4|high,normal,scavenger|normal", "alpha|ann|1||high,normal,scavenger|normal",
            "--- qos",
            "normal|10||||||cluster|1.000000|00:00:00",
            "high|100|1-00:00:00|gres/gpu=2,cpu=64|||scavenger|cluster|1.000000|00:00:00",
            "scavenger|0||||||requeue|0.000000|00:00:10"]


def test_database_equal_to_the_inventory_changes_nothing():
    state = parse_sacctmgr(DATABASE)
    wanted = {"normal": Qos(name="normal", priority=10),
              "high": Qos(name="high", priority=100, max_wall="24:00:00", max_gpus_per_user=2, preempt=["scavenger"]),
              "scavenger": Qos(name="scavenger", usage_factor=0.0, preempt_mode="requeue", grace_seconds=10)}
    for name, q in wanted.items():
        assert not slurm_qos.differs(state.qos_row(name), q), name  # a site's cpu=64 beside kiln's GPUs stays
    assoc = state.account("alpha")
    team = Team(name="alpha", shares=70, gpu_limit=4, qos=["scavenger", "normal", "high"], default_qos="normal")
    assert not slurm_qos.team_qos_differs(assoc.qos, assoc.default_qos, team)
    for changed in (wanted["high"].model_copy(update={"max_gpus": 8}),
                    wanted["high"].model_copy(update={"preempt": []}),
                    wanted["high"].model_copy(update={"max_wall": "2-00:00:00"}),
                    wanted["scavenger"].model_copy(update={"usage_factor": 0.5}),
                    wanted["scavenger"].model_copy(update={"grace_seconds": 0}),
                    wanted["scavenger"].model_copy(update={"preempt_mode": None})):
        assert slurm_qos.differs(state.qos_row(changed.name), changed), changed
    assert slurm_qos.team_qos_differs(assoc.qos, assoc.default_qos, team.model_copy(update={"default_qos": "high"}))
    assert not slurm_qos.team_qos_differs(assoc.qos, assoc.default_qos, team.model_copy(update={"qos": []}))
