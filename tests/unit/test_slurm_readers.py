"""One reader for each Slurm command's output: every place in kiln's code that builds a command reading
Slurm (sinfo, squeue, sacct, sacctmgr show, sshare, sreport, sdiag, scontrol show/ping/version) is in
that command's one reader module, so a caller gets the command and its reader together and a second
reader cannot appear unseen.

Found by walking the syntax of every module (never its text): a list or tuple whose first item is the
tool, a ``command("tool", ...)`` call, and a shell line in a string (or an f-string) that runs the tool.
Docstrings, and strings that only name a tool in an error message (inside ``raise``), are not commands.
Commands that change Slurm (scontrol update/reboot/requeue, sacctmgr add/modify, scancel) are no reads.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import re
from pathlib import Path

import pytest

from tests.conftest import REPO

# The one module that builds each read command and reads its output.
READERS = {
    "sinfo": "checks.parsers.sinfo",
    "squeue": "checks.parsers.squeue",
    "scontrol show": "checks.parsers.scontrol",     # show node (-o), show job -d, show reservation (-o)
    "scontrol ping": "checks.parsers.scontrol",
    "scontrol version": "checks.parsers.scontrol",
    "sacct": "kiln.usage.sacct",
    "sacctmgr show": "checks.parsers.sacctmgr",
    "sdiag": "checks.slurm_metrics",
    "sshare": "checks.parsers.slurm_usage",
    "sreport": "checks.parsers.slurm_usage",
}
TOOLS = ("sinfo", "squeue", "sacct", "sacctmgr", "sshare", "sreport", "sdiag", "scontrol")
SHELL_RUN = re.compile(r"(?:^|[;&|`]\s*|\$\(\s*|\b(?:TZ|LC_ALL|LANG)=\S+\s+)(" + "|".join(TOOLS) + r")\s+([^;&|)`]*)")
ROOTS = ("kiln", "checks", "roles", "benchmarks")


def _kind(tool: str, words: list[str]) -> str | None:
    """The READERS key of ``tool`` run with ``words``, or None for a command that changes Slurm."""
    verbs = [w for w in words if w and not w.startswith("-")]
    if tool == "scontrol":
        verb = verbs[0] if verbs else ""
        return f"scontrol {verb}" if verb in ("show", "ping", "version") else None
    if tool == "sacctmgr":
        return "sacctmgr show" if verbs[:1] in (["show"], ["list"]) else None
    return tool


def _words(nodes: list[ast.expr]) -> list[str]:
    return [n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _flat(node: ast.expr) -> str:
    """A string or an f-string as text, each placeholder as ``{}``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return ""


def commands_in(source: str) -> list[tuple[int, str]]:
    """(line, READERS key) of every Slurm read command ``source`` builds."""
    tree = ast.parse(source)
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skip.add(id(first.value))  # a docstring
        if isinstance(node, ast.Raise):
            skip.update(id(n) for n in ast.walk(node))  # an error message naming the tool
        if isinstance(node, ast.JoinedStr):
            skip.update(id(n) for n in node.values)  # read once, as the whole f-string
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, (ast.List, ast.Tuple)) and node.elts:
            head = node.elts[0]
            # a command: the tool alone or with words (``("sacct", out)`` pairs a label with a value)
            if isinstance(head, ast.Constant) and head.value in TOOLS and (len(node.elts) == 1 or _words(node.elts[1:])):
                kind = _kind(head.value, _words(node.elts[1:]))
                if kind:
                    found.append((node.lineno, kind))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "command":
            if node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value in TOOLS:
                kind = _kind(node.args[0].value, _words(node.args[1:]))
                if kind:
                    found.append((node.lineno, kind))
        elif isinstance(node, (ast.Constant, ast.JoinedStr)) and not isinstance(getattr(node, "value", None), bytes):
            for m in SHELL_RUN.finditer(_flat(node)):
                kind = _kind(m.group(1), m.group(2).split())
                if kind:
                    found.append((node.lineno, kind))
    return found


def _modules():
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            if "simulators" in path.parts:  # the testbed's stand-ins print tools' answers, never read them
                continue
            rel = path.relative_to(REPO).with_suffix("")
            yield ".".join(rel.parts).removesuffix(".__init__"), path


def test_every_slurm_read_command_is_built_by_its_one_reader():
    places: dict[str, set[str]] = {}
    for module, path in _modules():
        for line, kind in commands_in(path.read_text()):
            places.setdefault(kind, set()).add(module)
            assert READERS.get(kind) == module, (
                f"{path.relative_to(REPO)}:{line} builds a {kind!r} command; its one reader is "
                f"{READERS.get(kind)}: call that module's command and reader instead of a second reader")
    for kind, module in READERS.items():  # each reader found where it is said to be (no stale entry)
        if module is not None:
            assert places.get(kind) == {module}, (kind, places.get(kind))


@pytest.mark.parametrize("source, kind", [
    ('out = run(["squeue", "-h", "-o", "%i %T"])', "squeue"),
    ('out = node.run(command("sinfo", "-N", "-o", "%N"))', "sinfo"),
    ('out = node.run(f"scontrol show node {name} -o")', "scontrol show"),
    ('out = node.run(f"TZ=UTC sacct -a -X -n -P -o JobID,JobName")', "sacct"),
    ('cmd = "command -v sacctmgr >/dev/null && c=$(sacctmgr -nP show cluster)"', "sacctmgr show"),
    ('x = ("scontrol", "-o", "show", "job", job)', "scontrol show"),
    ('run(["sshare", "-a", "-P"])', "sshare"),
])
def test_a_second_reader_anywhere_is_found(source, kind):
    """What the registry test catches: a new place building any read command, in each form."""
    assert [k for _, k in commands_in(source)] == [kind]


@pytest.mark.parametrize("source", [
    'run(["scontrol", "update", f"nodename={n}", "state=drain"])',
    'node.run(command("sacctmgr", "-i", "add", "account", name))',
    'raise SlurmError(f"squeue -j {ids} exited {rc}")',
    'def f():\n    """Reads ``squeue -h`` lines."""\n',
    'run(["scancel", "--signal=USR1", job])',
])
def test_commands_that_change_slurm_and_messages_are_no_readers(source):
    assert commands_in(source) == []


def test_the_registry_names_modules_that_exist():
    for module in filter(None, set(READERS.values())):
        assert (REPO / Path(*module.split("."))).with_suffix(".py").is_file(), module


def _strptime_formats(source: str) -> list[tuple[int, str]]:
    """(line, format) of every ``strptime(..., FORMAT)`` call with a constant format."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "strptime":
            out += [(node.lineno, a.value) for a in node.args[1:] if isinstance(a, ast.Constant)]
    return out


def test_slurm_times_are_read_in_one_place_as_utc():
    """Slurm's ``2026-12-03T10:12:42`` is read by checks/parsers/slurm_values.epoch only (as UTC, the zone
    kiln runs every Slurm command in); kiln/cli/usage.py reads the operator's --since/--until (UTC too)."""
    allowed = {"checks.parsers.slurm_values", "kiln.cli.usage"}
    for module, path in _modules():
        for line, fmt in _strptime_formats(path.read_text()):
            if fmt.startswith("%Y-%m-%dT%H:%M"):
                assert module in allowed, f"{path.relative_to(REPO)}:{line} reads a Slurm time itself"


# --- the readers themselves -------------------------------------------------------------------------

def test_squeue_records_hold_any_reason_and_refuse_a_torn_one():
    from checks.parsers import squeue
    from tests.slurm_framing import SEP, record
    fields = ("State", "Reason", "NodeList")
    text = (record("41", "PENDING", "forged\n42|RUNNING|x|gpu01", "", "41")
            + record("43", "RUNNING", "None", "gpu[01-02]", "43") + record("44", "RUNNING", "None", "gpu03", "45"))
    jobs, framed = squeue.read_jobs(text, SEP, fields)
    assert [j["JobID"] for j in jobs] == ["41", "43"] and jobs[0]["Reason"] == "forged\n42|RUNNING|x|gpu01"
    assert framed.bad == 1 and "45" in framed.first_bad  # first and last ids differ: never a guess
    command = squeue.jobs_command(SEP, fields, "-w", "gpu01")
    assert command[-1] == f"JobID:{SEP},State:{SEP},Reason:{SEP},NodeList:{SEP},JobID:" and "-w" in command


def test_reservations_are_read_whole_and_a_doubled_key_refused():
    from checks.parsers.scontrol import SlurmRecordError, show_reservations
    line = ("ReservationName=kiln_patch_ab12_1 StartTime=2026-12-03T10:00:00 EndTime=2026-12-03T11:00:00 "
            "Duration=01:00:00 Nodes=kiln[02-03] NodeCnt=2 CoreCnt=2 Features=(null) PartitionName=(null) "
            "Flags=MAINT,IGNORE_JOBS TRES=cpu=2 Users=root Groups=(null) Accounts=(null) Licenses=(null) "
            "State=INACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)\n")
    shown = show_reservations(line)
    assert shown["kiln_patch_ab12_1"]["Nodes"] == "kiln[02-03]" and shown["kiln_patch_ab12_1"]["TRES"] == "cpu=2"
    assert show_reservations("No reservations in the system\n") == {}
    with pytest.raises(SlurmRecordError, match="twice"):
        show_reservations(line.replace("State=INACTIVE", "State=INACTIVE Nodes=kiln01"))


@pytest.mark.parametrize("text, expected", [
    ("2026-03-29T01:30:00", 1774747800.0),   # the hour Europe's clocks skip: UTC has it
    ("2026-10-25T02:30:00", 1792895400.0),   # the hour Europe's clocks repeat: one UTC instant
    ("Unknown", None), ("None", None), ("", None), ("(null)", None),
    ("2026-02-30T00:00:00", None), ("2026-12-03T10:12:42 ", 1796292762.0), ("2026-12-03 10:12:42", None),
    ("２０２６-12-03T10:12:42", None),
])
def test_slurm_times_are_utc_whatever_the_readers_zone(text, expected, monkeypatch):
    import time as clock
    from checks.parsers.slurm_values import epoch
    monkeypatch.setenv("TZ", "Europe/Berlin")
    clock.tzset()
    try:
        assert epoch(text) == expected
    finally:
        monkeypatch.delenv("TZ")
        clock.tzset()


def test_tres_lists_and_sacctmgr_rows():
    from checks.parsers import sacctmgr
    from checks.parsers.slurm_values import tres, tres_count
    assert tres_count("cpu=2,mem=1G,billing=3,gres/gpu=2,gres/gpu:h100=2") == 2
    assert tres_count("cpu=2,gres/gpu:h100=2") == 0 and tres_count("gres/gpu=x") == 0
    assert tres("cpu=2,,mem=1G")["mem"] == "1G"
    rows, left = sacctmgr.read("vision|60\nlanguage|40|extra\n", ("account", "fairshare"))
    assert rows == [{"account": "vision", "fairshare": "60"}] and left.bad == 1


# --- the one textfile writer -------------------------------------------------------------------------

def test_every_prom_file_is_written_by_the_one_writer():
    """No module but checks/parsers/exposition.py writes ``# HELP``/``# TYPE`` lines itself."""
    for module, path in _modules():
        if module == "checks.parsers.exposition":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            text = _flat(node) if isinstance(node, (ast.Constant, ast.JoinedStr)) else ""
            assert not re.match(r"# (HELP|TYPE) ", text), f"{path.relative_to(REPO)}:{node.lineno} writes exposition"


def test_the_writer_refuses_what_node_exporter_would_drop_the_file_for(tmp_path):
    from checks.parsers.exposition import Exposition, write
    out = Exposition()
    out.add("kiln_x", "gauge", "A help\\with a newline\nin it.", 1, {"reason": 'r"\n\\' + "y" * 300})
    out.add("kiln_y", "summary", "s", 1.5, suffix="_sum")
    out.add("kiln_x", "gauge", "A help\\with a newline\nin it.", float("nan"), {"reason": "b"})
    for bad in (lambda: out.add("kiln x", "gauge", "h", 1), lambda: out.add("kiln_x", "counter", "h", 1),
                lambda: out.add("kiln_z", "gauge", "h", True), lambda: out.add("kiln_z", "gauge", "h", "1"),
                lambda: out.add("kiln_z", "gauge", "h", 1, {"bad-label": "x"}),
                lambda: out.add("kiln_z", "gauge", "h", 1, suffix="_sum")):
        with pytest.raises(ValueError):
            bad()
    text = out.text()
    assert text.split("\n")[:4] == ["# HELP kiln_x A help\\\\with a newline\\nin it.", "# TYPE kiln_x gauge",
                                    'kiln_x{reason="r\\"\\n\\\\' + "y" * 196 + '"} 1', 'kiln_x{reason="b"} NaN']
    assert "kiln_y_sum 1.5" in text
    write(str(tmp_path), "kiln.prom", text)
    assert (tmp_path / "kiln.prom").read_text() == text and oct((tmp_path / "kiln.prom").stat().st_mode)[-3:] == "644"
    assert [p.name for p in tmp_path.iterdir()] == ["kiln.prom"]
    promtool = shutil.which("promtool")
    if promtool:
        check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
        assert "error" not in (check.stdout + check.stderr).lower(), check.stdout + check.stderr


def test_scontrol_show_config_gives_the_running_settings():
    """Slurm 22.05's layout: a banner, ``Name<spaces>= value`` lines, a value holding '=' and spaces."""
    from checks.parsers import scontrol
    text = ("Configuration data as of 2026-12-03T23:01:02\n"
            "AccountingStorageBackupHost = (null)\n"
            "AuthInfo                = cred_expire=30\n"
            "AuthType                = auth/munge\n"
            "SlurmctldParameters     = enable_configless\n"
            "SchedulerParameters     = nohold_on_prolog_fail\n"
            "SlurmdTimeout           = 30 sec\n"
            "\n"
            "Cgroup Support Configuration:\n"
            "AllowedRAMSpace         = 100.0%\n"
            "Slurmctld(primary) at kilntest01 is UP\n")
    config = scontrol.show_config(text)
    assert config["AuthInfo"] == "cred_expire=30" and config["SlurmdTimeout"] == "30 sec"
    assert config["AccountingStorageBackupHost"] == "(null)" and config["AllowedRAMSpace"] == "100.0%"
    assert "Configuration data as of 2026-12-03T23:01:02" not in config and len(config) == 7
    assert scontrol.SHOW_CONFIG_COMMAND == ["scontrol", "show", "config"]
