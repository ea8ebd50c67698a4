"""Who sshd lets in, asked of the node's own PAM: SYSTEM_LOGIN_ACCESS (the system suite).

For a user of each team, the check runs sshd's PAM account stack on the node (``pam_start("sshd")``,
``pam_acct_mgmt``, as sshd does after a key is accepted; from a documentation address, RFC 5737) through
libpam with ctypes: whatever stands in sshd's stack (kiln's pam_access rules, a line someone removed, a
rules file edited by hand) answers, not a reading of the files. It fails where a user kiln's rules keep
out is let in, or one they admit is refused. On compute nodes pam_slurm_adopt decides, by the user's jobs
on the node: there the check asks for each team's probe account, which never runs a job, and fails where
it is let in (``no_job``: pam_slurm_adopt gone from the stack, or told to let users without a job in).
Nothing logs in: no session is opened, no credential is used (and a user with no job on the node has no
job for pam_slurm_adopt to adopt the asking process into).

Expectations (``expect["system"]["logins"]``): ``[{user, team, allowed, no_job?}]``
(kiln/check/expectations.py, from roles/login_access.py's rules).
"""

from __future__ import annotations

import re
import shlex

from checks.verdict import Verdict, fail, ok

FROM = "192.0.2.1"  # TEST-NET-1: a documentation address, the remote host PAM is told the login comes from
PAM_SUCCESS, PAM_PERM_DENIED = 0, 6
# sshd's account stack for each user named on the command line: prints "kiln-login USER RC"
_PROGRAM = f"""
import ctypes, ctypes.util, sys
pam = ctypes.CDLL(ctypes.util.find_library("pam") or "libpam.so.0")
class Conv(ctypes.Structure):
    _fields_ = [("conv", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)),
                ("appdata", ctypes.c_void_p)]
conv = Conv(Conv._fields_[0][1](lambda n, m, r, d: 19), None)
for user in sys.argv[1:]:
    handle = ctypes.c_void_p()
    rc = pam.pam_start(b"sshd", user.encode(), ctypes.byref(conv), ctypes.byref(handle))
    if rc == 0:
        pam.pam_set_item(handle, 4, b"{FROM}")
        rc = pam.pam_acct_mgmt(handle, 0)
        pam.pam_end(handle, rc)
    print("kiln-login", user, rc)
"""
_LINE = re.compile(r"^kiln-login (\S+) (\d+)$")


def command(logins: list[dict]) -> str:
    """One shell line asking sshd's PAM account stack about each user of ``logins``."""
    return "python3 -c " + shlex.quote(_PROGRAM) + "".join(" " + shlex.quote(entry["user"]) for entry in logins)


def parse(output: str) -> dict[str, int]:
    """user -> PAM's answer (0 admitted, 6 denied, another code: PAM could not say)."""
    found = {}
    for line in output.splitlines():
        match = _LINE.match(line.strip())
        if match:
            found[match.group(1)] = int(match.group(2))
    return found


def judge(logins: list[dict], output: str) -> Verdict:
    answers = parse(output)
    if not answers:
        said = next((line.strip() for line in output.splitlines() if line.strip()), "no output")
        return fail("SYSTEM_LOGIN_ACCESS", f"sshd's PAM stack could not be asked ({said[:120]}): python3 and libpam "
                    "are part of every kiln node; kiln deploy")
    wrong = []
    for entry in logins:
        rc = answers.get(entry["user"])
        if entry["allowed"] and rc != PAM_SUCCESS:
            wrong.append(f"{entry['user']} ({entry['team']}) is refused (PAM {rc}) though kiln's rules admit the team")
        elif not entry["allowed"] and rc == PAM_SUCCESS:
            wrong.append(f"{entry['user']} ({entry['team']}) is let in " + (
                "with no job on this node" if entry.get("no_job") else "though kiln's rules keep the team out"))
    if wrong:
        if all(e.get("no_job") for e in logins):
            return fail("SYSTEM_LOGIN_ACCESS", "; ".join(wrong) + ": pam_slurm_adopt must be in the account stack "
                        "of /etc/pam.d/sshd (account required pam_slurm_adopt.so), before anything there that can end "
                        "the stack early (@include common-account, where SSSD puts a sufficient pam_localuser); "
                        "kiln deploy --roles slurm puts it in its place")
        return fail("SYSTEM_LOGIN_ACCESS", "; ".join(wrong) + ": compare /etc/security/kiln-access.conf and "
                    "/etc/pam.d/sshd with kiln_teams' login_hosts; kiln deploy writes both")
    if logins and all(e.get("no_job") for e in logins):
        return ok("SYSTEM_LOGIN_ACCESS", "sshd keeps out " + ", ".join(e["user"] for e in logins) + ", with no job "
                  "on this node (pam_slurm_adopt)")
    admitted = sorted({e["team"] for e in logins if e["allowed"]})
    kept_out = sorted({e["team"] for e in logins if not e["allowed"]})
    return ok("SYSTEM_LOGIN_ACCESS", "as kiln's rules say, sshd admits " + (", ".join(admitted) or "no team asked")
              + " and keeps out " + (", ".join(kept_out) or "no team asked"))
