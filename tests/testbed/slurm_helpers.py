"""Helpers for the Slurm end-to-end tests: run kiln, run commands on nodes, wait for Slurm states."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml


def kiln(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """Run the kiln command as an operator would (a separate process)."""
    return subprocess.run([sys.executable, "-m", "kiln", *args], capture_output=True, text=True, timeout=timeout)


def deploy_json(inventory: Path, *args: str) -> tuple[int, dict, str]:
    out = kiln("deploy", "-i", str(inventory), "--json", *args)
    try:
        data = json.loads(out.stdout)
    except ValueError:
        raise AssertionError(f"kiln deploy printed no JSON (exit {out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out.returncode, data, out.stdout + out.stderr


def suite_verdicts(inventory: Path, suite: str, node: str) -> dict[str, tuple[str, str]]:
    """``kiln check --suite SUITE --limit NODE``'s verdicts on ``node``: check id -> (severity, message)."""
    out = kiln("check", "-i", str(inventory), "--suite", suite, "--json", "-", "--limit", node, timeout=300)
    try:
        data = json.loads(out.stdout)
    except ValueError:
        raise AssertionError(f"kiln check printed no JSON (exit {out.returncode}):\n{out.stdout}\n{out.stderr}")
    return {c["id"]: (c["severity"], c["message"]) for c in data["nodes"][node]["checks"]}


def on(tb, node: str, command: str, timeout: float = 120, user: str | None = None) -> subprocess.CompletedProcess:
    """``command`` on ``node`` over SSH, as root or as ``user``: a user's is a login of its own each time (never
    a master connection an earlier one left open, which would skip sshd's PAM stack: pam_access,
    pam_slurm_adopt)."""
    cmd = tb.ssh_command(node, [command])
    if user:
        cmd[1:1] = ["-l", user, "-o", "ControlMaster=no", "-o", "ControlPath=none"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def tcp_opens(tb, node: str, address: str, port: int) -> bool:
    """Whether ``node`` can open a TCP connection to ``address``:``port`` (a dropped SYN times out in 3 s)."""
    out = on(tb, node, f"timeout 3 bash -c '</dev/tcp/{address}/{port}' 2>/dev/null && echo open || echo shut")
    return out.stdout.strip() == "open"


def ok(tb, node: str, command: str, timeout: float = 120) -> str:
    out = on(tb, node, command, timeout)
    assert out.returncode == 0, f"{command!r} on {node} exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def wait_for(check, timeout: float = 60, interval: float = 1.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def job_state(tb, controller: str, job: str) -> str:
    out = on(tb, controller, f"squeue -h -j {job} -o %T 2>/dev/null || true").stdout.strip()
    if out:
        return out
    return on(tb, controller, f"sacct -n -X -P -j {job} -o State").stdout.strip().split("\n")[0]


def submit(tb, controller: str, args: str, user: str | None = None) -> str:
    command = f"sbatch --parsable {args}"
    if user:
        command = f"su - {user} -c {shlex.quote(command)}"
    return ok(tb, controller, command).strip().split(";")[0]


def copy_inventory(src: Path, dest: Path, changes: dict | None = None, host_changes: dict | None = None) -> Path:
    """A copy of the testbed inventory that keeps the same secrets, with variables changed."""
    shutil.copytree(src, dest)
    path = dest / "group_vars" / "all" / "testbed.yml"
    data = yaml.safe_load(path.read_text())
    data["kiln_secrets_dir"] = str((src.parent / "secrets").resolve())
    data.update(changes or {})
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    for host, values in (host_changes or {}).items():
        (dest / "host_vars").mkdir(exist_ok=True)
        (dest / "host_vars" / f"{host}.yml").write_text(yaml.safe_dump(values))
    return dest


def alerts_firing(tb) -> set[tuple[str, str]]:
    """(alert name, node) of every alert active in the testbed's Alertmanager (kiln's monitoring role)."""
    from kiln.inventory import load_cluster
    from kiln.monitoring.alerts import firing
    from kiln.secrets import monitoring_password
    cluster = load_cluster(tb.inventory)
    return {(a["labels"]["alertname"], a["labels"].get("node", "")) for a in firing(cluster, monitoring_password(cluster))}
