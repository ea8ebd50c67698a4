"""Converge benchmark: base + slurm on N testbed nodes with kiln, bare pyinfra and Ansible, side by side.

The same work three ways, writing the same bytes (the files kiln renders):
- kiln: ``kiln deploy --roles base,slurm`` (``ROLES``: roles/base.py, roles/slurm.py; the testbed
  inventory has more roles, which the other two do not do);
- bare pyinfra: pyinfra's stock operations (benchmarks/converge/pyinfra_deploy.py) with a plain
  pyinfra inventory file, no kiln code at all;
- Ansible: benchmarks/converge/playbook.yml at its best settings: pipelining, forks = hosts, no fact
  gathering, SSH ControlMaster through the testbed's ssh_config (strict host keys).
For each size (1 controller + N-1 compute) and tool: a fresh testbed, the fresh converge, then the
no-op converge (median of --runs). Targets (issue #4): no-op at 32 nodes at least 15x faster than
Ansible; kiln's overhead over bare pyinfra at most 30 %. The work is kept equal by
tests/unit/test_converge_fairness.py: every file, package and service kiln's ``ROLES`` manage on a
controller and a compute node of this benchmark's inventory is managed by the other two, and no more.

Needs root and the testbed's host tools; takes a while (every tool gets fresh nodes at every size).

    python benchmarks/converge.py [--sizes 4,16,32] [--runs 3] [--tools kiln,pyinfra,ansible]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from kiln.inventory import load_cluster
from kiln.secrets import load_or_create
from kiln.testbed.host import TestbedError
from kiln.testbed.testbed import Testbed
from roles import slurm as slurm_role
from roles import slurm_config
from roles import login_access
from roles.base import account_specs, login_slice_files
from roles.context import render
from roles.slurm_accounting import accounts_script
from roles.platform import PLATFORMS

HERE = Path(__file__).resolve().parent / "converge"
WORK = Path("/var/lib/kiln/bench-converge")
BIN = Path(sys.executable).parent
NAME = "kbench"
ROLES = ("base", "slurm")  # what all three tools do: kiln is limited to these, the others do them by hand


def write(path: Path, data: str | bytes, mode: int = 0o644) -> None:
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    path.chmod(mode)


def render_files(inventory: Path, dest: Path) -> None:
    """Everything the pyinfra and Ansible runs copy, rendered by kiln's own code from the inventory."""
    cluster = load_cluster(inventory)
    secrets = load_or_create(cluster)
    platform = PLATFORMS["debian12"]
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True, mode=0o700)
    write(dest / "apt.conf", render("base/apt.conf.j2", proxy=cluster.setting("package_proxy")))
    write(dest / "hosts", render("base/hosts.j2", cluster_name=cluster.name,
                                 hosts=[(h.address, h.name) for h in cluster.hosts.values()]))
    write(dest / "limits.conf", render("base/limits.conf.j2"))
    write(dest / "sshd.conf", render("base/sshd.conf.j2", password=cluster.setting("ssh_password_login")))
    operators = cluster.setting("operators")
    if operators:
        write(dest / "sudoers", operators.sudoers(), 0o440)
    limits = cluster.setting("login_user_limits")
    for (_, content), name in zip(login_slice_files(limits) if limits else [], ("user-slice.conf", "root-slice.conf")):
        write(dest / name, content)
    write(dest / "login-hosts.json", json.dumps([h.name for h in cluster.user_logins] if limits else []))
    for host in cluster.hosts.values():  # who may log in over SSH, each host's own rules (pam_access)
        write(dest / f"access-{host.name}.conf", login_access.access_file(cluster, host))
    write(dest / "munge.key", secrets.munge_key, 0o600)
    write(dest / "slurm.conf", slurm_config.slurm_conf(cluster))
    write(dest / "gres.conf", slurm_config.gres_conf(cluster))
    write(dest / "cgroup.conf", slurm_config.cgroup_conf(cluster))
    write(dest / "slurmdbd.conf", slurm_config.slurmdbd_conf(cluster, secrets.dbd_password), 0o600)
    orphans_service, orphans_timer = slurm_config.orphans_units(cluster)
    write(dest / "orphans.service", orphans_service)
    write(dest / "orphans.timer", orphans_timer)
    write(dest / "slurmd-kiln.conf", render("slurm/slurmd-kiln.conf.j2"))
    write(dest / "slurmd-conf-wait.conf", slurm_role.CONF_WAIT_DROPIN)
    write(dest / "munge-kiln.conf", slurm_role.MUNGE_DROPIN)
    write(dest / "slurmctld-kiln.conf", slurm_role.SLURMCTLD_DROPIN)
    write(dest / "mariadb-kiln.cnf", slurm_role.MARIADB_CONF)
    groups, users = account_specs(cluster, platform, next(iter(cluster.hosts.values())))
    write(dest / "groups.json", json.dumps([{"name": n, "gid": g, "system": s} for n, g, s in groups]))
    write(dest / "users.json", json.dumps(users))
    write(dest / "accounts.sh", " && ".join(accounts_script(cluster.name, list(cluster.teams))))
    inventory_lines = [f"# pyinfra inventory for the bare-pyinfra run; written by {Path(__file__).name}"]
    for group, members in cluster.groups.items():
        if members and group not in ("all", "ungrouped"):
            hosts = [(n, dict(cluster.hosts[n].connection, kiln_versions=cluster.versions)) for n in members]
            inventory_lines.append(f"{group} = {hosts!r}")
    write(dest / "inventory.py", "\n".join(inventory_lines) + "\n")


def command(tool: str, inventory: Path, rendered: Path, tb: Testbed, size: int) -> tuple[list[str], dict]:
    env = dict(os.environ, RENDERED=str(rendered))
    if tool == "kiln":
        return [str(BIN / "kiln"), "deploy", "-i", str(inventory), "--roles", ",".join(ROLES), "--json"], env
    if tool == "pyinfra":
        return [str(BIN / "pyinfra"), str(rendered / "inventory.py"), str(HERE / "pyinfra_deploy.py"), "-y",
                "--parallel", str(size)], env
    env.update(ANSIBLE_CONFIG=str(HERE / "ansible.cfg"), ANSIBLE_SSH_ARGS=f"-F {tb.ssh_config}")
    return [str(BIN / "ansible-playbook"), "-i", str(inventory), str(HERE / "playbook.yml"), "-f", str(size)], env


def timed(argv: list[str], env: dict, log: Path) -> float:
    start = time.perf_counter()
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=3600)
    seconds = time.perf_counter() - start
    with log.open("a") as f:
        # a failed run is kept whole (the failing task is anywhere in it), a passing one by its end
        keep = None if out.returncode != 0 else -4000
        f.write(f"$ {' '.join(argv)}\n(exit {out.returncode}, {seconds:.1f} s)\n"
                f"{out.stdout[keep:] if keep else out.stdout}\n{out.stderr[keep:] if keep else out.stderr}\n")
    if out.returncode != 0:
        raise SystemExit(f"{argv[0]} failed (exit {out.returncode}); see {log}")
    return seconds


def no_change(tool: str, argv: list[str], env: dict) -> bool:
    """A no-op run must really be one: nothing changed on any host."""
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=3600)
    if tool == "kiln":
        return {h["status"] for h in json.loads(out.stdout)["hosts"]} == {"no change"}
    if tool == "ansible":
        return all("changed=0" in line for line in out.stdout.splitlines() if " : ok=" in line)
    return out.returncode == 0


def run_one(tool: str, size: int, runs: int, log: Path) -> tuple[float, float]:
    tb = Testbed(NAME, progress=lambda m: None)
    inventory = WORK / "inventory"
    tb.teardown()
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    try:
        tb.up(size, inventory_dir=inventory)
    except TestbedError as e:  # seen once in many runs: retry on a clean slate, and say so
        print(f"  testbed up failed, retrying once: {str(e).splitlines()[0]}", flush=True)
        with log.open("a") as f:
            f.write(f"testbed up failed:\n{e}\n")
        tb.teardown()
        tb.up(size, inventory_dir=inventory)
    try:
        rendered = WORK / "rendered"
        render_files(inventory, rendered)
        argv, env = command(tool, inventory, rendered, tb, size)
        fresh = timed(argv, env, log)
        noops = [timed(argv, env, log) for _ in range(runs)]
        if not no_change(tool, argv, env):
            raise SystemExit(f"{tool}: the second run was not a no-op; see {log}")
        return fresh, statistics.median(noops)
    finally:
        tb.down()
        shutil.rmtree(WORK, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4,16,32")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tools", default="kiln,pyinfra,ansible")
    args = ap.parse_args()
    tools = args.tools.split(",")
    log = Path("/tmp/kiln-converge-bench.log")
    log.write_text("")
    print("warming the apt proxy (not timed) ...", flush=True)
    run_one("kiln", 2, 1, log)
    results: dict[tuple[int, str], tuple[float, float]] = {}
    for size in (int(s) for s in args.sizes.split(",")):
        for tool in tools:
            results[size, tool] = run_one(tool, size, args.runs, log)
            fresh, noop = results[size, tool]
            print(f"  {size:>2} nodes  {tool:<8} fresh {fresh:7.1f} s   no-op {noop:6.2f} s", flush=True)
    print(f"\nbase + slurm roles, 1 controller + N-1 compute testbed nodes, no-op = median of {args.runs}")
    # comparison columns: title, the two tools, how to show kiln's figure beside the other's
    comparisons = [(title, a, b, show) for title, a, b, show in (
        ("ansible/kiln", "kiln", "ansible", lambda k, o: f"{o / k:.1f}x"),
        ("kiln vs pyinfra", "kiln", "pyinfra", lambda k, o: f"{(k / o - 1) * 100:+.0f}%"))
        if {a, b} <= set(tools)]
    print(f"{'nodes':>5} {'run':<6} " + " ".join(f"{t:>9}" for t in tools)
          + "".join(f" {title:>16}" for title, *_ in comparisons))
    for size in (int(s) for s in args.sizes.split(",")):
        for i, mode in enumerate(("fresh", "no-op")):
            print(f"{size:>5} {mode:<6} " + " ".join(f"{results[size, t][i]:8.2f}s" for t in tools)
                  + "".join(f" {show(results[size, a][i], results[size, b][i]):>16}" for _, a, b, show in comparisons))
    print(f"\nlog of every run: {log}")


if __name__ == "__main__":
    main()
