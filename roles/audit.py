"""The audit role: the kernel's audit of privilege use and of changes to Slurm's, munge's and kiln's files,
by auditd with kiln's rules; journald takes the kernel's audit records too, so where the journal goes to the
log host (roles/logs.py) they go with it.

Defaults, in one place (``kiln_audit``, on):

+ The OS's audit package (Debian and Ubuntu ``auditd``, Rocky ``audit``) at the OS's version, and kiln's rules
  in /etc/audit/rules.d/kiln.rules (the same on every cluster: the install stage writes them, images carry
  them; auditd's own start loads rules.d through augenrules). Watches, each with a key ``ausearch -k`` finds:
  writes to /etc/slurm, /etc/munge, /etc/kiln and kiln's host programs (``kiln-slurm``, ``kiln-munge``,
  ``kiln-config``), to sudo's rules (``kiln-sudoers``) and to the account files (``kiln-identity``); every
  program a logged-in user runs as root (euid 0, a login UID of 1000 or more: sudo, su, a root shell) and
  every run of sudo and su (``kiln-privileged``). Failed and successful logins and sudo authentications are
  recorded by PAM itself (USER_AUTH, USER_LOGIN).
+ A changed rules file is loaded at once (``augenrules --load``); auditd runs and starts at boot.
+ Not in containers: the kernel's audit belongs to the host there (a container's auditd cannot start), so a
  container node keeps the package and rules with auditd stopped; the audit checks skip it, saying so.
+ ``kiln_audit: false``: auditd stopped and disabled, kiln's rules file removed (the package stays).
"""

from __future__ import annotations

from pyinfra.operations import server

from kiln.shell import command
from roles.context import NodeContext, changed_any
from roles.operations import kept_stopped_until_configured, path_absent, pinned_packages, service_running

RULES = "/etc/audit/rules.d/kiln.rules"
UNIT = "auditd.service"
KEYS = ("kiln-slurm", "kiln-munge", "kiln-config", "kiln-sudoers", "kiln-identity", "kiln-privileged")
_WATCHES = (("/etc/slurm/", "kiln-slurm"), ("/etc/munge/", "kiln-munge"), ("/etc/kiln/", "kiln-config"),
            ("/usr/local/lib/kiln/", "kiln-config"), ("/etc/sudoers", "kiln-sudoers"), ("/etc/sudoers.d/", "kiln-sudoers"),
            ("/etc/passwd", "kiln-identity"), ("/etc/group", "kiln-identity"), ("/etc/shadow", "kiln-identity"),
            ("/etc/gshadow", "kiln-identity"))


def rules() -> str:
    lines = ["## Written by kiln (roles/audit.py): privilege use and changes to Slurm, munge and kiln's files.",
             "## Loaded by augenrules with every file of /etc/audit/rules.d."]
    lines += [f"-w {path} -p wa -k {key}" for path, key in _WATCHES]
    for program in ("/usr/bin/sudo", "/usr/bin/su"):
        lines.append(f"-w {program} -p x -k kiln-privileged")
    for arch in ("b64", "b32"):
        lines.append(f"-a always,exit -F arch={arch} -S execve -F euid=0 -F auid>=1000 -F auid!=unset -k kiln-privileged")
    return "\n".join(lines) + "\n"


def package(ctx: NodeContext) -> str:
    return "auditd" if ctx.platform.uses_apt else "audit"


def install(ctx: NodeContext) -> None:
    if not ctx.cluster.setting("audit"):
        return
    ctx.watch_unit(UNIT)
    # Debian starts auditd at its install: in a container that start fails and with it the install
    kept_stopped_until_configured(name="audit: auditd kept stopped until kiln configures it", ctx=ctx,
                                  daemons={package(ctx): UNIT})
    pinned_packages(name=f"audit: {package(ctx)}", ctx=ctx, packages={package(ctx): None})
    ctx.mark("audit_rules", ctx.put(RULES, rules(), mode="640", name="audit: kiln's audit rules"))


def configure(ctx: NodeContext) -> None:
    unit = ctx.watch_unit(UNIT)
    if not ctx.cluster.setting("audit"):
        server.shell(name="audit: auditd stopped and disabled (kiln_audit off)",
                     commands=[command("systemctl", "disable", "--now", UNIT)],
                     _if=lambda: ctx.snapshot.unit(unit).active == "active" or ctx.snapshot.unit(unit).enabled == "enabled")
        ctx.watch_path(RULES)
        path_absent(name="audit: no kiln audit rules", ctx=ctx, path=RULES)
        return
    if ctx.in_container:
        return  # the host's kernel audits; the unit stays masked as the install left it
    started = service_running(name="audit: auditd enabled and running", ctx=ctx, unit=unit)
    written = ctx.marks.get("audit_rules", [])
    server.shell(name="audit: load kiln's rules (if they changed)", commands=["augenrules --load"],
                 _if=lambda: changed_any(*written) and not changed_any(started))
