"""A node that dies: power loss as a testbed fault, disks kept, and kiln right through it (#21).

On the shared testbed: a compute node loses power (its cgroup frozen and killed: no clean shutdown);
every disk survives, `up` boots only that node, Slurm sees it DOWN and takes it back; a deploy that
loses a node midway names it unreachable with its operation, the others finish, and a re-run
converges it; kiln check reports NODE_UNREACHABLE within a bounded time."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time

from tests.testbed.conftest import NODES
from tests.testbed.slurm_helpers import deploy_json, kiln, ok, on, wait_for


def _state(tb, node: str) -> str:
    return on(tb, tb.controller, f"sinfo -h -n {node} -o %T").stdout.strip()


def _installing(tb, node: str) -> bool:
    """apt or dpkg at work in the node (seen from the host: its processes are in the node's cgroup)."""
    kind = tb.kind()
    for pid in kind.cgroup_pids(next(n for n in tb.recorded_nodes() if n.name == node)):
        try:
            with open(f"/proc/{pid}/comm") as comm:
                if comm.read().strip() in ("apt-get", "dpkg", "apt-mark"):
                    return True
        except OSError:
            continue
    return False


def _back_in_service(tb, node: str) -> None:
    wait_for(lambda: _state(tb, node) in ("idle", "mixed", "allocated"), timeout=180, interval=2,
             what=f"{node} back in service in Slurm")


def test_power_loss_keeps_every_disk_up_boots_only_those_nodes_and_a_persons_drain_stays(slurm):
    """Two compute nodes lose power at once, one of them drained by a person: every disk survives, `up`
    boots only those two, Slurm takes the other back, and the person's drain (and reason) outlives the
    power loss and a health check interval."""
    tb, node, person = slurm, slurm.computes[-1], slurm.computes[-2]
    for n in [tb.controller, *tb.computes]:
        ok(tb, n, f"echo {n} > /var/tmp/kiln-power-marker")
    ok(tb, tb.controller, f"scontrol update nodename={person} state=drain reason='disk swap by alice'")
    kind = tb.kind()
    others = {n.name: kind.init_pid(n) for n in tb.recorded_nodes() if n.name not in (node, person)}
    try:
        tb.power_loss(node)
        tb.power_loss(person)
        states = {n["name"]: n["state"] for n in tb.status()["nodes"]}
        assert states[node] == states[person] == "stopped", states
        assert all(states[n] in ("running", "degraded") for n in others), states
        wait_for(lambda: "down" in _state(tb, node), timeout=120, interval=2, what=f"Slurm to set {node} DOWN")
        started = time.monotonic()
        status = tb.up(NODES, inventory_dir=tb.inventory)
        print(f"up after a power loss of two nodes: {time.monotonic() - started:.1f} s")
        assert {n.name: kind.init_pid(n) for n in tb.recorded_nodes() if n.name in others} == others  # not rebooted
        assert all(n["state"] in ("running", "degraded") for n in status["nodes"])
        for n in [tb.controller, *tb.computes]:
            assert ok(tb, n, "cat /var/tmp/kiln-power-marker").strip() == n     # its own disk, every node
        assert ok(tb, node, "systemctl is-active slurmd munge").split() == ["active", "active"]
        _back_in_service(tb, node)
        wait_for(lambda: on(tb, tb.controller, f"scontrol show node {person}").stdout.count("Reason=disk swap by alice")
                 == 1 and "NOT_RESPONDING" not in on(tb, tb.controller, f"scontrol show node {person}").stdout,
                 timeout=180, interval=2, what=f"{person} registered again")
        time.sleep(12)  # one more node-local health check interval: it must not resume a person's drain
        assert "drain" in _state(tb, person)
    finally:
        ok(tb, tb.controller, f"scontrol update nodename={person} state=resume")
    _back_in_service(tb, person)
    hosts = ok(tb, tb.controller, f"srun -N{len(tb.computes)} hostname", timeout=120).split()
    assert sorted(hosts) == sorted(tb.computes)


def test_a_node_lost_during_a_deploy_is_named_unreachable_and_a_rerun_converges_it(slurm):
    tb, node = slurm, slurm.computes[0]
    # real work on that node: packages removed, so the deploy installs them again (not
    # libpam-slurm-adopt: sshd's PAM stack names it, and without it nobody, root included, logs in)
    ok(tb, node, "apt-mark unhold slurmd nvidia-smi >/dev/null; DEBIAN_FRONTEND=noninteractive "
                 "apt-get remove -y -q slurmd nvidia-smi chrony >/dev/null", timeout=300)
    deploy = subprocess.Popen([sys.executable, "-m", "kiln", "deploy", "-i", str(tb.inventory), "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # once the deploy is at work on the node (its package installs running), at a random moment
    wait_for(lambda: _installing(tb, node) or deploy.poll() is not None, timeout=180, interval=0.05,
             what=f"the deploy's package work on {node}")
    assert deploy.poll() is None, "the deploy ended before the node could be lost"
    time.sleep(random.uniform(0, 1.5))
    lost_at = time.monotonic()
    tb.power_loss(node)
    out, err = deploy.communicate(timeout=300)
    waited = time.monotonic() - lost_at
    print(f"power lost during the deploy's package work; the deploy ended {waited:.1f} s later")
    assert deploy.returncode == 1, out + err
    hosts = {h["host"]: h for h in json.loads(out)["hosts"]}
    assert hosts[node]["status"] == "unreachable" and hosts[node]["failed_operation"], hosts[node]
    assert "lost during" in hosts[node]["error"]
    assert all(h["status"] in ("changed", "no change") for n, h in hosts.items() if n != node), hosts
    assert waited < 90
    tb.up(NODES, inventory_dir=tb.inventory)
    rc, data, text = deploy_json(tb.inventory)
    assert rc == 0, text
    assert {h["host"]: h["status"] for h in data["hosts"]}[node] == "changed"
    rc, data, text = deploy_json(tb.inventory)
    assert rc == 0 and {h["status"] for h in data["hosts"]} == {"no change"}, text
    _back_in_service(tb, node)


def test_a_package_a_power_cut_left_half_unpacked_is_reinstalled_by_the_next_deploy(slurm):
    """What a power cut while dpkg unpacks a package leaves (CI's random moment hit it: chrony ``iUR``,
    reinstall required): ``dpkg --configure -a`` refuses it, so a deploy that only configured failed on
    that node. The next deploy reinstalls it and converges the node."""
    tb, node = slurm, slurm.computes[1]
    abbrev = "dpkg-query -W -f='${db:Status-Abbrev}' chrony"
    ok(tb, node, "sed -i '/^Package: chrony$/,/^$/s/^Status: install ok installed$/Status: install reinstreq unpacked/' "
                 "/var/lib/dpkg/status")
    assert ok(tb, node, abbrev).strip() == "iUR"
    refused = on(tb, node, "dpkg --configure -a")
    assert refused.returncode != 0 and "reinstall it" in refused.stdout + refused.stderr, refused
    rc, data, text = deploy_json(tb.inventory, "--limit", node)
    assert rc == 0, text
    assert {h["host"]: h["status"] for h in data["hosts"]}[node] == "changed", text
    assert ok(tb, node, abbrev).strip() == "ii" and not ok(tb, node, "dpkg --audit").strip()
    print(f"chrony left 'reinstall required' on {node}: the next deploy reinstalled it and converged the node")


def test_check_reports_a_dead_node_unreachable_within_bounds(slurm, tmp_path):
    tb, node = slurm, slurm.computes[1]
    tb.power_loss(node)
    try:
        started = time.monotonic()
        out = kiln("check", "-i", str(tb.inventory), "--suite", "system", "--json", str(tmp_path / "check.json"))
        seconds = time.monotonic() - started
        data = json.loads((tmp_path / "check.json").read_text())
        assert out.returncode == 1
        assert [c["id"] for c in data["nodes"][node]["checks"]] == ["NODE_UNREACHABLE"]
        assert all(v["verdict"] != "fail" for n, v in data["nodes"].items() if n != node)
        print(f"kiln check with one node dead: {seconds:.1f} s")
        assert seconds < 60
    finally:
        tb.up(NODES, inventory_dir=tb.inventory)
    _back_in_service(tb, node)
