"""System suite: kernel as pinned, swap off, locked memory for jobs, time synchronised.

Expectations (``expect["system"]``): kernel (pin, "" = any), memlock_unlimited (bool), time_sync (bool:
False in containers, whose clock is the host's), host_programs (the version line of kiln's host programs,
checks/version.py: a host that has them runs these), firewall (bool: kiln_firewall is on, so kiln's table is
loaded with an input policy of drop and its last change was confirmed), logins (``[{user, team, allowed}]``:
who sshd's PAM stack must admit or keep out, checks/logins.py), directory (the directory teams' users and
groups, as SSSD must give them: checks/directory.py), database_socket (bool: the host runs the accounting
database, which must open no network port: slurmdbd reaches it on its socket).
"""

from __future__ import annotations

from checks import directory as directory_check
from checks import logins as login_access
from checks.node import Node
from checks.parsers.nft import input_policy
from checks.verdict import Verdict, fail, ok, warn
from checks.version import FILE as VERSION_FILE

INSTALLED = "/usr/local/lib/kiln/checks"  # where the health role installs the host programs


KERNEL = "uname -r"
SWAP = "swapon --show --noheadings"
MEMLOCK = "cat /proc/$(pidof -s slurmd || echo self)/limits"
TIME_SYNC = "timedatectl show -p NTPSynchronized --value"
HOST_PROGRAMS = f"cat {INSTALLED}/{VERSION_FILE} 2>/dev/null || true"
# kiln's firewall (roles/firewall.py): the loaded input chain, and whether the last change was confirmed
CONFIRMED = "/etc/kiln/firewall/rules.nft"
FIREWALL = (f"nft list chain inet kiln input 2>&1; test -f {CONFIRMED} && echo kiln-firewall-confirmed; "
            "systemctl is-active --quiet kiln-firewall-rollback.timer && echo kiln-firewall-pending; true")
# MariaDB's own word on whether it listens on TCP (root through the socket, as the slurm role sets it up)
DATABASE = ("c=mariadb; command -v mariadb >/dev/null || c=mysql; "
            "$c --batch --skip-column-names -e 'SELECT @@skip_networking, @@port' 2>&1")


def commands(expect: dict) -> list[str]:
    """What ``run`` asks the node (for the remote runner to fetch at once)."""
    system = expect.get("system") or {}
    return [KERNEL, SWAP] + ([MEMLOCK] if system.get("memlock_unlimited", True) else []) + \
        ([TIME_SYNC] if system.get("time_sync", True) else []) + ([HOST_PROGRAMS] if system.get("host_programs") else []) + \
        ([FIREWALL] if system.get("firewall") else []) + \
        ([login_access.command(system["logins"])] if system.get("logins") else []) + \
        ([directory_check.command(system["directory"])] if system.get("directory") else []) + \
        ([DATABASE] if system.get("database_socket") else [])


def run(node: Node, expect: dict) -> list[Verdict]:
    system = expect.get("system") or {}
    verdicts = []
    kernel = node.run(KERNEL).stdout.strip()
    pin = system.get("kernel")
    if pin:
        verdicts.append(ok("SYSTEM_KERNEL", f"kernel {kernel}") if kernel == pin else
                        fail("SYSTEM_KERNEL", f"kernel {kernel} running, the pin is {pin}: reboot into it, or roll "
                             "the new kernel out with kiln patch"))
    swap = node.run(SWAP).stdout.strip()
    verdicts.append(ok("SYSTEM_SWAP", "swap off") if not swap else
                    fail("SYSTEM_SWAP", f"swap is on ({swap.splitlines()[0]}): swapoff -a and remove it from fstab"))
    if system.get("memlock_unlimited", True):
        limits = node.run(MEMLOCK).stdout
        line = next((l for l in limits.splitlines() if l.startswith("Max locked memory")), "")
        verdicts.append(ok("SYSTEM_MEMLOCK", "locked memory unlimited for jobs") if "unlimited" in line else
                        fail("SYSTEM_MEMLOCK", f"jobs may lock only {' '.join(line.split()[3:5]) or '?'} bytes: RDMA "
                             "and NCCL need unlimited (LimitMEMLOCK=infinity for slurmd)"))
    if system.get("time_sync", True):
        synced = node.run(TIME_SYNC).stdout.strip()
        verdicts.append(ok("SYSTEM_TIME_SYNC", "clock synchronised") if synced == "yes" else
                        warn("SYSTEM_TIME_SYNC", "clock not synchronised: check chrony (chronyc tracking)"))
    if system.get("firewall"):
        verdicts.append(firewall(node.run(FIREWALL).stdout))
    if system.get("logins"):
        verdicts.append(login_access.judge(system["logins"], node.run(login_access.command(system["logins"])).stdout))
    if system.get("directory"):
        verdicts.append(directory_check.judge(system["directory"], node.run(directory_check.command(system["directory"])).stdout))
    if system.get("database_socket"):
        verdicts.append(database_socket(node.run(DATABASE).stdout))
    wanted = system.get("host_programs")
    if wanted:
        here = node.run(HOST_PROGRAMS).stdout.strip()
        if here:  # a host without kiln's host programs (no health, monitoring or remediation role) has none
            verdicts.append(ok("SYSTEM_KILN_PROGRAMS", here) if here == wanted else
                            warn("SYSTEM_KILN_PROGRAMS", f"kiln's host programs here are {here[:80]!r}, this kiln's "
                                 f"are {wanted!r}: kiln deploy brings them level"))
    return verdicts


def firewall(output: str) -> Verdict:
    """SYSTEM_FIREWALL from FIREWALL's output: a fail where confirmed rules are not what is loaded (the
    table gone, or an input policy of accept); a warn where kiln deploy never confirmed rules here yet."""
    if "kiln-firewall-pending" in output:
        return ok("SYSTEM_FIREWALL", "a firewall change is loaded and awaits kiln deploy's confirmation")
    if "kiln-firewall-confirmed" not in output:
        return warn("SYSTEM_FIREWALL", f"kiln_firewall is on but no rules were confirmed here yet ({CONFIRMED} is "
                    "missing): every port is open until kiln deploy confirms them")
    policy = input_policy(output)
    if policy is None:
        said = next((line.strip() for line in output.splitlines() if line.strip()), "no output")
        return fail("SYSTEM_FIREWALL", f"kiln's firewall is not loaded (nft: {said[:120]}): every port is open; "
                    "systemctl restart kiln-firewall loads the confirmed rules")
    if policy != "drop":
        return fail("SYSTEM_FIREWALL", f"kiln's firewall lets in what no rule allows (input policy {policy}): "
                    "systemctl restart kiln-firewall loads the confirmed rules")
    return ok("SYSTEM_FIREWALL", "kiln's firewall loaded: input policy drop, its rules confirmed")


def database_socket(output: str) -> Verdict:
    """SYSTEM_DATABASE_SOCKET from DATABASE's output (``1\t3306``: skip_networking on, the port unused):
    a fail where MariaDB listens on TCP or cannot be asked."""
    fields = output.strip().split()
    if len(fields) != 2 or fields[0] not in ("0", "1") or not fields[1].isdigit():
        said = next((line.strip() for line in output.splitlines() if line.strip()), "no answer")
        return fail("SYSTEM_DATABASE_SOCKET", f"could not ask MariaDB whether it listens on the network ({said[:120]}): "
                    "systemctl status mariadb")
    if fields[0] == "0":
        return fail("SYSTEM_DATABASE_SOCKET", f"MariaDB listens on TCP port {fields[1]}: the accounting database and "
                    "the slurm user's password would cross the network unencrypted; slurmdbd needs only its socket "
                    "(kiln deploy --roles slurm writes skip-networking back and restarts it)")
    return ok("SYSTEM_DATABASE_SOCKET", "MariaDB answers on its socket only (skip-networking): no database traffic "
              "on the network")
