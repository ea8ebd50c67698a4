"""Op lists of the base and slurm roles for every supported OS, from recorded facts (no connection).

The expected lists live in tests/plan/expected/<os>.json; a deliberate change to a role is reviewed
by regenerating them (KILN_UPDATE_PLANS=1 pytest tests/plan) and reading the diff.
"""

from __future__ import annotations

import json
import os as os_module
from dataclasses import replace

import pytest

from kiln.inventory import load_cluster
from roles.operations import DPKG_REPAIR
from roles.platform import PLATFORMS
from tests.conftest import INVENTORIES, REPO
from tests.plan.facts import fresh
from tests.plan.harness import SECRETS, plan_host

EXPECTED = REPO / "tests" / "plan" / "expected"
# The Slurm each OS carries (Debian/Ubuntu archives, OpenHPC 3 for Rocky 9).
SLURM = {"debian12": "22.05.8-4+deb12u3", "debian13": "24.11.5-4+deb13u1", "ubuntu2204": "21.08.5-2ubuntu1", "ubuntu2404": "23.11.4-1.2ubuntu5",
         "rocky9": "23.11.10-320.ohpc.3.2"}


# The same NVIDIA driver as each OS's package source spells it (NVIDIA's CUDA repository; Debian 13,
# which that repository does not serve: Debian's non-free archive, with its CUDA toolkit and without
# NCCL, DCGM or fabric manager, as validation requires there).
DEBIAN13_NVIDIA = {"nvidia_source": "debian"}
DEBIAN13_PINS = {"cuda": "12.4.131~12.4.1-2", "nccl": "", "dcgm": "", "dcgm_exporter": "", "fabricmanager": ""}
DRIVER = {"debian12": "550.163.01-1", "debian13": "550.163.01-2", "ubuntu2204": "550.163.01-0ubuntu1", "ubuntu2404": "550.163.01-0ubuntu1",
          "rocky9": "550.163.01-1.el9"}


# Prometheus, Alertmanager and node_exporter from each OS's own archive (example pins of each release's
# series); Rocky 9's repositories carry none, so its cluster is planned without the monitoring group
# (validation refuses one there: kiln/inventory/monitoring_checks.py).
MONITORING = {"debian12": ("2.42.0+ds-5+deb12u1", "0.25.0-1+b4", "1.5.0-1+b6"),
              "debian13": ("2.53.3+ds1-2", "0.28.1+ds-1", "1.9.0-1+b4"),
              "ubuntu2204": ("2.31.2+ds1-1ubuntu1.22.04.3", "0.23.0-4ubuntu0.2", "1.3.1-1ubuntu0.22.04.3"),
              "ubuntu2404": ("2.45.3+ds-2ubuntu0.3", "0.26.0+ds-1ubuntu0.3", "1.7.0-1ubuntu0.3")}


def cluster_for(os: str, slurm: str | None = None, driver: str | None = None, **settings):
    cluster = load_cluster(INVENTORIES / "plan")
    driver = driver or DRIVER[os]
    monitoring = dict(zip(("prometheus", "alertmanager", "node_exporter"), MONITORING.get(os, ("", "", ""))))
    if os not in MONITORING:
        cluster = replace(cluster, hosts={n: replace(h, monitored=False) for n, h in cluster.hosts.items()},
                          groups={g: m for g, m in cluster.groups.items() if g != "monitoring"})
    extra_pins = DEBIAN13_PINS if os == "debian13" else {}
    if os == "debian13":
        settings = {**DEBIAN13_NVIDIA, **settings}
    versions = dict(cluster.versions, slurm=slurm or SLURM[os], nvidia_driver=driver, fabricmanager=driver,
                    **monitoring)
    return replace(cluster, versions={**versions, **extra_pins},
                   settings=dict(cluster.settings, **{"kiln_" + k: v for k, v in settings.items()}))


def full_plan(os: str, monkeypatch) -> dict:
    cluster = cluster_for(os)
    return {name: [[op, cmds] for op, cmds in plan_host(cluster, name, os, fresh(os), monkeypatch)]
            for name in ("ctl1", "login1", "gpu01")}


@pytest.mark.parametrize("os", sorted(PLATFORMS))
@pytest.mark.proves("slurm accounting", "gpu gres", tier="plan", plan="{os}.json")
def test_op_list_matches_the_reviewed_one(os, monkeypatch):
    actual = full_plan(os, monkeypatch)
    path = EXPECTED / f"{os}.json"
    if os_module.environ.get("KILN_UPDATE_PLANS"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(actual, indent=1) + "\n")
    assert actual == json.loads(path.read_text())


def commands(plan: list) -> str:
    return "\n".join(c for _, cmds in plan for c in cmds)


@pytest.mark.parametrize("os", ["debian12", "ubuntu2204", "ubuntu2404"])
def test_apt_systems_install_exact_pins_and_hold_them(os, monkeypatch):
    plan = plan_host(cluster_for(os), "gpu01", os, fresh(os), monkeypatch)
    text = commands(plan)
    pin = SLURM[os]
    assert f"slurmd={pin}" in text and f"libpam-slurm-adopt={pin}" in text and f"slurm-client={pin}" in text
    assert "apt-mark hold libpam-slurm-adopt slurm-client slurmd" in text
    assert "--no-install-recommends" in text
    assert "slurmctld" not in text and "mariadb" not in text  # compute nodes run no controller or database
    assert "echo 'account    required     pam_slurm_adopt.so' >> /etc/pam.d/sshd" in text
    assert "systemctl start slurmd.service" in text
    assert "useradd -r -u 980 -g slurm -s /usr/sbin/nologin -d /var/lib/slurm -M slurm" in text
    assert "useradd -u 3101 -g alice -G vision -s /bin/bash -d /home/alice -m -K HOME_MODE=0700 alice" in text


def test_rocky_release_packages_are_installed_once(monkeypatch):
    installed = fresh("rocky9")
    installed.packages.update({"epel-release": "9-8.el9", "ohpc-release": "3-1.el9"})
    plan = dict(plan_host(cluster_for("rocky9"), "ctl1", "rocky9", installed, monkeypatch))
    assert plan["slurm: EPEL and OpenHPC repositories"] == []


def test_rocky_uses_openhpc_epel_and_versionlock(monkeypatch):
    plan = plan_host(cluster_for("rocky9"), "ctl1", "rocky9", fresh("rocky9"), monkeypatch)
    text = commands(plan)
    pin = SLURM["rocky9"]
    assert "dnf install -y -q epel-release " \
           "http://repos.openhpc.community/OpenHPC/3/EL_9/x86_64/ohpc-release-3-1.el9.x86_64.rpm" in text
    assert "dnf install -y -q python3-dnf-plugin-versionlock munge slurm-ohpc-" in text
    assert f"slurm-slurmctld-ohpc-{pin}" in text and f"slurm-slurmdbd-ohpc-{pin}" in text
    assert f"dnf -q versionlock add slurm-ohpc-{pin} slurm-slurmctld-ohpc-{pin} slurm-slurmdbd-ohpc-{pin}" in text
    assert "systemctl start chronyd.service" in text and "upload /etc/chrony.conf" in text
    assert "upload /etc/dnf/dnf.conf" in text and "apt" not in text
    assert "useradd -r -u 980 -g slurm -s /sbin/nologin" in text


def test_controller_gets_database_daemons_and_accounts(monkeypatch):
    plan = dict(plan_host(cluster_for("debian12"), "ctl1", "debian12", fresh("debian12"), monkeypatch))
    # secrets: created empty at 0600 root, filled, given their owner and mode, renamed into place
    assert plan["slurm: slurmdbd.conf"] == [
        "umask 077 && rm -f /etc/slurm/slurmdbd.conf.kiln-new && : > /etc/slurm/slurmdbd.conf.kiln-new",
        "upload /etc/slurm/slurmdbd.conf.kiln-new",
        "chown slurm:slurm /etc/slurm/slurmdbd.conf.kiln-new && chmod 600 /etc/slurm/slurmdbd.conf.kiln-new && "
        "mv -f /etc/slurm/slurmdbd.conf.kiln-new /etc/slurm/slurmdbd.conf"]
    assert plan["slurm: munge key"][-1].endswith("chmod 400 /etc/munge/munge.key.kiln-new && "
                                                 "mv -f /etc/munge/munge.key.kiln-new /etc/munge/munge.key")
    waited, grant = plan["slurm: accounting database and its user (if slurmdbd.conf changed)"]
    assert "mariadb-admin ping" in waited and "MariaDB did not answer within 600 s" in waited
    assert SECRETS.dbd_password not in grant and "StoragePass" in grant  # read on the node, never sent
    accounts = "\n".join(plan["slurm: QoS, and the teams' accounts, shares, GPU limits, QoS and users"])
    assert "sacctmgr -i add account vision Cluster=plan Fairshare=60 GrpTRES=gres/gpu=8" in accounts
    assert "sacctmgr -i add user alice Account=vision Cluster=plan" in accounts
    assert plan["slurm: slurmctld stays active after its start"]  # checked after its first start


def test_no_secret_in_any_command(monkeypatch):
    for os in PLATFORMS:
        text = json.dumps(full_plan(os, monkeypatch))
        assert SECRETS.dbd_password not in text and "kkkkkkkk" not in text


def test_a_new_slurm_pin_changes_only_the_package_operation(monkeypatch):
    os = "debian12"
    old, new = "22.05.8-4+deb12u2", "22.05.8-4+deb12u3"
    installed = fresh(os)
    installed.packages["munge"] = "0.5.15-2+deb12u1"
    for p in ("slurmd", "slurm-client", "libpam-slurm-adopt"):
        installed.packages[p] = old
        installed.held.add(p)
    before = plan_host(cluster_for(os, old), "gpu01", os, installed, monkeypatch)
    after = plan_host(cluster_for(os, new), "gpu01", os, installed, monkeypatch)
    differing = [(a[0], b[0]) for a, b in zip(before, after) if a != b]
    # the Slurm packages, and the Slurm headers pyxis builds against
    assert differing == [(f"slurm: packages at {old}, held", f"slurm: packages at {new}, held"),
                         ("containers: Slurm headers for pyxis", "containers: Slurm headers for pyxis")]
    package_op = dict(after)[differing[0][1]]
    assert package_op[:3] == [DPKG_REPAIR, "apt-get update -q", "apt-mark unhold libpam-slurm-adopt slurm-client slurmd"]
    assert package_op[-1] == "apt-mark hold libpam-slurm-adopt slurm-client slurmd"
    assert dict(before)[f"slurm: packages at {old}, held"] == []


def test_containers_leave_the_clock_to_the_host(monkeypatch):
    cluster = cluster_for("debian12")
    inside = dict(plan_host(cluster, "gpu01", "debian12", fresh("debian12"), monkeypatch, in_container=True))
    outside = dict(plan_host(cluster, "gpu01", "debian12", fresh("debian12"), monkeypatch))
    assert "base: chrony running" not in inside and outside["base: chrony running"]


@pytest.mark.proves("base", "isolation", tier="plan")
def test_a_users_home_is_created_closed_and_one_open_to_others_is_closed_on_the_next_deploy(monkeypatch):
    """useradd makes the home 0700 (Debian 12's login.defs leaves HOME_MODE unset: 0755); an existing home with
    any permission for others loses it, one with the owner's and group's bits only is left as it is."""
    from roles.snapshot import Account, FileState
    plan = dict(plan_host(cluster_for("debian12"), "login1", "debian12", fresh("debian12"), monkeypatch))
    assert plan["base: 1 team users, fixed IDs"][-1] == \
        "useradd -u 3101 -g alice -G vision -s /bin/bash -d /home/alice -m -K HOME_MODE=0700 alice"
    for mode, expected in (("755", ["chmod o-rwx /home/alice"]), ("701", ["chmod o-rwx /home/alice"]),
                           ("750", []), ("700", [])):
        snap = fresh("debian12")
        snap.users["alice"] = Account(3101, 3101, "/home/alice", "/bin/bash")
        snap.groups.update({"alice": (3101, {"alice"}), "vision": (3001, {"alice"})})
        snap.files["/home/alice"] = FileState("directory", mode, "alice", "alice", "")
        plan = dict(plan_host(cluster_for("debian12"), "login1", "debian12", snap, monkeypatch))
        assert plan["base: 1 team users, fixed IDs"] == expected, mode


def test_sysctls_are_written_and_applied_when_changed(monkeypatch):
    plan = dict(plan_host(cluster_for("debian12"), "gpu01", "debian12", fresh("debian12"), monkeypatch))
    assert plan["base: sysctls"][0] == "upload /etc/sysctl.d/90-kiln.conf"
    assert plan["base: apply sysctls (if changed)"] == ["sysctl -q -p /etc/sysctl.d/90-kiln.conf"]
    assert "base: sysctls" not in dict(plan_host(cluster_for("debian12"), "ctl1", "debian12", fresh("debian12"),
                                                 monkeypatch))


def test_operators_get_sudo_through_a_file_visudo_accepted_and_nobody_else_does(monkeypatch):
    from roles.base import SUDOERS
    from roles.snapshot import FileState
    cluster = cluster_for("debian12", operators={"gid": 3900, "users": ["alice"], "password": False})
    cluster = replace(cluster, settings=dict(cluster.settings, kiln_operators=load_operators(cluster)))
    plan, ctx = plan_host(cluster, "gpu01", "debian12", fresh("debian12"), monkeypatch, with_context=True)
    files = {f.path: f.content.decode() for f in ctx.files}
    assert files[SUDOERS].splitlines()[1:] == ["%kiln-operators ALL=(ALL:ALL) NOPASSWD: ALL"]
    text = commands(plan)
    assert f"visudo -cqf {SUDOERS}.kiln-new >&2 ||" in text and "base: sudo" in dict(plan)
    assert "groupadd -g 3900 kiln-operators" in text and "-G vision,kiln-operators" in text
    snap = fresh("debian12")
    snap.files[SUDOERS] = FileState("regular file", "440", "root", "root", "x")
    off = dict(plan_host(cluster_for("debian12"), "gpu01", "debian12", snap, monkeypatch))
    assert off[f"base: no {SUDOERS}"] == [f"rm -f {SUDOERS}"] and "base: sudo" not in off


def load_operators(cluster):
    from kiln.inventory.privacy_schema import Operators
    return Operators(**cluster.settings["kiln_operators"])


def test_login_hosts_hold_each_users_sessions_to_the_limits_and_lift_them_for_root(monkeypatch):
    """login1 (the login group) gets the user-.slice drop-in and root's lifting one, then a daemon-reload;
    compute nodes get neither; a null setting writes none and removes what is there."""
    from roles.base import ROOT_SLICE, USER_SLICES
    from roles.snapshot import FileState
    plan, ctx = plan_host(cluster_for("debian12"), "login1", "debian12", fresh("debian12"), monkeypatch,
                          with_context=True)
    files = {f.path: f.content.decode() for f in ctx.files}
    assert files[USER_SLICES].splitlines()[1:] == ["[Slice]", "CPUQuota=400%", "MemoryMax=20%", "TasksMax=4096"]
    assert files[ROOT_SLICE].splitlines()[1:] == ["[Slice]", "CPUQuota=", "MemoryMax=infinity", "TasksMax=infinity"]
    assert dict(plan)["base: apply the login limits (if changed)"] == [
        "if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi"]
    compute = dict(plan_host(cluster_for("debian12"), "gpu01", "debian12", fresh("debian12"), monkeypatch))
    assert not [op for op, cmds in compute.items() if cmds and ("login limits" in op or "user-" in op)]
    snap = fresh("debian12")
    snap.files[USER_SLICES] = FileState("regular file", "644", "root", "root", "x")
    off = dict(plan_host(cluster_for("debian12", login_user_limits=None), "login1", "debian12", snap, monkeypatch))
    assert off[f"base: no {USER_SLICES}"] == [f"rm -f {USER_SLICES}"] and not off[f"base: no {ROOT_SLICE}"]
    assert "daemon-reload" in off["base: lift the login limits (if removed)"][0]


@pytest.mark.parametrize("os", ["debian12", "rocky9"])
def test_compute_nodes_take_pam_systemd_out_of_sshds_stack(os, monkeypatch):
    """pam_slurm_adopt puts an ssh session into the job's cgroup; pam_systemd would move it out again into
    a logind scope (Slurm's documentation: disable it). Only compute nodes, only while the line is there."""
    cluster = cluster_for(os)
    _, ctx = plan_host(cluster, "gpu01", os, fresh(os), monkeypatch, with_context=True)
    watched = {i for i, (_, regex) in enumerate(ctx.lines) if "pam_systemd" in regex}
    assert watched
    snapshot = fresh(os)
    snapshot.lines |= watched
    plan = dict(plan_host(cluster, "gpu01", os, snapshot, monkeypatch))
    ops = {op: cmds for op, cmds in plan.items() if "pam_systemd" in op}
    if os == "debian12":
        assert ops == {"slurm: no pam_systemd in /etc/pam.d/common-session (pam_slurm_adopt)":
                       ["DEBIAN_FRONTEND=noninteractive pam-auth-update --disable systemd"]}
    else:
        assert sorted(ops) == ["slurm: no pam_systemd in /etc/pam.d/password-auth (pam_slurm_adopt)",
                               "slurm: no pam_systemd in /etc/pam.d/system-auth (pam_slurm_adopt)"]
        assert all(cmds[0].startswith("sed -i -E ") for cmds in ops.values())
    converged = dict(plan_host(cluster, "gpu01", os, fresh(os), monkeypatch))
    assert all(converged[op] == [] for op in ops)  # gone already: nothing to do
    assert not [op for op in dict(plan_host(cluster, "login1", os, snapshot, monkeypatch)) if "pam_systemd" in op]


def test_the_pam_systemd_pattern_and_rockys_edit_on_real_lines(tmp_path):
    """The watched pattern (grep -E on the node) and Rocky's sed, on the lines the distributions ship."""
    import subprocess

    from roles.platform import PLATFORMS
    from roles.slurm import PAM_SYSTEMD
    shipped = {"debian": "session\toptional\tpam_systemd.so \n",
               "rocky": "-session     optional                   pam_systemd.so\n",
               "bracketed": "session [success=ok default=ignore] pam_systemd.so\n"}
    for name, line in shipped.items():
        assert subprocess.run(["grep", "-qE", PAM_SYSTEMD], input=line, text=True).returncode == 0, name
    for line in ("#session\toptional\tpam_systemd.so\n", "session optional pam_unix.so\n"):
        assert subprocess.run(["grep", "-qE", PAM_SYSTEMD], input=line, text=True).returncode == 1, line
    path, command = PLATFORMS["rocky9"].pam_systemd_off[0]
    local = tmp_path / "password-auth"
    local.write_text("session     required      pam_unix.so\n" + shipped["rocky"])
    subprocess.run(["sh", "-c", command.replace(path, str(local))], check=True)
    assert local.read_text() == "session     required      pam_unix.so\n#" + shipped["rocky"]
    assert subprocess.run(["grep", "-qE", PAM_SYSTEMD, str(local)]).returncode == 1


def test_under_become_a_secret_goes_through_a_private_file_in_the_login_users_home(monkeypatch):
    cluster = cluster_for("debian12")
    host = cluster.hosts["ctl1"]
    cluster.hosts["ctl1"] = replace(host, connection={**host.connection, "_sudo": True})
    plan = dict(plan_host(cluster, "ctl1", "debian12", fresh("debian12"), monkeypatch))
    steps = plan["slurm: munge key"]
    hop = steps[1].split()[-1]
    assert steps[1] == f"umask 077 && rm -f {hop} && : > {hop}" and hop.startswith(".kiln-upload-")  # not /tmp
    assert steps[2] == "upload /etc/munge/munge.key.kiln-new"
    assert not any("/tmp" in step for step in steps)


@pytest.mark.parametrize("os", sorted(PLATFORMS))
def test_configless_compute_nodes_get_the_conf_server_and_no_slurm_files(os, monkeypatch):
    cluster = cluster_for(os, slurm_configless=True)
    plan, ctx = plan_host(cluster, "gpu01", os, fresh(os), monkeypatch, with_context=True)
    names = [name for name, _ in plan]
    written = {f.path: f.content.decode() for f in ctx.files}
    conf = PLATFORMS[os].slurm_conf_dir
    assert f"{conf}/slurm.conf" not in written and f"{conf}/gres.conf" not in written
    assert "--conf-server ctl1:6817" in written["/etc/systemd/system/slurmd.service.d/configless.conf"]
    assert "slurm: no local slurm.conf (configless)" in names
    # slurmd may start before slurmctld serves the files (hosts run at once): that wait is not a failure
    assert "failed to fetch remote configs" in " ".join(dict(plan)["slurm: slurmd stays active after its start"])
    ctl, ctl_ctx = plan_host(cluster, "ctl1", os, fresh(os), monkeypatch, with_context=True)
    slurm_conf = next(f.content.decode() for f in ctl_ctx.files if f.path.endswith("/slurm.conf"))
    assert "SlurmctldParameters=enable_configless" in slurm_conf
    login = {f.path for f in plan_host(cluster, "login1", os, fresh(os), monkeypatch, with_context=True)[1].files}
    assert f"{conf}/slurm.conf" in login  # client commands on a login node read it locally
    # a node that had the files from before configless loses them
    had = fresh(os)
    had.files[f"{conf}/slurm.conf"] = had.files["/etc/hosts"]
    again = dict(plan_host(cluster, "gpu01", os, had, monkeypatch))
    assert again["slurm: no local slurm.conf (configless)"] == [f"rm -f {conf}/slurm.conf"]


def _op(plan, name: str) -> list[str]:
    return dict(plan)[name]


def test_slurmctld_starts_only_once_slurmdbd_answers_wherever_it_runs(monkeypatch):
    """slurmctld exits at its start when slurmdbd does not answer: its start waits for slurmdbd's port,
    on the controller itself (with slurmdbd's log lines on time out) or on a separate slurm_dbd host;
    slurmdbd counts as started only once it listens, MariaDB only once it answers a ping."""
    cluster = cluster_for("debian12")
    ctl = plan_host(cluster, "ctl1", "debian12", fresh("debian12"), monkeypatch)
    wait, start = _op(ctl, "slurm: slurmctld running")[-2:]
    assert start == "systemctl start slurmctld.service"
    assert "/dev/tcp/ctl1/6819" in wait and "slurmdbd on ctl1:6819 did not answer within 600 s, so slurmctld was not started'" in wait
    assert "tail -n 15 /var/log/slurm/slurmdbd.log" in wait
    settle = _op(ctl, "slurm: slurmdbd stays active after its start")[0]
    assert "/dev/tcp/ctl1/6819" in settle and "slurmdbd is active but slurmdbd did not answer within 600 s" in settle
    assert "mariadb-admin ping" in _op(ctl, "slurm: slurmdbd running")[-2]
    names = [name for name, _ in ctl]
    assert names.index("slurm: slurmdbd stays active after its start") < names.index("slurm: slurmctld running")
    assert "munge -n | unmunge" in _op(ctl, "slurm: munge answers after its start")[0]

    apart = replace(cluster_for("debian12", service_start_timeout=45), groups={**cluster.groups, "slurm_dbd": ("login1",)})
    ctl = plan_host(apart, "ctl1", "debian12", fresh("debian12"), monkeypatch)
    wait = _op(ctl, "slurm: slurmctld running")[-2]
    assert "/dev/tcp/login1/6819" in wait and "within 45 s, so slurmctld was not started: see its log there" in wait
    assert "slurm: slurmdbd running" not in dict(ctl)
    dbd = plan_host(apart, "login1", "debian12", fresh("debian12"), monkeypatch)
    assert "/dev/tcp/login1/6819" in _op(dbd, "slurm: slurmdbd stays active after its start")[0]


def test_a_running_slurmctld_is_not_held_back_by_a_wait(monkeypatch):
    """The wait belongs to a start: a deploy that starts nothing asks nothing of slurmdbd."""
    installed = fresh("debian12")
    installed.units["slurmctld.service"] = replace(installed.unit("slurmctld.service"), active="active", enabled="enabled")
    ctl = plan_host(cluster_for("debian12"), "ctl1", "debian12", installed, monkeypatch)
    assert _op(ctl, "slurm: slurmctld running") == []
