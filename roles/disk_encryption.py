"""The disk_encryption role: node-local scratch and checkpoint disks as LUKS2, unlocked at every boot by
network-bound disk encryption: clevis on the node asks tang on the controllers, so a node reboots with no
person, a disk taken out of the cluster is unreadable, and a node whose tang servers do not answer stays
locked and out of service (its check, STORAGE_LOCKED, drains it) until one does.

Defaults, in one place (``kiln_encrypted_volumes``, per host; ``kiln_tang_port``, 7500):

+ Tang, where any host has encrypted volumes, on every controller (the management zone): the ``tang``
  package, kiln's own signing and exchange keys (kiln/disk_keys.py: made once, kept with kiln's secrets, the
  same on every controller) in tang's key directory (0440, tang's account); a key already there that is not
  kiln's is hidden (renamed ``.NAME.jwk``, tang's way of retiring a key: it still unlocks what it bound, it
  is no longer offered); ``tangd.socket`` on ``kiln_tang_port`` (a drop-in; the package's port 80 is not
  opened), started and enabled. kiln's firewall lets only the hosts with encrypted volumes reach it.
+ On a host with encrypted volumes: cryptsetup, clevis, clevis-luks, clevis-systemd (its
  ``clevis-luks-askpass.path`` answers systemd's password prompts for ``_netdev`` volumes from tang), and
  systemd-cryptsetup where the OS ships it apart (Debian 13, Ubuntu 24.04); ``remote-cryptsetup.target`` (what
  opens ``_netdev`` volumes at boot) and ``clevis-luks-askpass.path`` enabled.
+ Each volume, once, when its record (/etc/kiln/encrypted-volumes/NAME) differs from what the inventory and
  the keys say: a blank device (no signature ``blkid -p`` knows) made LUKS2, its first key slot the
  volume's recovery passphrase (kiln's secrets ``luks/HOST.NAME``; 256 random bits, so PBKDF2 at its least
  cost; it reaches the node only for the run, in /run, 0600, removed when the run's command ends); a
  device that holds anything but LUKS is refused, never formatted; bound to the tang servers by clevis
  (one ``tang`` pin, or ``sss`` with threshold 1 over several controllers) with the signing key's
  thumbprint, so only kiln's tang can answer; bindings of an earlier setting removed after the new one is
  made; the filesystem (``filesystem``: ext4 or xfs) made in a volume that has none.
+ /etc/crypttab ``NAME DEVICE none luks,_netdev,nofail`` (no password timeout: a volume locked at boot
  unlocks by itself as soon as a tang server answers: clevis-luks-askpass keeps asking) and /etc/fstab
  ``/dev/mapper/NAME PATH FS OPTIONS,nofail,_netdev 0 2``: the boot never waits for it. A drop-in of
  ``systemd-cryptsetup@NAME.service`` starts the mount once the volume is open, whenever that is (a boot's
  mount job gives up on the device after 90 s). ``systemctl daemon-reload`` when any of them changed.
+ The volume opened by that unit (as at boot: clevis answers its prompt), so that its stop closes it at
  shutdown (opened by hand, its device would hold the shutdown), and mounted, when it is not mounted.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re

from pyinfra.operations import server

from kiln.inventory import encryption
from kiln.shell import quote
from roles.context import NodeContext, changed_any, when_changed
from roles.operations import (DAEMON_RELOAD, kept_stopped_until_configured, line_present, managed_directory,
                              pinned_packages, record_differs, recorded_commands, secret_file, service_running)
from roles.secret_files import TANG

RECORDS = "/etc/kiln/encrypted-volumes"
CRYPTTAB = "/etc/crypttab"
SOCKET = "tangd.socket"
SOCKET_DROP_IN = "/etc/systemd/system/tangd.socket.d/kiln.conf"
# OSes whose systemd-cryptsetup (crypttab's generator and unit) is a package of its own
CRYPTSETUP_APART = ("debian13", "ubuntu2404")


def is_tang_server(ctx: NodeContext) -> bool:
    return ctx.node.name in {h.name for h in encryption.tang_servers(ctx.cluster.hosts)}


def volumes(ctx: NodeContext) -> list:
    return list(ctx.node.setting("encrypted_volumes"))


def node_packages(ctx: NodeContext) -> dict[str, None]:
    packages = ["cryptsetup" if ctx.platform.family == "redhat" else "cryptsetup-bin", "clevis", "clevis-luks",
                "clevis-systemd"]
    if ctx.node.os in CRYPTSETUP_APART:
        packages.append("systemd-cryptsetup")
    return dict.fromkeys(packages)


def install(ctx: NodeContext) -> None:
    if is_tang_server(ctx):
        # Debian starts tangd.socket on port 80 at its install: kept stopped until its port is kiln's
        kept_stopped_until_configured(name="disk encryption: tangd.socket kept stopped until configured", ctx=ctx,
                                      daemons={"tang": SOCKET})
        pinned_packages(name="disk encryption: tang", ctx=ctx, packages={"tang": None})
    if volumes(ctx):
        pinned_packages(name="disk encryption: cryptsetup and clevis", ctx=ctx, packages=node_packages(ctx))


def pin(urls: list[str], thumbprint: str) -> tuple[str, str]:
    """clevis's pin and its configuration: one tang server, or any one of several (sss, threshold 1)."""
    servers = [{"url": url, "thp": thumbprint} for url in urls]
    if len(servers) == 1:
        return "tang", json.dumps(servers[0], separators=(",", ":"))
    return "sss", json.dumps({"t": 1, "pins": {"tang": servers}}, separators=(",", ":"))


def key_path(volume) -> str:
    return f"/run/kiln-luks-{volume.name}.key"


TANG_TRIES, TANG_PAUSE = 60, 5  # the controllers' tang may be converging in this same deploy
OPEN_TRIES = 60  # 2 s apart: how long the deploy waits for systemd's unit to open a volume


def setup_command(volume, pin_name: str, config: str, urls: list[str]) -> str:
    """One shell program that makes ``volume`` LUKS2 on its blank device (or finds it so), checks that the
    recovery passphrase opens it, waits for every tang server to answer (they may be converging in the same
    deploy), binds it to tang, removes bindings of an earlier setting, opens it and makes its filesystem where
    it has none. The passphrase file is removed whatever happens."""
    dev, name, key, mapper = quote(volume.device), quote(volume.name), quote(key_path(volume)), quote(f"/dev/mapper/{volume.name}")
    say = lambda text: f"echo {quote('kiln: ' + text)} >&2"  # noqa: E731
    mkfs = "mkfs.ext4 -q" if volume.filesystem == "ext4" else "mkfs.xfs -q"
    setup = quote(f"kiln_setup_{volume.name}")
    return "; ".join([
        f"trap 'rm -f {key}' EXIT",
        f"[ -b {dev} ] || {{ {say(volume.device + ' is no block device on this node: check kiln_encrypted_volumes')}; exit 1; }}",
        f"if ! cryptsetup isLuks {dev}; then held=$(blkid -p -o value -s TYPE {dev}; blkid -p -o value -s PTTYPE {dev}); "
        f"if [ -n \"$held\" ]; then {say(volume.device + ' holds data (blkid: ')}; echo \"$held\" >&2; "
        f"{say('kiln makes only a blank device LUKS2: wipe it (wipefs -a) if what it holds may go, or name another device')}; "
        f"exit 1; fi; "
        f"cryptsetup luksFormat --batch-mode --type luks2 --pbkdf pbkdf2 --pbkdf-force-iterations 1000 "
        f"--key-file {key} {dev} || exit 1; fi",
        f"cryptsetup open --test-passphrase --key-file {key} {dev} || {{ "
        f"{say('the recovery passphrase kiln keeps for ' + volume.name + ' does not open ' + volume.device + ': restore it from the backup of kiln secrets (luks/HOST.' + volume.name + ')')}; exit 1; }}",
        f"for url in {' '.join(quote(u) for u in urls)}; do n=0; until curl -sfg -o /dev/null \"$url/adv\"; do "
        f"n=$((n+1)); if [ $n -ge {TANG_TRIES} ]; then echo \"kiln: tang at $url did not answer within "
        f"{TANG_TRIES * TANG_PAUSE} s: is tangd.socket running on the controllers, and the network open to it?\" >&2; "
        f"exit 1; fi; sleep {TANG_PAUSE}; done; done",
        f"old=$(clevis luks list -d {dev} 2>/dev/null | sed -n 's/^\\([0-9][0-9]*\\): .*/\\1/p')",
        f"clevis luks bind -d {dev} -k {key} {quote(pin_name)} {quote(config)} || exit 1",
        f"for slot in $old; do clevis luks unbind -f -d {dev} -s \"$slot\" || exit 1; done",
        # the filesystem, where the volume has none: opened under a name of kiln's for it, and closed again (at
        # boot and below, systemd opens it as NAME: its unit then closes it at shutdown)
        f"if [ ! -e {mapper} ]; then cryptsetup open --key-file {key} {dev} {setup} || exit 1; "
        f"[ -n \"$(blkid -p -o value -s TYPE /dev/mapper/{setup})\" ] || {mkfs} /dev/mapper/{setup} || "
        f"{{ cryptsetup close {setup}; exit 1; }}; cryptsetup close {setup} || exit 1; fi",
    ])


def record(volume, pin_name: str, config: str, passphrase: str) -> str:
    """What the node's record of a volume holds: its setting, the pin, and a digest of the passphrase (256
    random bits: its SHA-256 tells nothing), so a changed one is tried on the volume."""
    digest = hashlib.sha256(passphrase.encode()).hexdigest()
    return (f"# Written by kiln once {volume.name} was set up (roles/disk_encryption.py). Do not edit.\n"
            f"{volume.name} {volume.device} {volume.filesystem} {pin_name} {config} {digest}\n")


def crypttab_line(volume) -> str:
    return f"{volume.name} {volume.device} none luks,_netdev,nofail"


def fstab_line(volume) -> str:
    options = [o for o in volume.options.split(",") if o != "defaults"] + ["nofail", "_netdev"]
    return f"/dev/mapper/{volume.name} {volume.path} {volume.filesystem} {','.join(options)} 0 2"


def unit(volume) -> str:
    """systemd's unit that opens the volume at boot, made from /etc/crypttab."""
    return f"systemd-cryptsetup@{volume.name}.service"


def mount_unit(path: str) -> str:
    """The mount unit of ``path`` as systemd names it (``systemd-escape --path --suffix=mount``): '/' between
    parts is '-', a character outside letters, digits, ':', '_' and a '.' not first is ``\\xNN``."""
    trimmed = path.strip("/")
    if not trimmed:
        return "-.mount"
    out = []
    for i, ch in enumerate(trimmed):
        if ch == "/":
            out.append("-")
        elif ch.isascii() and (ch.isalnum() or ch in ":_" or (ch == "." and i > 0)):
            out.append(ch)
        else:
            out.append(f"\\x{ord(ch):02x}")
    return "".join(out) + ".mount"


def unit_drop_in(volume) -> str:
    """The volume's mount started once its unit opened it, whenever that is: a boot's mount job gives up on the
    device after 90 s (nofail: the boot goes on), and the unlock may come long after, once tang answers. (A
    unit file reads a backslash escape itself: the mount unit's own ``\\xNN`` is written with two.)"""
    return ("# Written by kiln (roles/disk_encryption.py): the volume mounted once it is open, whenever that is.\n"
            "[Service]\n"
            f"ExecStartPost=/bin/systemctl --no-block start {mount_unit(volume.path).replace(chr(92), chr(92) * 2)}\n")


def _tang(ctx: NodeContext) -> None:
    directory, account = TANG[ctx.platform.family]
    keys = ctx.secrets.disks
    written = [ctx.put(f"{directory}/{name}", data, mode="440", user=account, group=account, secret=True,
                       name=f"disk encryption: tang's key {name}") for name, data in sorted(keys.tang_keys.items())]
    mine = " ".join(quote(name) for name in sorted(keys.tang_keys))
    server.shell(name="disk encryption: other keys of tang hidden (kiln's keys are new)",
                 commands=[f"cd {quote(directory)} && for f in *.jwk; do case \" {mine} \" in *\" $f \"*) ;; *) "
                           f"[ -e \"$f\" ] && mv -f \"$f\" \".$f\";; esac; done"],
                 _if=when_changed(*written))
    port = ctx.cluster.setting("tang_port")
    ctx.watch_path(posixpath.dirname(SOCKET_DROP_IN))
    managed_directory(name="disk encryption: tangd.socket's drop-in directory", ctx=ctx,
                      path=posixpath.dirname(SOCKET_DROP_IN), user="root", group="root", mode="755")
    drop_in = ctx.put(SOCKET_DROP_IN, f"# Written by kiln (roles/disk_encryption.py): tang on kiln_tang_port.\n"
                      f"[Socket]\nListenStream=\nListenStream={port}\n", mode="644",
                      name="disk encryption: tang's port")
    unit = ctx.watch_unit(SOCKET)
    server.shell(name="disk encryption: tangd.socket on its new port (if it changed)",
                 commands=[DAEMON_RELOAD, f"systemctl restart {SOCKET}"],
                 _if=lambda: changed_any(drop_in) and ctx.snapshot.unit(unit).active == "active")
    service_running(name="disk encryption: tangd.socket enabled and listening", ctx=ctx, unit=unit,
                    before=DAEMON_RELOAD)


def _volume(ctx: NodeContext, volume, urls: list[str]) -> None:
    keys = ctx.secrets.disks
    pin_name, config = pin(urls, keys.thumbprint)
    passphrase = keys.passphrase(ctx.node.name, volume.name)
    path = f"{RECORDS}/{volume.name}"
    content = record(volume, pin_name, config, passphrase)
    ctx.watch_path(key_path(volume))
    secret_file(name=f"disk encryption: {volume.name}'s recovery passphrase for this run (in /run)", ctx=ctx,
                path=key_path(volume), content=passphrase.encode(), mode="600", user="root", group="root",
                _if=record_differs(ctx, path, content))
    recorded_commands(ctx, name=f"disk encryption: {volume.name} on {volume.device} LUKS2, bound to tang",
                               record=path, content=content, commands=[setup_command(volume, pin_name, config, urls)])
    ctx.watch_path(volume.path)
    managed_directory(name=f"disk encryption: mount point {volume.path}", ctx=ctx, path=volume.path, user="root",
                      group="root", mode="755", only_create=True)
    ctx.watch_path(CRYPTTAB)
    server.shell(name="disk encryption: /etc/crypttab present", commands=[f"install -m 644 /dev/null {CRYPTTAB}"],
                 _if=lambda: CRYPTTAB not in ctx.snapshot.files)  # cryptsetup-bin ships none
    lines = []
    for file, line, regex in ((CRYPTTAB, crypttab_line(volume), rf"^{re.escape(volume.name)}\s"),
                              ("/etc/fstab", fstab_line(volume), rf"^\S+\s+{re.escape(volume.path)}\s")):
        index = ctx.watch_line(file, "^" + re.escape(line) + "$")
        lines.append(line_present(name=f"disk encryption: {file} entry for {volume.name}", ctx=ctx, path=file,
                                  line=line, index=index, replace_regex=regex))
    drop_in_dir = f"/etc/systemd/system/{unit(volume)}.d"
    ctx.watch_path(drop_in_dir)
    managed_directory(name=f"disk encryption: {unit(volume)}'s drop-in directory", ctx=ctx, path=drop_in_dir,
                      user="root", group="root", mode="755")
    drop_in = ctx.put(f"{drop_in_dir}/kiln.conf", unit_drop_in(volume), mode="644",
                      name=f"disk encryption: {volume.path} mounted once {volume.name} is open")
    server.shell(name="disk encryption: systemd reads crypttab, fstab and the drop-in again (if they changed)",
                 commands=[DAEMON_RELOAD], _if=when_changed(*lines, drop_in))
    mounted = ctx.watch_line("/proc/self/mounts", rf"^/dev/mapper/{re.escape(volume.name)} {re.escape(volume.path)} ")
    locked = quote(f"kiln: {volume.name} stays locked: no tang server answered ({', '.join(urls)}) within "
                   f"{OPEN_TRIES * 2} s")
    # opened by systemd's own unit (as at boot, clevis answering its prompt), so that its stop closes it
    server.shell(name=f"disk encryption: {volume.name} open and mounted on {volume.path}",
                 commands=["systemctl start clevis-luks-askpass.path",
                           f"systemctl --no-block start {unit(volume)}",
                           f"n=0; until [ -e {quote('/dev/mapper/' + volume.name)} ]; do n=$((n+1)); "
                           f"if [ $n -ge {OPEN_TRIES} ]; then echo {locked} >&2; exit 1; fi; sleep 2; done",
                           f"systemctl start {quote(mount_unit(volume.path))}"],
                 _if=lambda: mounted not in ctx.snapshot.lines)


def configure(ctx: NodeContext) -> None:
    if is_tang_server(ctx):
        _tang(ctx)
    if not volumes(ctx):
        return
    # what opens a _netdev volume at boot (not enabled on every OS by default), and clevis's answer to its prompt
    for unit in ("remote-cryptsetup.target", "clevis-luks-askpass.path"):
        service_running(name=f"disk encryption: {unit} enabled", ctx=ctx, unit=ctx.watch_unit(unit), start=False)
    urls = encryption.tang_urls(ctx.cluster.hosts, ctx.cluster.setting("tang_port"))
    for volume in volumes(ctx):
        _volume(ctx, volume, urls)
