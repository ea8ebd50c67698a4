"""The same work as kiln's base + slurm roles with pyinfra's stock operations, for benchmarks/converge.py.

    RENDERED=DIR pyinfra DIR/inventory.py pyinfra_deploy.py -y

DIR/inventory.py is a plain pyinfra inventory the benchmark writes (no kiln, no ansible-core).

Files are the ones kiln renders (RENDERED), so every tool writes identical bytes.
"""

import json
import os
import shlex

from pyinfra import host
from pyinfra.facts.server import Command
from pyinfra.operations import apt, files, server, systemd
from pyinfra.operations.util import any_changed

R = os.environ["RENDERED"]
V = host.data.kiln_versions["slurm"]
is_ctl = "slurm_controller" in host.groups
is_dbd = "slurm_dbd" in host.groups
is_compute = "compute" in host.groups


def put(src, dest, mode="644", user="root", group="root"):
    return files.put(name=f"put {dest}", src=f"{R}/{src}", dest=dest, mode=mode, user=user, group=group)


put("apt.conf", "/etc/apt/apt.conf.d/90kiln")
put("hosts", "/etc/hosts")
for g in json.load(open(f"{R}/groups.json")):
    server.group(name=f"group {g['name']}", group=g["name"], gid=g["gid"], system=g["system"])
for u in json.load(open(f"{R}/users.json")):
    server.user(name=f"user {u['name']}", user=u["name"], uid=u["uid"], group=u["group"], groups=u["groups"] or None,
                shell=u["shell"], home=u["home"], create_home=u["create_home"], system=u["system"])
    if u["create_home"] and not u["system"]:  # closed to other users, as kiln's accounts operation keeps it
        files.directory(name=f"home of {u['name']}", path=u["home"], user=u["name"], group=u["group"], mode="700")
put("limits.conf", "/etc/security/limits.d/90-kiln.conf")
sshd = put("sshd.conf", "/etc/ssh/sshd_config.d/00-kiln.conf")
server.shell(name="reload sshd", commands=["systemctl is-active -q ssh || exit 0; /usr/sbin/sshd -t && systemctl reload ssh"],
             _if=sshd.did_change)
# A line in sshd's account stack before `@include common-account` (where SSSD's profile puts a sufficient
# pam_localuser), as kiln places it; files.line has no position, so a shell command that moves it there
# unless it already stands before it.
PAM_ANCHOR = r"^[[:space:]]*(@include[[:space:]]+common-account|-?account[[:space:]]+(include|substack|sufficient|\[))"


def pam_account_line(name, regex, line):
    q = shlex.quote
    server.shell(name=name, commands=[
        f"l=$(grep -nE {q(regex)} /etc/pam.d/sshd | head -n1 | cut -d: -f1); "
        f"a=$(grep -nE {q(PAM_ANCHOR)} /etc/pam.d/sshd | head -n1 | cut -d: -f1); "
        '[ -n "$l" ] && { [ -z "$a" ] || [ "$l" -lt "$a" ]; } && exit 0; '
        f"sed -i -E {q('/' + regex.replace('/', chr(92) + '/') + '/d')} /etc/pam.d/sshd; "
        f"sed -i -E {q('0,/' + PAM_ANCHOR + '/s//' + line.replace('/', chr(92) + '/') + chr(92) + 'n&/')} /etc/pam.d/sshd"])


# who may log in over SSH: kiln's pam_access rules for this host, then the line in sshd's account stack
put(f"access-{host.name}.conf", "/etc/security/kiln-access.conf")
pam_account_line("pam_access", r"^account\s+required\s+pam_access\.so\s+accessfile=/etc/security/kiln-access\.conf\s*$",
                 "account    required     pam_access.so accessfile=/etc/security/kiln-access.conf")
if os.path.exists(f"{R}/sudoers"):
    # sudo for the operators group (kiln_operators), the file checked by visudo before it is used
    apt.packages(name="sudo", packages=["sudo"], update=True, cache_time=3600, no_recommends=True)
    files.put(name="put /etc/sudoers.d/kiln-operators", src=f"{R}/sudoers", dest="/etc/sudoers.d/kiln-operators",
              mode="440", user="root", group="root")
    server.shell(name="sudoers accepted", commands=["visudo -cqf /etc/sudoers.d/kiln-operators"])
if host.name in json.load(open(f"{R}/login-hosts.json")):
    # each user's login sessions held to kiln_login_user_limits; root's lifted
    slices = [put("user-slice.conf", "/etc/systemd/system/user-.slice.d/50-kiln.conf"),
              put("root-slice.conf", "/etc/systemd/system/user-0.slice.d/50-kiln.conf")]
    server.shell(name="apply the login limits", commands=["systemctl daemon-reload"],
                 _if=lambda: any(s.did_change() for s in slices))
apt.packages(name="chrony", packages=["chrony"], update=True, cache_time=3600, no_recommends=True)
if host.get_fact(Command, "systemd-detect-virt --container 2>/dev/null || echo none").strip() == "none":
    # kiln leaves the clock to a container's host (chrony cannot set it there)
    systemd.service(name="chrony running", service="chrony", running=True, enabled=True)
pkgs = ["munge", f"slurm-client={V}"]
held = ["slurm-client"]
if is_ctl:
    pkgs.append(f"slurmctld={V}")
    held.append("slurmctld")
if is_dbd:
    pkgs += ["mariadb-server", f"slurmdbd={V}"]
    held.append("slurmdbd")
if is_compute:
    pkgs += [f"slurmd={V}", f"libpam-slurm-adopt={V}"]
    held += ["slurmd", "libpam-slurm-adopt"]
install = apt.packages(name="slurm packages", packages=pkgs, no_recommends=True)
server.shell(name="hold", commands=["apt-mark hold " + " ".join(held)], _if=install.did_change)
files.directory(name="munge drop-in dir", path="/etc/systemd/system/munge.service.d", mode="755", user="root",
                group="root")
munge_unit = put("munge-kiln.conf", "/etc/systemd/system/munge.service.d/kiln.conf")
systemd.daemon_reload(name="reload for munge", _if=munge_unit.did_change)
key = put("munge.key", "/etc/munge/munge.key", mode="400", user="munge", group="munge")
files.directory(name="etc/slurm", path="/etc/slurm", mode="755", user="root", group="root")
files.directory(name="log", path="/var/log/slurm", mode="755", user="slurm", group="slurm")
files.directory(name="lib", path="/var/lib/slurm", mode="755", user="slurm", group="slurm")
conf = put("slurm.conf", "/etc/slurm/slurm.conf")
node_conf = [put("gres.conf", "/etc/slurm/gres.conf"), put("cgroup.conf", "/etc/slurm/cgroup.conf")]
if is_ctl:
    files.directory(name="state", path="/var/lib/slurm/slurmctld", mode="700", user="slurm", group="slurm")
    files.directory(name="slurmctld drop-in dir", path="/etc/systemd/system/slurmctld.service.d", mode="755",
                    user="root", group="root")
    ctld_unit = put("slurmctld-kiln.conf", "/etc/systemd/system/slurmctld.service.d/kiln.conf")
    systemd.daemon_reload(name="reload for slurmctld", _if=ctld_unit.did_change)
dbd_conf = put("slurmdbd.conf", "/etc/slurm/slurmdbd.conf", mode="600", user="slurm", group="slurm") if is_dbd else None
orphans = [put("orphans.service", "/etc/systemd/system/kiln-accounting-orphans.service"),
           put("orphans.timer", "/etc/systemd/system/kiln-accounting-orphans.timer")] if is_dbd else []
if is_compute:
    files.directory(name="spool", path="/var/lib/slurm/slurmd", mode="755", user="root", group="root")
    files.directory(name="dropin dir", path="/etc/systemd/system/slurmd.service.d", mode="755", user="root", group="root")
    node_conf.append(put("slurmd-kiln.conf", "/etc/systemd/system/slurmd.service.d/kiln.conf"))
    node_conf.append(put("slurmd-conf-wait.conf", "/etc/systemd/system/slurmd.service.d/00-kiln-slurm-conf.conf"))
    pam_account_line("pam", r"^account\s+required\s+pam_slurm_adopt\.so", "account    required     pam_slurm_adopt.so")
systemd.service(name="munge", service="munge", running=True, enabled=True)
systemd.service(name="restart munge", service="munge", restarted=True, _if=key.did_change)
if is_dbd:
    db_conf = put("mariadb-kiln.cnf", "/etc/mysql/mariadb.conf.d/90-kiln.cnf")
    systemd.service(name="mariadb", service="mariadb", running=True, enabled=True)
    systemd.service(name="restart mariadb", service="mariadb", restarted=True, _if=db_conf.did_change)
    server.shell(name="grant", _if=dbd_conf.did_change, commands=[
        "pass=$(sed -n 's/^StoragePass=//p' /etc/slurm/slurmdbd.conf) && mysql -u root -e \"CREATE DATABASE IF NOT "
        "EXISTS slurm_acct_db; CREATE USER IF NOT EXISTS 'slurm'@'localhost'; ALTER USER 'slurm'@'localhost' "
        "IDENTIFIED BY '$pass'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;\""])
    systemd.service(name="slurmdbd", service="slurmdbd", running=True, enabled=True)
    systemd.daemon_reload(name="reload for the orphans timer", _if=any_changed(*orphans))
    systemd.service(name="orphans timer", service="kiln-accounting-orphans.timer", running=True, enabled=True)
if is_ctl:
    systemd.service(name="slurmctld", service="slurmctld", running=True, enabled=True)
    server.shell(name="accounts", commands=[open(f"{R}/accounts.sh").read()])
    server.shell(name="reconfigure", commands=["scontrol reconfigure"], _if=conf.did_change)
if is_compute:
    systemd.service(name="slurmd", service="slurmd", running=True, enabled=True, daemon_reload=True)
    systemd.service(name="restart slurmd", service="slurmd", restarted=True,
                    _if=lambda: any(op.did_change() for op in node_conf))
