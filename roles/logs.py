"""The logs role: every host's journal sent, as it is written, to the log host, which keeps it for
``kiln logs`` (kiln/log_host.py).

It runs where the monitoring role runs (the inventory has a ``monitoring`` group). Defaults, in one place:

+ ``kiln_log_shipping`` (on; needs ``kiln_monitoring_tls``): the log host is the first host of the
  monitoring group. Debian's systemd-journal-remote package (both programs) on every host, at the OS's
  version.
+ Every host: systemd-journal-upload follows the journal (logins, sudo, Slurm's daemons: they run in the
  foreground under systemd and copy their log to the journal, job submissions, starts and ends with the job's
  id; the kernel's audit records where auditd runs) and sends each entry over HTTPS to the log host, trusting the cluster CA alone, with the
  host's own certificate and key (the monitoring role's files, handed to the service by systemd's
  ``LoadCredential``: the key stays root's). It runs as the static account ``systemd-journal-upload``
  (``kiln_service_uids``, 982), the only one the firewall lets connect to the log host's port. It keeps the
  cursor of the last entry the log host accepted: a log host that was down gets what it missed; the service
  is restarted every 10 s for as long as it fails (no start limit).
+ The log host: systemd-journal-remote on its inventory address, port 19532 (socket-activated,
  ``FreeBind``: it binds before the address is up), HTTPS with its certificate of the cluster CA, one set of
  files per sender's address in /var/log/journal/remote (0640, its service account's: root reads them).
  Clients are not authenticated by certificate (Debian builds journal-remote without GnuTLS's client
  checks); the firewall's output rule on each host and its input rule on the log host do that work.
+ Retention: kiln-log-retention.timer, daily, deletes archived files older than ``kiln_log_retention_days``
  (180) and the oldest beyond ``kiln_log_retention_gb`` (50) (``journalctl --vacuum-*``; Debian 12's
  journal-remote has no size limit of its own).
+ Off, or no monitoring group: the uploader and the receiver are stopped and disabled, kiln's drop-ins and
  timer removed; received files are kept.
"""

from __future__ import annotations

from pyinfra.operations import server

from kiln.log_host import PORT, REMOTE_DIR, REMOTE_SOCKET, REMOTE_UNIT, UPLOAD_UNIT, UPLOADER, log_host, url
from kiln.inventory.formats import url_host
from kiln.shell import command, quote
from roles import monitoring_config as conf
from roles.context import NodeContext, changed_any, when_changed
from roles.operations import DAEMON_RELOAD, answers, managed_directory, path_absent, pinned_packages, service_running

PACKAGE = "systemd-journal-remote"
PROGRAMS = "/usr/lib/systemd"  # every supported OS has merged /usr
UPLOAD_DROPIN = f"/etc/systemd/system/{UPLOAD_UNIT}.d/kiln.conf"
REMOTE_DROPIN = f"/etc/systemd/system/{REMOTE_UNIT}.d/kiln.conf"
SOCKET_DROPIN = f"/etc/systemd/system/{REMOTE_SOCKET}.d/kiln.conf"
RECEIVER_WAIT = 30  # seconds an uploader's first start waits for the log host's port
RETENTION = "kiln-log-retention"
RETENTION_SERVICE, RETENTION_TIMER = (f"/etc/systemd/system/{RETENTION}.service",
                                      f"/etc/systemd/system/{RETENTION}.timer")
# the certificate and key the monitoring role writes (kiln/tls.py), and the CA, as systemd credentials
_CREDENTIALS = ("[Service]\n"
                f"LoadCredential=kiln-tls.key:{conf.TLS_KEY}\n"
                f"LoadCredential=kiln-tls.crt:{conf.TLS_CERT}\n"
                f"LoadCredential=kiln-ca.crt:{conf.CA_FILE}\n")
_TLS_ARGS = "--key=${CREDENTIALS_DIRECTORY}/kiln-tls.key --cert=${CREDENTIALS_DIRECTORY}/kiln-tls.crt"


def shipping(ctx: NodeContext) -> bool:
    return log_host(ctx.cluster) is not None


def install(ctx: NodeContext) -> None:
    if shipping(ctx):
        pinned_packages(name=f"logs: {PACKAGE}", ctx=ctx, packages={PACKAGE: None})
        # enabled in the image too (systemctl enable works in a chroot): a node booted from it has what the
        # image carries, and kiln drift compares the enabled units; it starts once configure wrote its drop-in
        service_running(name="logs: systemd-journal-upload enabled at boot", ctx=ctx,
                        unit=ctx.watch_unit(UPLOAD_UNIT), start=False)


def upload_dropin(ctx: NodeContext) -> str:
    """The uploader's drop-in: the log host's URL, this host's certificate, the CA; restarted for ever."""
    return ("# Written by kiln (roles/logs.py): this host's journal to the log host.\n[Unit]\nStartLimitIntervalSec=0\n\n"
            + _CREDENTIALS + "Restart=always\nRestartSec=10\nExecStart=\n"
            f"ExecStart={PROGRAMS}/systemd-journal-upload --save-state --url={url(log_host(ctx.cluster))} "
            f"{_TLS_ARGS} --trust=${{CREDENTIALS_DIRECTORY}}/kiln-ca.crt\n")


def socket_dropin(ctx: NodeContext) -> str:
    address = url_host(ctx.node.address)
    return ("# Written by kiln (roles/logs.py): the log host listens on its inventory address only.\n"
            f"[Socket]\nListenStream=\nListenStream={address}:{PORT}\nFreeBind=yes\n")


def remote_dropin() -> str:
    return ("# Written by kiln (roles/logs.py): HTTPS with this host's certificate of the cluster CA.\n"
            + _CREDENTIALS + "ExecStart=\n"
            f"ExecStart={PROGRAMS}/systemd-journal-remote --listen-https=-3 --split-mode=host "
            f"--output={REMOTE_DIR}/ {_TLS_ARGS}\n")


def retention_units(ctx: NodeContext) -> tuple[str, str]:
    days, gb = ctx.cluster.setting("log_retention_days"), ctx.cluster.setting("log_retention_gb")
    vacuum = command("journalctl", f"--directory={REMOTE_DIR}", f"--vacuum-time={days}d", f"--vacuum-size={gb}G")
    service = ("[Unit]\nDescription=kiln: received journals older than the retention, or beyond its size, deleted\n\n"
               f"[Service]\nType=oneshot\nExecStart={vacuum}\n")
    timer = ("[Unit]\nDescription=kiln: the log host's retention, daily\n\n[Timer]\nOnCalendar=daily\n"
             "Persistent=true\nRandomizedDelaySec=1h\n\n[Install]\nWantedBy=timers.target\n")
    return service, timer


def configure(ctx: NodeContext) -> None:
    # the socket before its service: a connection between the two stops would start the service again
    units = [ctx.watch_unit(u) for u in (UPLOAD_UNIT, REMOTE_SOCKET, REMOTE_UNIT, f"{RETENTION}.timer")]
    if not shipping(ctx):
        _off(ctx, units)
        return
    certificate = ctx.marks.get("host_certificate", [])  # the monitoring role's: renewed, the services restart
    receiving = ctx.node.name == log_host(ctx.cluster).name
    if receiving:
        _receiver(ctx, certificate)
    else:  # not, or no longer, the log host: its receiver stopped (the package's socket listens everywhere)
        _stopped(ctx, units[1:], "logs: no receiver here (not the log host)")
        _absent(ctx, (REMOTE_DROPIN, SOCKET_DROPIN, RETENTION_SERVICE, RETENTION_TIMER))
    dropin = _put_dropin(ctx, UPLOAD_DROPIN, upload_dropin(ctx), "logs: the uploader's drop-in")
    server.shell(name="logs: reload systemd (if the uploader's drop-in changed)", commands=[DAEMON_RELOAD],
                 _if=when_changed(dropin))
    started = service_running(name="logs: systemd-journal-upload enabled and running", ctx=ctx, unit=UPLOAD_UNIT,
                              before=_receiver_answers(ctx))
    server.shell(name="logs: restart systemd-journal-upload (if its drop-in or certificate changed)",
                 commands=[command("systemctl", "restart", UPLOAD_UNIT)],
                 _if=lambda: changed_any(dropin, *certificate) and not changed_any(started))


def _put_dropin(ctx: NodeContext, path: str, content: str, name: str):
    directory = path.rsplit("/", 1)[0]
    ctx.watch_path(directory)
    managed_directory(name=f"logs: {directory}", ctx=ctx, path=directory, user="root", group="root", mode="755")
    return ctx.put(path, content, mode="644", name=name)


def _receiver_answers(ctx: NodeContext) -> str:
    """Before the uploader's first start: a wait (at most RECEIVER_WAIT s) for the log host's port, which every
    host's deploy reaches at about the same time, tried as the uploader (the firewall lets no one else through).
    It never fails the deploy: an uploader started while the log host is away retries every 10 s."""
    host = log_host(ctx.cluster)
    probe = command("runuser", "-u", UPLOADER, "--", "bash", "-c", f": </dev/tcp/{host.address}/{PORT}")
    wait = answers(f"the log host {host.name}:{PORT}", probe, RECEIVER_WAIT,
                   "systemd-journal-upload starts anyway and tries again every 10 s")
    return f"( {wait} ) || true"


def _receiver(ctx: NodeContext, certificate: list) -> None:
    service, timer = retention_units(ctx)
    socket = _put_dropin(ctx, SOCKET_DROPIN, socket_dropin(ctx), "logs: the log host's socket (its address)")
    remote = _put_dropin(ctx, REMOTE_DROPIN, remote_dropin(), "logs: the log host's receiver (HTTPS)")
    retention = [ctx.put(RETENTION_SERVICE, service, mode="644", name="logs: kiln-log-retention.service"),
                 ctx.put(RETENTION_TIMER, timer, mode="644", name="logs: kiln-log-retention.timer")]
    server.shell(name="logs: reload systemd (if the receiver's units changed)", commands=[DAEMON_RELOAD],
                 _if=when_changed(socket, remote, *retention))
    # a socket bound elsewhere is rebound with its service stopped (systemd refuses to restart a socket whose
    # service runs); a receiver that runs takes a new drop-in or certificate at its restart
    server.shell(name="logs: (re)bind the log host's socket (if its address changed)",
                 commands=[command("systemctl", "stop", REMOTE_UNIT, REMOTE_SOCKET),
                           command("systemctl", "start", REMOTE_SOCKET)], _if=when_changed(socket))
    service_running(name="logs: the log host's socket enabled and listening", ctx=ctx, unit=REMOTE_SOCKET)
    server.shell(name="logs: restart the receiver (if its drop-in or certificate changed)",
                 commands=[command("systemctl", "try-restart", REMOTE_UNIT)],
                 _if=lambda: changed_any(remote, *certificate) and not changed_any(socket))
    service_running(name="logs: kiln-log-retention.timer enabled and running", ctx=ctx, unit=f"{RETENTION}.timer")


def _absent(ctx: NodeContext, paths: tuple[str, ...]) -> list:
    ops = []
    for path in paths:
        ctx.watch_path(path)
        ops.append(path_absent(name=f"logs: no {path}", ctx=ctx, path=path))
    return ops


def _stopped(ctx: NodeContext, units: list[str], name: str) -> None:
    """``units`` stopped and disabled, where any of them runs or is enabled (one that is not there is skipped)."""
    running = lambda: any(ctx.snapshot.unit(u).active == "active" or ctx.snapshot.unit(u).enabled == "enabled"  # noqa: E731
                          for u in units)
    server.shell(name=name, _if=running,
                 commands=[f"if systemctl cat {quote(u)} >/dev/null 2>&1; then systemctl disable --now {quote(u)}; fi"
                           for u in units])


def _off(ctx: NodeContext, units: list[str]) -> None:
    _stopped(ctx, units, "logs: uploader and receiver stopped and disabled (no log shipping)")
    removed = _absent(ctx, (UPLOAD_DROPIN, REMOTE_DROPIN, SOCKET_DROPIN, RETENTION_SERVICE, RETENTION_TIMER))
    server.shell(name="logs: reload systemd (if kiln's drop-ins were removed)", commands=[DAEMON_RELOAD],
                 _if=when_changed(*removed))
