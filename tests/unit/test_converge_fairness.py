"""benchmarks/converge.py compares equal work: on a controller and a compute node of its inventory,
kiln (limited to the benchmark's ROLES), the bare-pyinfra deploy and the Ansible playbook manage the
same files, install the same packages and run the same services. No node is needed: kiln's side is
its plan (kiln.deploy.plan), pyinfra's deploy file runs against recording stand-ins of pyinfra's
operations, and the playbook's tasks are read with their conditions."""

from __future__ import annotations

import importlib.util
import re
import sys
import types

import jinja2
import pytest
import yaml

from kiln.deploy import plan
from kiln.inventory import load_cluster
from kiln.testbed.inventory import write_inventory
from kiln.testbed.testbed import Testbed
from roles.operations import DPKG_REPAIR
from roles.platform import PLATFORMS
from roles.snapshot import NodeSnapshot
from tests.conftest import REPO
from tests.plan.harness import SECRETS

BENCH = REPO / "benchmarks"


def _converge():
    spec = importlib.util.spec_from_file_location("converge_bench", BENCH / "converge.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    converge = _converge()
    tb = Testbed(converge.NAME)
    inventory = tmp_path_factory.mktemp("converge") / "inventory"
    write_inventory(inventory, tb, tb.node_list(4))  # the inventory the benchmark's testbed has
    return converge, load_cluster(inventory)


def kiln_work(cluster, name: str, roles: tuple[str, ...], container: bool) -> dict[str, set[str]]:
    result, ctx = plan.plan_host(cluster, name, PLATFORMS["debian12"], NodeSnapshot(), SECRETS, role_names=list(roles),
                                 in_container=container)
    commands = [c for _, cmds in result for c in cmds if c != DPKG_REPAIR]  # a repair that runs only after a power cut
    packages = {w.partition("=")[0] for c in commands if "apt-get install -y" in c
                for w in c.split("apt-get install -y", 1)[1].split() if re.fullmatch(r"[a-z0-9][a-z0-9.+-]+(=\S+)?", w)}
    services = {name + (unit if unit == ".timer" else "") for c in commands
                for name, unit in re.findall(r"systemctl start (\S+?)(\.service|\.timer)\b", c)}
    return {"files": {f.path for f in ctx.files}, "packages": packages, "services": services}


class _Op:
    def did_change(self) -> bool:
        return False


def pyinfra_work(groups: set[str], versions: dict, container: bool) -> dict[str, set[str]]:
    """Run benchmarks/converge/pyinfra_deploy.py with pyinfra's operations replaced by recorders."""
    work = {"files": set(), "packages": set(), "services": set()}

    def record(kind):
        def op(**kw):
            if kind == "put":
                work["files"].add(kw["dest"])
            elif kind == "packages":
                work["packages"] |= {p.partition("=")[0] for p in kw["packages"]}
            elif kind == "service" and kw.get("running"):
                work["services"].add(kw["service"])
            return _Op()
        return op

    ops = types.ModuleType("pyinfra.operations")
    ops.files = types.SimpleNamespace(put=record("put"), directory=record("-"), line=record("-"))
    ops.apt = types.SimpleNamespace(packages=record("packages"))
    ops.server = types.SimpleNamespace(group=record("-"), user=record("-"), shell=record("-"))
    ops.systemd = types.SimpleNamespace(service=record("service"), daemon_reload=record("-"))
    fake = types.ModuleType("pyinfra")
    virt = "systemd-nspawn" if container else "none"  # what systemd-detect-virt --container answers
    fake.host = types.SimpleNamespace(name="node", groups=groups, data=types.SimpleNamespace(kiln_versions=versions),
                                      get_fact=lambda fact, command: virt)
    fake.operations = ops
    facts = types.ModuleType("pyinfra.facts")
    facts_server = types.ModuleType("pyinfra.facts.server")
    facts_server.Command = object
    rendered = BENCH / "converge"  # the deploy reads groups.json/users.json/accounts.sh from RENDERED
    modules = {"pyinfra": fake, "pyinfra.operations": ops, "pyinfra.facts": facts, "pyinfra.facts.server": facts_server}
    saved = {k: sys.modules.get(k) for k in modules}
    sys.modules.update(modules)
    try:
        source = (BENCH / "converge" / "pyinfra_deploy.py").read_text()
        source = source.replace('json.load(open(f"{R}/groups.json"))', "[]").replace(
            'json.load(open(f"{R}/users.json"))', "[]").replace('open(f"{R}/accounts.sh").read()', '""').replace(
            'json.load(open(f"{R}/login-hosts.json"))', '["node"]' if "login" in groups else "[]")
        import os
        os.environ.setdefault("RENDERED", str(rendered))
        source = source.replace('os.path.exists(f"{R}/sudoers")', "True")  # the testbed has kiln_operators
        exec(compile(source, "pyinfra_deploy.py", "exec"), {"__name__": "deploy"})
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return work


def ansible_work(groups: set[str], versions: dict, container: bool) -> dict[str, set[str]]:
    """The playbook's copy destinations, apt packages and started services, for a host in ``groups``."""
    play = yaml.safe_load((BENCH / "converge" / "playbook.yml").read_text())[0]
    env = jinja2.Environment()
    facts = {"is_controller": "slurm_controller" in groups, "is_dbd": "slurm_dbd" in groups,
             "is_compute": "compute" in groups, "is_login": "login" in groups, "has_sudoers": True, "slurm_version": versions["slurm"], "rendered": "R",
             "container": {"rc": 0 if container else 1}}  # systemd-detect-virt --container's exit
    work = {"files": set(), "packages": set(), "services": set()}
    for task in play["tasks"]:
        when = str(task.get("when", "true")).replace(" and dbd_conf is changed", "").replace(
            " and ctld_unit is changed", "").replace("munge_unit is changed", "true").replace("sshd_conf is changed", "true").replace(
            " and (user_slice is changed or root_slice is changed)", "").replace(" and db_conf is changed", "")
        if not env.compile_expression(when)(**facts):
            continue
        items = task.get("loop", [None])
        if isinstance(items, str):
            items = env.compile_expression(items.strip("{} "))(**facts)
        for item in items if isinstance(items, list) else [None]:
            values = dict(facts, item=item)
            if "copy" in task:
                work["files"].add(env.from_string(task["copy"]["dest"]).render(**values))
            if "apt" in task:
                name = task["apt"]["name"]
                names = env.compile_expression(name.strip("{} "))(**values) if "{{" in name else [name]
                work["packages"] |= {n.partition("=")[0] for n in names}
            if "systemd" in task and task["systemd"].get("state") == "started":
                work["services"].add(task["systemd"]["name"])
    return work


@pytest.mark.parametrize("container", [True, False], ids=["container", "machine"])
@pytest.mark.parametrize("node", ["controller", "compute"])
def test_the_three_tools_of_the_converge_benchmark_do_the_same_work(bench, node, container):
    """On the benchmark's testbed nodes (containers: kiln leaves the clock to the host, no chrony started) and on
    machines alike."""
    converge, cluster = bench
    name = (cluster.controllers[0] if node == "controller" else cluster.compute[0]).name
    groups = set(cluster.hosts[name].groups)
    kiln = kiln_work(cluster, name, converge.ROLES, container)
    assert kiln["files"] and kiln["packages"] and kiln["services"]
    assert ("chrony.service" in kiln["services"] or "chrony" in kiln["services"]) != container, kiln["services"]
    assert pyinfra_work(groups, cluster.versions, container) == kiln
    assert ansible_work(groups, cluster.versions, container) == kiln


def test_the_benchmarks_kiln_run_is_limited_to_its_roles(bench, tmp_path):
    converge, _ = bench
    argv, _ = converge.command("kiln", tmp_path, tmp_path, None, 4)
    assert argv[argv.index("--roles") + 1] == ",".join(converge.ROLES) == "base,slurm"
