"""The firewall role: kiln's default-deny host firewall on every kiln host (``kiln_firewall``).

Defaults:

+ install (images too): the nftables package, /usr/local/sbin/kiln-firewall-apply (below) and
  kiln-firewall.service, enabled: at boot, before the network is up, it loads the confirmed rules
  (/etc/kiln/firewall/rules.nft) and does nothing where there are none.
+ configure, firewall on: this host's rules (roles/firewall_rules.py) as the candidate,
  /etc/kiln/firewall/candidate.nft (checked by ``nft -c`` before it is placed); where they differ from the
  confirmed rules, ``kiln-firewall-apply apply SECONDS`` loads them and starts a timer that puts the
  confirmed rules back (or no table where there were none) after ``confirm_seconds``. kiln deploy then
  opens a new SSH connection to the host and runs ``kiln-firewall-apply confirm`` (the candidate becomes
  the confirmed rules, the timer is stopped): a change that shuts kiln's own SSH out is undone by the node.
+ configure, firewall off: ``kiln-firewall-apply remove`` where kiln's table or rules are there.
+ slurm.conf's SrunPortRange is set while the firewall is on (the slurm role; kiln/inventory/firewall_schema.py).
"""

from __future__ import annotations

from hashlib import sha1

from pyinfra.operations import server

from kiln.shell import quote
from roles import firewall_rules
from roles.context import NodeContext, when_changed
from roles.operations import DAEMON_RELOAD, managed_directory, pinned_packages, service_running

DIR = "/etc/kiln/firewall"
CANDIDATE, CONFIRMED = f"{DIR}/candidate.nft", f"{DIR}/rules.nft"
APPLY = "/usr/local/sbin/kiln-firewall-apply"
UNIT = "/etc/systemd/system/kiln-firewall.service"
ROLLBACK_UNIT = "kiln-firewall-rollback"  # the transient timer kiln-firewall-apply starts
SERVICE = f"""[Unit]
Description=kiln's firewall: the confirmed rules of table inet kiln (written by kiln's firewall role)
Documentation=file:{CONFIRMED}
DefaultDependencies=no
Before=network-pre.target shutdown.target
Wants=network-pre.target
After=local-fs.target nftables.service
Conflicts=shutdown.target
ConditionPathExists={CONFIRMED}

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/sbin/nft -f {CONFIRMED}

[Install]
WantedBy=sysinit.target
"""
APPLY_SCRIPT = f"""#!/bin/sh
# kiln's firewall changes with a timed rollback (written by kiln's firewall role; see roles/firewall.py).
#   kiln-firewall-apply apply SECONDS  load {CANDIDATE} now; unless confirmed within SECONDS, put back
#                                      what was confirmed before (no kiln table where nothing was)
#   kiln-firewall-apply confirm        keep the candidate: it becomes {CONFIRMED}, loaded at boot
#   kiln-firewall-apply rollback       load {CONFIRMED} again (the timer runs this)
#   kiln-firewall-apply remove         no kiln table, no rules (kiln_firewall turned off)
set -eu
PATH=/usr/sbin:/usr/bin:/sbin:/bin
drop_table() {{ if nft list table inet kiln >/dev/null 2>&1; then nft delete table inet kiln; fi; }}
stop_timer() {{
    systemctl stop {ROLLBACK_UNIT}.timer {ROLLBACK_UNIT}.service >/dev/null 2>&1 || true
    systemctl reset-failed {ROLLBACK_UNIT}.timer {ROLLBACK_UNIT}.service >/dev/null 2>&1 || true
}}
case "${{1:-}}" in
apply)
    seconds=${{2:?seconds}}
    case "$seconds" in *[!0-9]*|'') echo "kiln-firewall-apply: seconds must be a number" >&2; exit 2;; esac
    nft -c -f {CANDIDATE}
    stop_timer
    systemd-run --quiet --unit={ROLLBACK_UNIT} --on-active="$seconds" --timer-property=AccuracySec=1s \\
        {APPLY} rollback
    nft -f {CANDIDATE}
    logger -t kiln-firewall "loaded {CANDIDATE}; put back in $seconds s unless confirmed"
    ;;
confirm)
    test -f {CANDIDATE}
    stop_timer
    cp {CANDIDATE} {CONFIRMED}.new
    mv {CONFIRMED}.new {CONFIRMED}
    logger -t kiln-firewall "change confirmed: {CONFIRMED} is loaded at boot"
    ;;
rollback)
    if [ -f {CONFIRMED} ]; then nft -f {CONFIRMED}; else drop_table; fi
    logger -p user.warning -t kiln-firewall "change not confirmed in time: the confirmed rules are back"
    ;;
remove)
    stop_timer
    drop_table
    rm -f {CANDIDATE} {CONFIRMED}
    logger -t kiln-firewall "kiln_firewall is off: kiln's table and rules removed"
    ;;
*)
    echo "usage: kiln-firewall-apply apply SECONDS | confirm | rollback | remove" >&2
    exit 2
    ;;
esac
"""


def install(ctx: NodeContext) -> None:
    pinned_packages(name="firewall: nftables", ctx=ctx, packages={"nftables": None})
    ctx.watch_path(DIR)
    managed_directory(name=f"firewall: {DIR}", ctx=ctx, path=DIR, user="root", group="root", mode="700")
    ctx.put(APPLY, APPLY_SCRIPT, mode="755", name="firewall: kiln-firewall-apply")
    unit = ctx.put(UNIT, SERVICE, mode="644", name="firewall: kiln-firewall.service")
    server.shell(name="firewall: reload systemd (if the unit changed)", commands=[DAEMON_RELOAD],
                 _if=when_changed(unit))
    # enabled in the image too (systemctl enable works in a chroot): what an image carries, a node booted
    # from it has, and kiln drift compares the enabled units
    service_running(name="firewall: kiln-firewall.service enabled at boot", ctx=ctx,
                    unit=ctx.watch_unit("kiln-firewall.service"), start=False)


def configure(ctx: NodeContext) -> None:
    firewall = ctx.cluster.setting("firewall")
    ctx.watch_path(CONFIRMED)
    ctx.watch_path(CANDIDATE)
    if not firewall.enabled:
        server.shell(name="firewall: off (kiln's table and rules removed)", commands=[f"{APPLY} remove"],
                     _if=lambda: CONFIRMED in ctx.snapshot.files or CANDIDATE in ctx.snapshot.files)
        return
    rules = firewall_rules.ruleset(ctx.cluster, ctx.node)
    ctx.put(CANDIDATE, rules, mode="600", name="firewall: this host's rules (candidate)", check="nft -c -f {}")
    wanted = sha1(rules.encode()).hexdigest()

    def differs() -> bool:
        confirmed = ctx.snapshot.files.get(CONFIRMED)
        return confirmed is None or confirmed.sha1 != wanted
    ctx.mark("firewall_applied", server.shell(
        name="firewall: load the changed rules (put back unless kiln deploy confirms)",
        commands=[f"{APPLY} apply {quote(str(firewall.confirm_seconds))}"], _if=differs))
