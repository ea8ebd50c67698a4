"""What users and the cluster write never steers kiln: the classes of hostile answers, each with kiln's own
cases (the inventory's classes are in tests/inventories/hostile.py).

- Slurm's answers: job names, comments and drain reasons holding ``|``, newlines, ``\\r``, U+2028, a
  ``key=value`` or a whole forged record; read by kiln's readers they give the same totals as without them,
  or the record is refused and counted, never guessed.
- What kiln writes for others: CSV cells, plots, metrics labels.
- Bounds: host lists, and every validation check linear in the inventory's size.
- Answers from kiln's own services (Alertmanager, Prometheus) checked for shape.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from checks import job_summary, slurm_metrics
from checks.parsers.delimited import records
from checks.parsers.sinfo import read_nodes as read_sinfo_nodes
from checks.parsers.hostlist import expand_hostlist, hostlist_size
from checks.parsers.scontrol import SlurmRecordError, show_job, show_nodes
from checks.remediation import parse_views
from checks.slurm import node_state
from kiln.hostlist import HostListError, expand, fold
from kiln.patch.plan import PlanError, parse_nodes
from kiln.usage import sacct
from tests.slurm_framing import SEP, record

START, END = "2026-11-02T10:00:00", "2026-11-02T12:00:00"  # a two-hour job
FORGED_FIELDS = " Account=other StartTime=2000-01-01T00:00:00"
HOSTILE_TEXT = [
    FORGED_FIELDS,
    "a\rb",
    "a\u2028b\u2029c\x85d\x0be\x0cf\x1cg",
    "x|y|z",
    "\n999|mallory|other|normal|gpu|COMPLETED|2000-01-01T00:00:00|2000-01-01T00:00:00|2026-11-02T12:00:00|"
    "846000000|cpu=1,gres/gpu=8|gpu01||kiln:gpu_util=100|evil",
    "x" + SEP.replace("0", "1") + "y",  # a separator of another call
    '{\n  "pretty": "json",\n  "n": 1\n}',
    "=HYPERLINK(\"http://x\")",
]


def _sacct(name: str = "train", comment: str = "kiln:gpu_util=50.0,gpus=4,seconds=7200", job: str = "101",
           user_comment: str = "") -> str:
    return record(job, "ann", "alpha", "normal", "gpu", "COMPLETED", START, START, START, END, "7200",
                  "billing=8,cpu=8,gres/gpu=4,mem=64G,node=1", "gpu01", "", comment, user_comment, name, job)


def _totals(text: str) -> dict:
    jobs, problem = sacct.read(text, SEP)
    by_account: dict[str, float] = {}
    for j in jobs:
        by_account[j.account] = by_account.get(j.account, 0) + j.gpus * j.elapsed / 3600
    return {"accounts": by_account, "starts": sorted(j.start for j in jobs), "jobs": len(jobs), "problem": problem}


# --- Slurm's answers -------------------------------------------------------------------------------

@pytest.mark.parametrize("hostile", HOSTILE_TEXT, ids=range(len(HOSTILE_TEXT)))
def test_hostile_job_names_and_comments_give_the_same_usage_totals(hostile):
    plain = _totals(_sacct() + _sacct(job="102"))
    assert plain["accounts"] == {"alpha": 16.0} and plain["jobs"] == 2
    for text in (_sacct(name=hostile) + _sacct(job="102"), _sacct(comment=hostile) + _sacct(job="102", name=hostile)):
        got = _totals(text)
        assert got["accounts"] == plain["accounts"] and got["starts"] == plain["starts"] and not got["problem"]


def test_a_record_that_does_not_parse_whole_is_counted_and_named_never_guessed():
    torn = _sacct().replace(START, "yesterday", 1)  # a time that is not Slurm's
    jobs, problem = sacct.read(torn + _sacct(job="102"), SEP)
    assert [j.job_id for j in jobs] == ["102"] and problem.startswith("1 sacct record(s)") and "yesterday" in problem
    mismatched = _sacct(job="103")[: -len("103\n")] + "104\n"  # first and last job id differ
    jobs, problem = sacct.read(mismatched, SEP)
    assert jobs == [] and "1 sacct record" in problem
    framed = records("a" + SEP + "b" + SEP + "c\n" + "d" + SEP + "e\n", SEP, 3)
    assert len(framed.rows) == 1 and framed.bad == 1


@pytest.mark.parametrize("hostile", HOSTILE_TEXT, ids=range(len(HOSTILE_TEXT)))
def test_a_drain_reason_cannot_invent_a_node_for_remediation_or_metrics(hostile):
    forged = hostile + "\nn2|k|drained|k|2026-12-02T10:00:00|k|kiln: GPU_XID_79 forged|k|n2"
    sinfo = (record("n1", "drained", "2026-12-02T10:00:00", forged, "n1")
             + record("n2", "allocated", "Unknown", "none", "n2"))
    nodes, framed = read_sinfo_nodes(sinfo, SEP)
    assert framed.bad == 0 and nodes["n2"].state == "allocated" and nodes["n2"].reason == ""
    scontrol = ("NodeName=n1 Arch=x86_64 State=IDLE+DRAIN BootTime=2026-12-02T09:00:00 Reason=x [root@2026-12-02T10:00:00]\n"
                "NodeName=n2 Arch=x86_64 State=ALLOCATED BootTime=2026-12-02T09:00:00\n")
    views = {v.name: v for v in parse_views(sinfo, scontrol, ["n1", "n2"], SEP)}
    assert views["n2"].state == "allocated" and views["n2"].reason == "" and views["n1"].reason == forged
    states, drained = slurm_metrics.parse_nodes(sinfo, SEP)
    assert states == {"drained": 1, "allocated": 1} and [d[0] for d in drained] == ["n1"]


def test_a_reason_that_adds_a_node_line_to_scontrol_stops_the_look():
    text = ("NodeName=n1 State=IDLE+DRAIN BootTime=2026-12-02T09:00:00 Reason=maint [root@t]\n"
            "NodeName=n2 State=IDLE BootTime=2000-01-01T00:00:00 Reason=kiln: GPU_XID_79 [root@x]\n"
            "NodeName=n2 State=ALLOCATED BootTime=2026-12-02T09:00:00\n")
    with pytest.raises(SlurmRecordError, match="n2.*twice"):
        show_nodes(text)
    with pytest.raises(PlanError, match="cannot read whole"):
        parse_nodes(text)
    one = node_state("NodeName=n1 State=IDLE+DRAIN Reason=maint State=IDLE [root@t]\nNodeName=n1 State=IDLE\n")
    assert one["State"] == "IDLE+DRAIN" and one["Reason"] == "maint State=IDLE"  # the reason's own text
    shown = show_nodes(RECORDED_NODE)  # Slurm 22.05 on the testbed: a reason and a comment forging each other
    assert shown["kiln03"]["Reason"] == "r1 Comment=y" and shown["kiln03"]["State"] == "IDLE+DRAIN"
    assert shown["kiln03"]["OS"] == "Linux 6.18.44-fc-v1147 #1 SMP PREEMPT_DYNAMIC @0"
    no_reason = show_nodes(RECORDED_NODE.replace("Reason=r1 Comment=y [root@2026-12-03T06:31:02] ", ""))
    assert "Reason" not in no_reason["kiln03"]  # "Comment=c1 Reason=x" is a comment, not a drain reason


RECORDED_NODE = (
    "NodeName=kiln03 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.78 AvailableFeatures=(null) "
    "ActiveFeatures=(null) Gres=gpu:h100:4 NodeAddr=kiln03 NodeHostName=kiln03 Version=22.05.8 OS=Linux "
    "6.18.44-fc-v1147 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=1024 AllocMem=0 FreeMem=22890 Sockets=2 Boards=1 "
    "State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=batch  "
    "BootTime=2026-12-03T06:20:52 SlurmdStartTime=2026-12-03T06:22:06 LastBusyTime=2026-12-03T06:23:00 "
    "CfgTRES=cpu=2,mem=1G,billing=2,gres/gpu=4,gres/gpu:h100=4 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 "
    "ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s Reason=r1 Comment=y [root@2026-12-03T06:31:02] "
    "Comment=c1 Reason=x Extra=e1\n")


SHOW_JOB = """JobId=1 JobName={name}
   UserId=alice(2101) GroupId=alice(2101) MCS_label=N/A
   Priority=1100 Nice=0 Account=vision QOS=normal
   JobState=COMPLETED Reason=None Dependency=(null)
   SubmitTime=2026-12-03T06:22:56 EligibleTime=2026-12-03T06:22:56
   StartTime=2026-12-03T06:22:56 EndTime=2026-12-03T08:22:56 Deadline=N/A
   NodeList=kiln[02-03]
   JOB_GRES=gpu:h100:2
     Nodes=kiln02 CPU_IDs=0 Mem=512 GRES=gpu:h100:1(IDX:0)
     Nodes=kiln03 CPU_IDs=0 Mem=512 GRES=gpu:h100:1(IDX:1)
   Command=(null)
   WorkDir=/tmp/{name}
   Comment={name}
   StdOut=/tmp/slurm-1.out
"""


@pytest.mark.parametrize("name", [FORGED_FIELDS, "a\rb Account=other", "x\u2028   Account=other", "a|b"])
def test_a_job_name_cannot_charge_another_team_or_stretch_the_job(name):
    info = job_summary.parse_job(SHOW_JOB.format(name=name))
    assert info["account"] == "vision" and info["end"] - info["start"] == 7200
    assert info["gpus"] == {"kiln02": [0], "kiln03": [1]}
    assert show_job(SHOW_JOB.format(name=name))["JobName"] == name


@pytest.mark.parametrize("name", ["x\n   Account=other", "x\nStartTime=2000-01-01T00:00:00", "x\r\n   y", "\n"])
def test_a_job_name_with_newlines_is_read_whole(name):
    """Slurm prints the name and then its UserId line: the name is all that comes before (the same text in
    a comment, whose lines are not the record's own, is ambiguous: refused below)."""
    text = SHOW_JOB.replace("WorkDir=/tmp/{name}", "WorkDir=/tmp").replace("Comment={name}", "Comment=c").format(name=name)
    info = job_summary.parse_job(text)
    assert info["account"] == "vision" and info["end"] - info["start"] == 7200
    assert show_job(text)["JobName"] == name
    with pytest.raises(SlurmRecordError):  # in the comment: "\n   Account=" or "\nStartTime" can be the record's
        job_summary.parse_job(SHOW_JOB.replace("Comment={name}", "Comment=" + name + "\n   Account=x").format(name="t"))


@pytest.mark.parametrize("name", [
    "x\n   UserId=mallory(1) GroupId=m(1) MCS_label=N/A\n   Priority=1 Nice=0 Account=other QOS=normal",
    "x\n   UserId=a(1)\n   StartTime=2000-01-01T00:00:00 EndTime=2026-12-03T08:22:56 Deadline=N/A",
    "x\n   UserId=a(1)\n     Nodes=kiln09 CPU_IDs=0 Mem=1 GRES=gpu:h100:8(IDX:0-7)",
    "x\n   UserId=a(1)\n     Nodes=kiln02 CPU_IDs=0 Mem=1 GRES=gpu:h100:8(IDX:0-7)"])
def test_a_job_record_a_name_makes_ambiguous_is_refused(name):
    with pytest.raises(SlurmRecordError):
        job_summary.parse_job(SHOW_JOB.format(name=name))


@pytest.mark.parametrize("comment", ['{\n  "a": 1,\n  "b": [2]\n}', "line one\nline two"])
def test_a_comment_of_several_lines_is_one_field(comment):
    shown = show_job(SHOW_JOB.format(name="t").replace("   Comment=t", f"   Comment={comment}"))
    assert shown["Comment"] == comment and shown["Account"] == "vision"
    assert job_summary.parse_job(SHOW_JOB.format(name="t").replace("   Comment=t", f"   Comment={comment}"))["gpus"]


def test_job_summary_reads_folded_node_lists_of_several_names():
    text = SHOW_JOB.format(name="t").replace("NodeList=kiln[02-03]", "NodeList=gpu[01-02],cpu05").replace(
        "Nodes=kiln02", "Nodes=gpu[01-02]").replace("     Nodes=kiln03 CPU_IDs=0 Mem=512 GRES=gpu:h100:1(IDX:1)\n", "")
    assert job_summary.parse_job(text)["gpus"] == {"gpu01": [0], "gpu02": [0]}


# --- what kiln writes for others -------------------------------------------------------------------

@pytest.mark.parametrize("cell", ["=HYPERLINK(\"http://x\",\"y\")", "@SUM(A1:A9)", "+cmd|' /C calc'!A0", "-2+3",
                                  "\t=1", "\r=1"])
def test_csv_cells_a_spreadsheet_would_run_are_text(cell):
    from kiln.cli.usage import spreadsheet_cell
    assert spreadsheet_cell(cell) == "'" + cell and spreadsheet_cell("vision") == "vision"
    assert spreadsheet_cell(-2.5) == -2.5


def test_team_names_with_dollars_are_drawn_as_text():
    pytest.importorskip("matplotlib")
    from kiln.inventory import load_cluster
    from kiln.usage.html_page import page, plots
    from kiln.usage.report import report
    from tests.unit.test_usage_page import SACCT, SMALL, _ts
    from tests.slurm_framing import frame
    data = report(sacct.read(frame(SACCT, 17), SEP)[0], load_cluster(SMALL), _ts("2026-11-02T00:00:00"),
                  _ts("2026-11-06T00:00:00"), {"gpu_a": 2.0}, "EUR", [])
    evil = "a$b$c$\\frac{"
    data = json.loads(json.dumps(data).replace('"alpha"', json.dumps(evil)))
    assert evil in [t["team"] for t in data["teams"]]
    images = plots(data)  # mathtext would fail on the unbalanced "$" and the half \\frac
    assert sorted(images) == ["cost_per_team", "gpu_hours_over_time", "idle_allocation"]
    import matplotlib
    assert matplotlib.rcParams["text.parse_math"] is False
    assert "a$b$c$" in page(data)


def test_a_metrics_label_cut_after_its_escape_stays_one_label():
    from checks.parsers.exposition import label_value
    label = label_value("x" * 199 + "\\" + "tail")
    assert not label.endswith("\\") or label.endswith("\\\\")
    reason = "y" * 199 + '"'
    text = slurm_metrics.exposition(1, 1, ({"drained": 1}, []), {"a": {"states": {}, "pending": {reason: 1}, "gpus": 0}},
                                    {}, 1e9)
    line = next(x for x in text.split("\n") if x.startswith("kiln_slurm_jobs_pending{"))
    assert line.endswith('"} 1') and line.count('reason="') == 1
    promtool = shutil.which("promtool")
    if promtool:
        out = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
        assert "error" not in (out.stdout + out.stderr).lower() or out.returncode == 0, out.stdout + out.stderr


# --- bounds ----------------------------------------------------------------------------------------

def test_a_host_list_is_bounded_before_it_is_expanded():
    t0 = time.perf_counter()
    for bad in ("n[1-100000000]", "r[0-9999]n[0-9999]", "a[1-60000],b[1-60000]"):
        with pytest.raises(HostListError, match="over 100000"):
            expand(bad)
        with pytest.raises(SlurmRecordError, match="over 100000"):
            expand_hostlist(bad)
    assert time.perf_counter() - t0 < 1.0
    assert hostlist_size("gpu[01-04,08],cpu05") == 6


def _slurm_meaning(expression: str) -> list[str]:
    """What a generated host list stands for, written out plainly for this test: each bracket a choice of
    its ranges (padding as written), bracket after bracket as a product, text between kept."""
    import itertools
    import re as regex
    names = []
    for term in regex.findall(r"(?:[^,\[]|\[[^\]]*\])+", expression):
        parts = regex.split(r"\[([^\]]*)\]", term)
        choices = []
        for i, part in enumerate(parts):
            if i % 2 == 0:
                choices.append([part])
                continue
            items = []
            for r in part.split(","):
                a, _, b = r.partition("-")
                items += [f"{n:0{len(a)}d}" for n in range(int(a), int(b or a) + 1)]
            choices.append(items)
        names += ["".join(p) for p in itertools.product(*choices)]
    return names


@pytest.mark.parametrize("seed", range(40))
def test_both_sides_read_generated_host_lists_as_slurm_means_them(seed):
    """Prefixes, text after brackets, several ranges and brackets, padding: the hosts' reader
    (checks/parsers/hostlist.py) and the operator's (kiln/hostlist.py) both give what the list means, and
    the operator's fold gives it back."""
    import random
    rnd = random.Random(seed)
    terms = []
    for _ in range(rnd.randint(1, 3)):
        prefix = rnd.choice(["gpu", "n", "rack1-node", "a.b", "x_y"])
        groups = []
        count = rnd.randint(1, 2)
        for g in range(count):
            width = rnd.choice([1, 2, 3])
            ranges = []
            for _ in range(rnd.randint(1, 3)):
                a = rnd.randint(0, 20)
                b = a + rnd.randint(0, 5)
                ranges.append(f"{a:0{width}d}" + (f"-{b:0{width}d}" if b > a else ""))
            groups.append("[" + ",".join(ranges) + "]" + rnd.choice(["-ib", "s"] + ([""] if g == count - 1 else [])))
        terms.append(prefix + "".join(groups))
    expression = ",".join(terms)
    meant = sorted(set(_slurm_meaning(expression)))
    assert sorted(set(expand_hostlist(expression))) == meant, expression
    assert sorted(set(expand(expression))) == meant, expression
    assert sorted(expand(fold(meant))) == meant


@pytest.mark.parametrize("text", ["@gpus", "gpu[1-4]!gpu2", "gpu[1-4]&gpu[2-3]", "gpu[1-4]^gpu1", "gpu[1-9/2]",
                                  "gpu1 gpu2", "gpu[1-2]]", "gpu[[1-2]]", "gpu[2-1]", "gpu[1-]", "ｇpu1", "gpu1;id"])
def test_what_no_slurm_host_list_holds_is_refused_on_both_sides(text):
    """NodeSet would resolve ``@group`` through a configuration file and read ``!&^`` as set operations:
    nothing but Slurm's own syntax reaches it."""
    with pytest.raises(SlurmRecordError):
        expand_hostlist(text)
    with pytest.raises(HostListError):
        expand(text)


# --- answers from kiln's own services --------------------------------------------------------------

@pytest.mark.parametrize("answer", [{"data": []}, "text", [1], [{"labels": "x"}], [{"labels": {"a": 1}}],
                                    [{"labels": {}, "annotations": {"s": ["x"]}}], [{"labels": {}, "startsAt": 5}]])
def test_an_alertmanager_answer_of_another_shape_is_a_clear_error(answer):
    from kiln.monitoring.alerts import MonitoringError, alert_list
    with pytest.raises(MonitoringError, match="Alertmanager answered"):
        alert_list(answer)


@pytest.mark.parametrize("answer", [{}, {"data": {"result": {}}}, {"data": {"result": [{"metric": {}, "value": 1}]}},
                                    {"data": {"result": [{"metric": {"a": 1}, "value": [1, "2"]}]}}])
def test_a_prometheus_answer_of_another_shape_is_a_clear_error(answer):
    from kiln.monitoring.alerts import MonitoringError, vector
    with pytest.raises(MonitoringError, match="Prometheus answered"):
        vector(answer)


def test_alert_labels_that_are_no_host_list_are_listed_not_expanded():
    from kiln.monitoring.alerts import alert_list, folded
    alerts = alert_list([{"labels": {"alertname": "KilnX", "node": n, "severity": "warning"}, "annotations": {},
                          "startsAt": "2026-12-03T00:00:00Z"} for n in ("gpu01", "n[1-100000000]", "gpu02")])
    out = folded(alerts)
    assert len(out) == 1 and "gpu01" in out[0].hosts and "'n[1-100000000]'" in out[0].hosts


def test_kiln_alerts_json_output_is_json():
    from kiln.monitoring.alerts import alert_list, folded
    text = json.dumps([f.as_dict() for f in folded(alert_list([]))])
    assert json.loads(text) == []


# --- addresses ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["10.0.0.1,*", "*", "fe80::1%eth0", "10.0.0.1 x", 'a"b', "::ffff:10.0.0.1", "[::1]"])
def test_only_canonical_addresses_reach_ssh_files(value):
    from kiln.inventory.formats import canonical_address
    from kiln.known_hosts import _target
    with pytest.raises(ValueError):
        canonical_address(value)
    with pytest.raises(ValueError):
        _target(value, 22)
    assert _target("2001:db8::1", 2222) == "[2001:db8::1]:2222" and canonical_address("gpu01") == "gpu01"


def test_an_ipv4_mapped_address_is_written_as_ipv4():
    from kiln.inventory.formats import check_address
    assert check_address("::ffff:10.0.0.31") == "10.0.0.31" and check_address("2001:DB8::1") == "2001:db8::1"


def test_the_repair_keys_from_option_holds_canonical_addresses_only(tmp_path):
    from types import SimpleNamespace

    from roles.remediation import authorized_line
    ctl = SimpleNamespace(address="fe80::1%eth0\",permitopen=\"*")
    ctx = SimpleNamespace(cluster=SimpleNamespace(controllers=[ctl], name="c"),
                          secrets=SimpleNamespace(remediation_key=Path("/nonexistent")))
    with pytest.raises(ValueError, match="canonical form.*zone"):
        authorized_line(ctx)
    ctx.cluster.controllers = [SimpleNamespace(address="10.0.0.1,0.0.0.0/0")]
    with pytest.raises(ValueError, match="canonical"):
        authorized_line(ctx)
