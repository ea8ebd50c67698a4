"""Isolation suite, on login hosts (the controller where there are none): what one team's user can reach
of others', probed as a real unprivileged user of each team, never read off a configuration file.

kiln creates a probe account for each team with a ``probe_uid`` (``kiln-probe-<team>``: the team's group,
no login shell, no password, no Slurm association; roles/base.py); a directory team names its own, a user
of the directory outside the team's users (``probe_user``). The suite runs each probe as each of
them through ``runuser`` and fails on any probe that gets through:

- ISOLATION_PROBE_ACCOUNT: the probe account is missing (the probes below could not run);
- ISOLATION_JOBS, ISOLATION_USAGE, ISOLATION_ACCOUNTING: Slurm shows the probe another user's jobs (squeue),
  usage (sshare) or associations (sacctmgr, from slurmdbd): PrivateData in slurm.conf and slurmdbd.conf
  (checks/isolation_slurm.py). With nothing of another user to hide the verdict says so and passes;
- ISOLATION_SECRETS: the probe reads a secret kiln placed on the host (munge key, slurmdbd.conf, the
  monitoring password, kiln-remediate's SSH key, a filesystem's key);
- ISOLATION_SSH_PASSWORD: the host's sshd offers the probe password or keyboard-interactive login (what
  sshd lists after ``Permission denied`` to a client that offers no key, its host key checked against the
  host's own public keys);
- ISOLATION_FILES: in the team directories the host mounts (a mount's ``team_directories``), the probe
  lists or creates a file in another team's directory, or creates one beside them (PATH/projects itself),
  or cannot create one in its own team's (missing, wrong group or mode). What it creates it removes;
- ISOLATION_HOMES: the probe lists or creates a file in a user's home (``homes``: the teams' users' homes on
  this host; one that is not there passes);
- ISOLATION_WRITES: the probe may write a directory or file outside its own space: its own walk of the host's
  local filesystems (sticky directories like /tmp, homes, team directories and shared filesystems aside) and
  of the top of each shared filesystem, asked of the kernel for it (``find -writable``), nothing written;
- ISOLATION_MONITORING: a listener of kiln's monitoring (this host's node_exporter, Prometheus,
  Alertmanager) answers the probe without credentials (anything but 401; one it cannot reach from here
  passes, and the verdict says so);
- ISOLATION_SUDO: sudo runs a command as root for the probe without a password, or has any rule for it
  (asked of sudo's policy by root: a user without a password learns nothing from sudo); no sudo passes;
- ISOLATION_SLURM_ADMIN: Slurm takes an operator's change from the probe (a reservation ten years out from
  slurmctld, a new account from slurmdbd, each deleted again at once): it is an operator or administrator in
  Slurm's accounting, or SlurmUser;
- ISOLATION_AUDIT_TRAIL (where log shipping is on; settled across hosts by kiln/check/audit_trail.py): the
  sudo refused to the probe (with no rule for it: a refusal sudo logs) does not reach the log host within
  a minute.

A probe whose protection the inventory itself turns off (``allowed``: PrivateData without jobs,
``kiln_ssh_password_login``) is still run; what gets through is a warning naming that setting, not a
failure: the operator chose it, and a deploy or rollout that runs this suite goes on.

Expectations (``expect["isolation"]``): allowed (check id -> the setting that turns its protection off), probes (the probe accounts), probe_teams (each one's team), secrets (the paths of every
secret kiln may place on a host), address (where the host's sshd listens: its inventory address),
team_directories (``{path, team}`` of each team directory the host mounts), team_parents (the
directories that hold them), homes (the teams' users' homes), shared_roots (the shared filesystems' mount points), token (this run's, given by kiln check: in the probe's sudo command). Never in the node-local runner: these probes are the operator's.
"""

from __future__ import annotations

import re
import shlex

from checks.isolation_slurm import LISTINGS, RootView, listing, slurm_admin
from checks.node import Node, as_user
from checks.verdict import Verdict, fail, ok, warn

NO_SUDO = "no sudo on this host"


def no_rule(probe: str) -> str:
    """ISOLATION_SUDO's verdict where sudo refused ``probe`` with no rule for it, and logged that refusal:
    what ISOLATION_AUDIT_TRAIL (kiln/check/audit_trail.py) then looks for on the log host."""
    return f"sudo has no rule for {probe}"


def readable_secrets(paths: list[str]) -> str:
    """A shell line printing each of ``paths`` the user running it can read a byte of."""
    return "for p in " + " ".join(shlex.quote(p) for p in paths) + \
        '; do head -c1 -- "$p" >/dev/null 2>&1 && printf "%s\\n" "$p"; done; true'


def account_command(probe: str) -> str:
    """Whether the probe account exists on the host, and its uid (a directory account's is the directory's)."""
    return f"id -u {shlex.quote(probe)}"


def commands(expect: dict) -> list[str]:
    """What ``run`` asks before anything else: each probe account's existence. The probes themselves are
    asked as the suite reaches them (squeue's separator is made for each call)."""
    return [account_command(p) for p in (expect.get("isolation") or {}).get("probes", [])]


def _secrets(node: Node, probe: str, paths: list[str]) -> Verdict:
    if not paths:
        return ok("ISOLATION_SECRETS", "kiln places no secret on this host")
    out = node.run(as_user(probe, "/bin/sh", "-c", readable_secrets(paths)))
    read = [p for p in out.stdout.split("\n") if p in paths]
    if read:
        return fail("ISOLATION_SECRETS", f"{probe} can read {', '.join(read)}: kiln deploy restores their "
                    "owner and mode; then rotate what was readable")
    return ok("ISOLATION_SECRETS", f"{probe} reads none of kiln's secrets")


# A client that offers no key and takes no password (BatchMode): sshd answers with the methods it would
# take. The host key is checked, against the host's own public keys written to a file of the probe's.
_SSH_METHODS = ('kh=$(mktemp) || exit 1; for k in /etc/ssh/ssh_host_*_key.pub; do printf "%s %s\\n" "$1" '
                '"$(cut -d" " -f1,2 "$k")"; done > "$kh"; ssh -o BatchMode=yes -o StrictHostKeyChecking=yes '
                '-o UserKnownHostsFile="$kh" -o GlobalKnownHostsFile=/dev/null -o PubkeyAuthentication=no '
                '-o PreferredAuthentications=password,keyboard-interactive -o ConnectTimeout=10 -- "$1" true 2>&1; '
                'rm -f "$kh"')
# ssh's last line: a banner sshd sends before authentication is printed before it and cannot stand in
_DENIED = re.compile(r"Permission denied \(([a-z,-]*)\)\.?")


def ssh_methods_command(probe: str, address: str) -> str:
    """The probe asks the sshd at ``address`` which methods it takes."""
    return as_user(probe, "/bin/sh", "-c", _SSH_METHODS, "sh", address)


def _ssh_password(node: Node, probe: str, address: str) -> Verdict:
    out = node.run(ssh_methods_command(probe, address))
    last = out.stdout.strip().rsplit("\n", 1)[-1]
    said = _DENIED.search(last)
    if not said:
        return fail("ISOLATION_SSH_PASSWORD", f"sshd at {address} did not list its methods to {probe} "
                    f"({out.stdout.strip()[-200:] or 'no answer'}): is sshd up, and its host key one of "
                    "/etc/ssh/ssh_host_*_key.pub?")
    methods = set(said.group(1).split(","))
    if methods & {"password", "keyboard-interactive"}:
        return fail("ISOLATION_SSH_PASSWORD", f"sshd at {address} takes {', '.join(sorted(methods))} from {probe}: "
                    "a guessed password logs in (kiln deploy writes keys only unless kiln_ssh_password_login)")
    return ok("ISOLATION_SSH_PASSWORD", f"sshd at {address} takes only {', '.join(sorted(methods))}")


# Each argument is KIND:PATH. own: the probe must create (and removes) a file there; other: it must neither
# list nor create; beside: it must not create. Prints what got through, a line each ("KIND-WHAT PATH").
_FILES = ('for a in "$@"; do k=${a%%:*}; d=${a#*:}; f="$d/.kiln-isolation-$$"; '
          'if ( : > "$f" ) 2>/dev/null; then rm -f -- "$f"; [ "$k" = own ] || printf "%s-wrote %s\\n" "$k" "$d"; '
          'elif [ "$k" = own ]; then printf "own-unwritable %s\\n" "$d"; fi; '
          'if [ "$k" = other ] && ls -A -- "$d" >/dev/null 2>&1; then printf "other-listed %s\\n" "$d"; fi; done; true')
_FILE_FINDINGS = {"own-unwritable": "cannot create a file in its own team's {}",
                  "other-wrote": "created a file in {}", "other-listed": "listed {}",
                  "beside-wrote": "created a file in {}, beside the team directories"}


def files_command(probe: str, targets: list[tuple[str, str]]) -> str:
    """The probe tries each (KIND, PATH) of ``targets`` (KIND: own, other, beside)."""
    return as_user(probe, "/bin/sh", "-c", _FILES, "sh", *(f"{kind}:{path}" for kind, path in targets))


def read_file_findings(out: str, targets: list[tuple[str, str]]) -> list[str]:
    """What got through, from ``files_command``'s output: only lines naming a target it was given, so a
    directory named like a finding cannot add one."""
    wanted = {(f"{kind}-{what}", path) for kind, path in targets for what in ("wrote", "listed", "unwritable")}
    found = []
    for line in out.split("\n"):
        finding, _, path = line.partition(" ")
        if (finding, path) in wanted and finding in _FILE_FINDINGS:
            found.append(_FILE_FINDINGS[finding].format(path))
    return found


def _first_four(found: list[str]) -> str:
    """What got through, for a verdict: the first four findings and how many more."""
    return "; ".join(found[:4]) + (f" and {len(found) - 4} more" if len(found) > 4 else "")


def _homes(node: Node, probe: str, homes: list[str]) -> Verdict | None:
    """The probe lists and creates a file in each user's home (none is its own: it has none)."""
    if not homes:
        return None
    targets = [("other", home) for home in homes]
    found = read_file_findings(node.run(files_command(probe, targets)).stdout, targets)
    if found:
        return fail("ISOLATION_HOMES", f"{probe}: {_first_four(found)}: chmod o-rwx each (kiln deploy closes the "
                    "homes it created); look for what was read or written there")
    return ok("ISOLATION_HOMES", f"{probe} lists and writes none of the {len(homes)} users' homes")


def _files(node: Node, probe: str, team: str, isolation: dict) -> Verdict | None:
    directories = isolation.get("team_directories") or []
    if not directories:
        return None
    targets = [("own" if d["team"] == team else "other", d["path"]) for d in directories] + \
              [("beside", p) for p in isolation.get("team_parents") or []]
    found = read_file_findings(node.run(files_command(probe, targets)).stdout, targets)
    if found:
        return fail("ISOLATION_FILES", f"{probe}: {_first_four(found)}: kiln deploy restores the team directories "
                    "(root, the team's group, 2770)")
    return ok("ISOLATION_FILES", f"{probe} writes its team's {sum(1 for k, _ in targets if k == 'own')} "
              f"director(ies) and none of the other {len(targets) - sum(1 for k, _ in targets if k == 'own')}")


# The probe's own walk of what it may write (find -writable: access(2) for the probe, so its permissions, ACLs
# and read-only mounts decide, and what it cannot enter it never sees), nothing written: the host's local
# filesystems, not descending into sticky directories (/tmp's kind: their contents are their users'),
# the pseudo-filesystems, /home or the shared filesystems (which hold the team directories: ISOLATION_HOMES and
# ISOLATION_FILES probe those), then the top of each shared filesystem. A name with a control
# character is printed as ODD_NAME: it could not be told from two names, and it is a finding all the same.
ODD_NAME = "kiln-odd-name"
WRITABLE_LIMIT = 200  # paths printed at most


def writable_command(probe: str, shared: list[str]) -> str:
    """The probe lists what it may write outside its own space, a path a line (``shared``: the mount points
    of the host's shared filesystems)."""
    skip = " -o ".join(f"-path {shlex.quote(p)}" for p in ["/proc", "/sys", "/dev", "/run", "/home", *shared])
    pick = f"\\( -type d -o -type f \\) -writable \\( -path '*[[:cntrl:]]*' -printf '{ODD_NAME}\\n' -o -printf '%p\\n' \\)"
    walks = [f"find / -xdev \\( {skip} -o -type d -perm -1000 \\) -prune -o {pick}"]
    walks += [f"find {shlex.quote(m)} -maxdepth 1 \\( -type d -perm -1000 \\) -prune -o {pick}" for m in shared]
    return as_user(probe, "/bin/sh", "-c", "{ " + "; ".join(w + " 2>/dev/null" for w in walks)
                   + f"; }} | head -n {WRITABLE_LIMIT}; true")


def _writes(node: Node, probe: str, isolation: dict, own: set[str]) -> Verdict:
    out = node.run(writable_command(probe, isolation.get("shared_roots") or []))
    lines = out.stdout.split("\n")
    found = [p for p in lines if p.startswith("/") and p not in own]
    found += [f"{lines.count(ODD_NAME)} path(s) with a control character in the name"] if ODD_NAME in lines else []
    if found:
        return fail("ISOLATION_WRITES", f"{probe} can write {_first_four(found)}, outside its own space: chmod g-w,o-w "
                    "each (or chgrp it away from the team), and look for what was written there")
    return ok("ISOLATION_WRITES", f"{probe} can write nothing outside its own space on this host's local filesystems "
              f"and the top of its {len(isolation.get('shared_roots') or [])} shared one(s)")


# Each URL's HTTP status for a client with no credentials, "untrusted" (an https listener whose certificate
# the cluster CA, argument 1, did not sign for its address) or "unreachable": "STATUS URL", a line each
_HTTP = ("import ssl, sys, urllib.request, urllib.error\n"
         "c = ssl.create_default_context(cafile=sys.argv[1]) if sys.argv[1] else None\n"
         "for u in sys.argv[2:]:\n"
         "    try:\n"
         "        with urllib.request.urlopen(u, timeout=5, context=c if u.startswith('https:') else None) as r: s = r.status\n"
         "    except urllib.error.HTTPError as e: s = e.code\n"
         "    except urllib.error.URLError as e: s = 'untrusted' if isinstance(e.reason, ssl.SSLError) else 'unreachable'\n"
         "    except Exception: s = 'unreachable'\n"
         "    print(s, u)\n")


def _monitoring(node: Node, probe: str, urls: list[str], ca_file: str = "") -> Verdict | None:
    if not urls:
        return None
    out = node.run(as_user(probe, "python3", "-c", _HTTP, ca_file, *urls))
    answers = dict(reversed(line.split(" ", 1)) for line in out.stdout.split("\n") if " " in line)
    missing = [u for u in urls if u not in answers]
    if missing:
        return fail("ISOLATION_MONITORING", f"{probe} could not ask {', '.join(missing[:3])} ({(out.stderr or out.stdout).strip()[-200:]}): "
                    "is python3 on this host?")
    untrusted = [u for u in urls if answers[u] == "untrusted"]
    if untrusted:
        return fail("ISOLATION_MONITORING", f"{', '.join(untrusted[:3])} showed {probe} a certificate the cluster CA "
                    "did not sign for its address, so this probe could not ask it: kiln deploy writes the listeners' "
                    "certificates (kiln_monitoring_tls)")
    open_ = [f"{u} ({answers[u]})" for u in urls if answers[u] not in ("401", "unreachable")]
    if open_:
        return fail("ISOLATION_MONITORING", f"answered {probe} without credentials: {', '.join(open_[:3])}: kiln deploy "
                    "writes the listeners' basic auth (monitoring role's web config)")
    far = [u for u in urls if answers[u] == "unreachable"]
    return ok("ISOLATION_MONITORING", f"{len(urls) - len(far)} monitoring listener(s) refused {probe} without "
              f"credentials" + (f"; {len(far)} not reachable from here" if far else ""))


def _sudo(node: Node, probe: str, token: tuple[str, ...] = ()) -> Verdict:
    """The probe runs ``sudo -S true [TOKEN]`` with no password on its input (taken without one: the worst
    case). Unlike ``-n``, which sudo refuses without a word to its log, this attempt is logged as refused
    (``user NOT in sudoers ; ... COMMAND=/usr/bin/true TOKEN``): ISOLATION_AUDIT_TRAIL finds it on the log
    host by this run's token. Then root asks sudo
    which rules the probe has (``sudo -l -U``): sudo asks a user without a password for one before it
    tells them anything, so only its policy, asked by root, tells a rule that wants a password from none."""
    tried = node.run(as_user(probe, "/bin/sh", "-c", "command -v sudo >/dev/null || { echo kiln-no-sudo; exit 0; }; "
                                                      f"LC_ALL=C sudo -S -p '' {shlex.join(['true', *token])} "
                                                      "</dev/null 2>&1"))
    if tried.stdout.strip() == "kiln-no-sudo":
        return ok("ISOLATION_SUDO", NO_SUDO)
    if tried.rc == 0:
        return fail("ISOLATION_SUDO", f"sudo ran a command as root for {probe} without a password: find the rule in "
                    "/etc/sudoers or /etc/sudoers.d (kiln grants sudo to kiln_operators only)")
    rules = node.run(shlex.join(["env", "LC_ALL=C", "sudo", "-l", "-U", probe]))
    said = (rules.stdout + rules.stderr).strip()
    if "is not allowed to run sudo" in said:
        return ok("ISOLATION_SUDO", no_rule(probe))
    if "may run the following commands" in said:
        return fail("ISOLATION_SUDO", f"sudo has a rule for {probe} ({said.splitlines()[-1].strip()[:120]}): find it in "
                    "/etc/sudoers or /etc/sudoers.d (kiln grants sudo to kiln_operators only)")
    return fail("ISOLATION_SUDO", f"sudo's answer about {probe} is not one kiln reads ({said[-200:] or 'nothing'}, exit "
                f"{rules.rc}): run sudo -l -U {probe} by hand")


def run(node: Node, expect: dict) -> list[Verdict]:
    isolation = expect.get("isolation") or {}
    verdicts: list[Verdict] = []
    root = RootView(node)
    teams = isolation.get("probe_teams") or {}
    for probe in isolation.get("probes", []):
        if node.run(account_command(probe)).rc != 0:
            verdicts.append(fail("ISOLATION_PROBE_ACCOUNT", f"no account {probe} on this host: kiln deploy "
                                 "creates it (the team's probe_uid; a directory team's probe_user is the "
                                 "directory's, read through SSSD)"))
            continue
        verdicts += [listing(node, probe, check, root) for check in LISTINGS]
        verdicts += [_secrets(node, probe, isolation.get("secrets", [])), slurm_admin(node, probe),
                     _sudo(node, probe, tuple(filter(None, [isolation.get("token")])))]
        if isolation.get("address"):
            verdicts.append(_ssh_password(node, probe, isolation["address"]))
        own = {d["path"] for d in isolation.get("team_directories") or [] if d["team"] == teams.get(probe)}
        verdicts.append(_writes(node, probe, isolation, own))
        for verdict in (_files(node, probe, teams.get(probe, ""), isolation), _homes(node, probe, isolation.get("homes") or []),
                        _monitoring(node, probe, isolation.get("monitoring_endpoints") or [],
                                    isolation.get("monitoring_ca_file") or "")):
            if verdict:
                verdicts.append(verdict)
    return [allowed_through(v, isolation.get("allowed") or {}) for v in verdicts]


def allowed_through(verdict: Verdict, allowed: dict[str, str]) -> Verdict:
    """A failed probe whose protection the inventory turns off, as a warning naming the setting."""
    why = allowed.get(verdict.id)
    if not (verdict.failed and why):
        return verdict
    return warn(verdict.id, f"{verdict.message} (the inventory turns this protection off: {why}; reported, not "
                "failed)")
