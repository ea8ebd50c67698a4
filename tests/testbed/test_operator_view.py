"""What a person sees while kiln works on the shared testbed (#19): the live panel in a terminal
(recorded with tmux capture-pane), the stamped lines of the same command when its output is not a
terminal, and the run's log."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.testbed.slurm_helpers import kiln

@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux to give kiln a terminal and record it")
def test_deploy_draws_a_live_panel_in_a_terminal_and_prints_lines_elsewhere(slurm, tmp_path):
    session = f"kiln-progress-{os.getpid()}"
    done = tmp_path / "exit"
    command = (f"cd {shlex.quote(str(REPO))} && {shlex.quote(sys.executable)} -m kiln deploy -i "
               f"{shlex.quote(str(slurm.inventory))}; echo $? > {done}; sleep 30")
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "30", command], check=True,
                   # the pane's own size, as a terminal gives it (pytest-xdist's workers carry COLUMNS=80)
                   env={k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "LINES")})
    frames = []
    try:
        deadline = time.monotonic() + 600
        while not done.exists() and time.monotonic() < deadline:
            frames.append(subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True,
                                         text=True).stdout)
            time.sleep(0.25)
        final = subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)
    assert done.read_text().strip() == "0", final
    panel = re.compile(r"^deploy  \d+/5 done .*\d+ s$", re.M)
    live = [f for f in frames if panel.search(f)]
    assert live, "no frame showed the live panel:\n" + "\n----\n".join(frames[-3:])
    # a frame where hosts were still at work names what they were doing
    busy = [f for f in live if re.search(rf"^  {slurm.name}0\d  \S.*  \d+ s$", f, re.M)]
    assert busy, live[-1]
    assert "summary: " in final and not panel.search(final)   # the panel leaves; the summary stays
    assert re.search(rf"no change +{slurm.name}\[01-05\]", final), final
    recording = ("A frame of `kiln deploy` on a terminal (tmux capture-pane), the 5-node testbed:\n\n"
                 + busy[-1].rstrip() + "\n\nThe end of the same run:\n\n" + final.rstrip() + "\n")
    (tmp_path / "recording.txt").write_text(recording)
    print(recording)  # docs/progress-recording.txt is one such recording

    piped = kiln("deploy", "-i", str(slurm.inventory))
    assert piped.returncode == 0, piped.stdout + piped.stderr
    lines = piped.stdout.splitlines()
    events = [line for line in lines if re.match(rf"^\[\s*\d+\.\ds\] {slurm.name}0\d: no change \(\d/5 done\)$", line)]
    assert len(events) == 5, piped.stdout                    # one line per host, stamped, with the count
    assert "\x1b[" not in piped.stdout                       # no escape codes when not a terminal
    log = Path(re.search(r"^log: (\S+)$", piped.stdout, re.M).group(1))
    text = log.read_text()
    assert log.is_relative_to(slurm.inventory.parent / ".kiln" / "logs")
    # where the time before the operations went: each step stamped, in order
    marks = re.findall(r"^\s+[\d.]+ - (connecting to 5 host\(s\)|connected to 5 of 5 host\(s\)|read each node's OS|"
                       r"prepared each node's operations|read each node's state|running)$", text, re.M)
    assert marks == ["connecting to 5 host(s)", "connected to 5 of 5 host(s)", "read each node's OS",
                     "prepared each node's operations", "read each node's state", "running"], text[:2000]
    for node in [f"{slurm.name}01", f"{slurm.name}05"]:
        assert re.search(rf"^\s+[\d.]+ {node} ok '[^']+' in \d+\.\d\d s$", text, re.M), text[:2000]
        assert re.search(rf"^\s+[\d.]+ {node} no change$", text, re.M)


def test_forks_below_the_host_count_deploys_in_waves_that_converge_the_same(slurm):
    """--forks 2 on 5 nodes: 3 waves of at most 2 connections, every node's OS read before any change,
    compute nodes first and the controller last; the result is the same converged cluster."""
    out = kiln("deploy", "-i", str(slurm.inventory), "--forks", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "5 hosts in 3 waves of at most 2 (--forks)" in out.stdout
    connecting = re.findall(r"connecting to (\d) host\(s\) \((.*?)\)", out.stdout)
    assert [label for _, label in connecting] == [
        "reading the OS, wave 1 of 3", "reading the OS, wave 2 of 3", "reading the OS, wave 3 of 3",
        "wave 1 of 3", "wave 2 of 3", "wave 3 of 3"], out.stdout
    assert all(int(n) <= 2 for n, _ in connecting)
    assert re.search(rf"no change +{slurm.name}\[01-05\]", out.stdout), out.stdout
    # the controller's wave is the last one
    done = [m.group(1) for m in re.finditer(rf"^\[\s*[\d.]+s\] ({slurm.name}0\d): no change", out.stdout, re.M)]
    assert done[-1] == f"{slurm.name}01", done
