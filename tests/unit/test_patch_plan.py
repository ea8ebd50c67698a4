"""The rollout's pure parts: batches, the max-unavailable rule, Slurm node states, the journal, the
report, and the node-local runner leaving a rollout's drain alone."""

from __future__ import annotations

import json
import re

import pytest

from checks.node import Node, Result
from checks.node_local import drain_or_resume
from checks.verdict import Verdict
from kiln.patch import journal as journals
from kiln.patch import report
from kiln.patch.plan import PlanError, SlurmNode, make_plan, parse_max_unavailable, parse_nodes, room
from tests.slurm_framing import frame

SCONTROL = """NodeName=n1 Arch=x86_64 CoresPerSocket=1 State=IDLE ThreadsPerCore=1 BootTime=2026-11-30T01:57:54 Partitions=batch
NodeName=n2 Arch=x86_64 State=MIXED BootTime=2026-11-30T01:57:55 Partitions=batch
NodeName=n3 Arch=x86_64 State=IDLE+DRAIN BootTime=2026-11-30T01:57:55 Reason=disk replacement [root@2026-11-30T02:00:00]
NodeName=n4 Arch=x86_64 State=DOWN* BootTime=None Reason=Not responding [slurm@2026-11-30T02:00:00]
NodeName=n5 Arch=x86_64 State=ALLOCATED+DRAIN BootTime=2026-11-30T01:57:55 Reason=kiln: patch ab12cd34 [root@2026-11-30T02:01:00]
NodeName=n6 Arch=x86_64 State=IDLE+NOT_RESPONDING BootTime=2026-11-30T02:02:00
"""
ALL = ["n1", "n2", "n3", "n4", "n5", "n6"]


def test_slurm_states():
    nodes = parse_nodes(SCONTROL)
    assert [n for n in ALL if nodes[n].in_service] == ["n1", "n2"]
    assert nodes["n3"].drained_by_person and nodes["n3"].reason == "disk replacement"
    assert nodes["n4"].down and not nodes["n4"].drained_by_person
    assert nodes["n5"].drained_by_kiln and not nodes["n5"].drained_by_person
    assert nodes["n6"].down and nodes["n1"].boot_time == "2026-11-30T01:57:54"


def test_batches_canary_first_and_skipped_nodes_keep_their_reason():
    slurm = {n: SlurmNode(n, "IDLE") for n in ALL} | {"n3": SlurmNode("n3", "IDLE+DRAIN", "disk replacement"),
                                                     "n4": SlurmNode("n4", "DOWN*", "Not responding")}
    plan = make_plan(["ctl"], ALL, ALL, slurm, max_unavailable=2, canary=1)
    assert plan.service == ["ctl"] and plan.compute == [["n1"], ["n2", "n5"], ["n6"]]
    assert plan.skipped["n3"] == "drained by a person, kept: 'disk replacement'"
    assert plan.skipped["n4"].startswith("down in Slurm (DOWN*")


def test_room_counts_every_node_already_out_of_service():
    nodes = parse_nodes(SCONTROL)
    # 2 of 6 in service, floor 6 - 4 = 2: no room; with 5 allowed out, one may go
    assert room(nodes, ALL, 4) == 0 and room(nodes, ALL, 5) == 1
    healthy = {n: SlurmNode(n, "IDLE") for n in ALL}
    assert room(healthy, ALL, 1) == 1 and room(healthy, ALL, 2) == 2


@pytest.mark.parametrize("text,total,expected", [("1", 10, 1), ("3", 10, 3), ("25%", 10, 2), ("5%", 10, 1)])
def test_max_unavailable(text, total, expected):
    assert parse_max_unavailable(text, total) == expected


@pytest.mark.parametrize("text", ["0", "-1", "a", "10%%", "0%"])
def test_bad_max_unavailable_is_refused(text):
    with pytest.raises(PlanError, match="--max-unavailable"):
        parse_max_unavailable(text, 10)


def test_journal_is_appended_synced_and_read_back_ignoring_a_torn_line(tmp_path):
    path = tmp_path / "r" / "1.jsonl"
    j = journals.Journal(path)
    j.write("start", rollout="x", plan={}, options={})
    j.write("step", node="n1", step="drain", phase="begin")
    j.write("step", node="n1", step="drain", phase="done")
    j.close()
    with open(path, "a") as f:
        f.write('{"event": "step", "node": "n1", "st')  # killed mid-write
    records = journals.read(path)
    assert [r["event"] for r in records] == ["start", "step", "step"]
    again = journals.Journal(path, records)
    assert again.done("n1", "drain") and not again.done("n1", "apply") and again.begun("n1", "drain")
    assert journals.unfinished(tmp_path / "r") == path
    again.write("end", result="completed")
    again.close()
    assert journals.unfinished(tmp_path / "r") is None


def test_the_report_draws_nodes_in_service_and_escapes_text():
    records = [{"t": 0, "event": "start", "plan": {"total_compute": 4, "max_unavailable": 1},
                "options": {"roles": ["nvidia_driver"], "reboot": "always"}},
               {"t": 1, "event": "sample", "in_service": 4}, {"t": 2, "event": "batch", "phase": "begin", "index": 0},
               {"t": 3, "event": "sample", "in_service": 3},
               {"t": 9, "event": "node", "node": "n1", "result": "failed", "detail": "<GPU_LOST>"},
               {"t": 9, "event": "batch", "phase": "done", "index": 0, "nodes": ["n1"], "seconds": 8, "drain_s": 1,
                "patch_s": 3, "reboot_s": 3, "overhead_s": 1},
               {"t": 10, "event": "end", "result": "stopped", "why": "failure budget spent"}]
    page = report.html(records, "c")
    assert "<svg" in page and "fewest seen: 3" in page and "floor 3" in page and "&lt;GPU_LOST&gt;" in page
    assert "<script" not in page and "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "").replace(
        "http-equiv", "")


def test_the_node_local_check_never_resumes_or_relabels_a_rollout_drain():
    commands = []

    def run(command):
        commands.append(command)
        return Result(0, "NodeName=n1 State=IDLE+DRAIN Reason=kiln: patch ab12cd34 [root@2026-11-30T02:01:00]\n")
    node = Node("n1", run, local=True)
    assert drain_or_resume(node, "n1", []) == "left to the rollout"
    assert drain_or_resume(node, "n1", [Verdict("GPU_LOST", "fail", "gone", "gpu")]) == "left to the rollout"
    assert not any("scontrol update" in c for c in commands)
    assert json.dumps(commands)  # only reads


def test_jobs_fold_slurms_node_lists_and_an_unreadable_one_stops_as_no_answer():
    from checks.node import Result
    from kiln.patch.slurmctl import SlurmControl, SlurmError

    class Controller:
        name = "ctl1"

        def __init__(self, stdout: str):
            self.stdout = stdout

        def run(self, command: str) -> Result:
            sep = re.search(r"JobID:(\|k[0-9a-f]{16}\|)", command).group(1)  # the call's own separator
            return Result(0, self.stdout[4:] if self.stdout.startswith("raw:") else frame(self.stdout, 2, sep), "")

    jobs = SlurmControl(Controller("17|gpu[01-03]\n18|gpu03,gpu09\n")).jobs(["gpu01", "gpu03", "gpu04"])
    assert jobs == {"gpu01": ["17"], "gpu03": ["17", "18"], "gpu04": []}
    with pytest.raises(SlurmError, match="node list kiln cannot read for job 19"):
        SlurmControl(Controller("19|gpu[01-\n")).jobs(["gpu01"])
    with pytest.raises(SlurmError, match="squeue record"):  # a record that does not parse whole: no answer
        SlurmControl(Controller("raw:20 gpu01\n")).jobs(["gpu01"])  # no separator of this call
