"""The kerberos role: kiln's Kerberos realm for NFS with Kerberos security (``sec=krb5``, ``krb5i`` or ``krb5p``:
``krb5p`` encrypts every byte of the share's traffic), where any export or mount of the inventory asks for it
(kiln/inventory/kerberos.py).

Defaults, in one place (``kiln_kerberos_realm``: the cluster's name in capitals):

+ /etc/krb5.conf on every host of the realm (the KDC, the NFS servers and clients): the realm, its KDC by the
  inventory address of the first controller, over TCP only (``udp_preference_limit = 1``: one firewall rule,
  tickets of any size), no DNS lookups and no host name canonicalisation (a host's principal is its inventory
  name, as its clients mount it), aes256-cts-hmac-sha1-96 only.
+ The KDC on the first controller (the management zone): ``krb5-kdc`` (Rocky: ``krb5-server``), kept stopped until
  configured (Debian's ``krb5-admin-server``, for ``kadmin.local``, kept masked: no kadmind listens); its kdc.conf (tickets 10 h, renewable 7 days, aes256-cts-hmac-sha1-96 keys); the database made once,
  with a random master key that never leaves the host (its stash file), since every key kiln uses is derived from
  kiln's secrets (kiln/kerberos_keys.py): a KDC lost is made again by the next deploy. Each principal's key set
  from its password (``addprinc``/``cpw -pw``) at key version 1, read by ``kadmin.local`` from a 0600 file in /run
  removed when the command ends (never a command line), whenever the record /etc/kiln/kerberos/principals (names
  and password digests) differs. A principal taken out of the inventory stays. kiln's firewall opens TCP 88 on it to
  the realm's hosts only.
+ On an NFS server: /etc/krb5.keytab with ``nfs/HOST`` (0600, made on the operator's side from kiln's secrets) and
  gssproxy, which the kernel's NFS server asks to accept Kerberos contexts; its krb5.conf maps the realm's
  ``host/`` principals to root (``auth_to_local``), so a client's root is root there as the export's
  ``root_squash`` or ``no_root_squash`` says, as with ``sec=sys`` (without it, no one: root's files would be
  nobody's and its writes refused).
+ On an NFS client: /etc/krb5.keytab with ``host/HOST`` (root's mounts use it: rpc.gssd's machine credential),
  gssproxy with a service for rpc.gssd (/etc/gssproxy/80-kiln-nfs-client.conf: the host's keytab for root, a
  user's keytab for the user, only for /usr/sbin/rpc.gssd) and each cluster user's keytab (``/var/lib/gssproxy/clients/UID.keytab``, from
  /var/lib/kiln/krb5-users/USER.keytab by the uid the node resolves, local or directory user alike), and rpc.gssd
  told to ask gssproxy (``use-gss-proxy=1`` in /etc/nfs.conf.d/kiln-kerberos.conf): a user's processes, batch jobs
  included, reach the share as the user with no ticket of their own and no password typed. Then the deploy waits
  until the host's key gets a ticket from the KDC (it may be converging in the same deploy), so the storage role's
  mounts find the realm working.

A user's key on a client is as safe as the client's root account: whoever is root on a node can act as any user
on the shares that node mounts, as with ``sec=sys``; what Kerberos adds is that no host outside the realm can, and
that ``krb5p`` keeps the content off the wire.
"""

from __future__ import annotations

import hashlib
import posixpath

from pyinfra.operations import server

from kiln import kerberos_keys
from kiln.inventory import kerberos
from kiln.inventory.formats import url_host
from kiln.inventory.kerberos import KDC_PORT
from kiln.shell import quote
from roles.context import NodeContext, changed_any, when_changed
from roles.operations import (answers, kept_stopped_until_configured, managed_directory, pinned_packages,
                              record_differs, recorded_commands, secret_file, service_running)
from roles.secret_files import KDC_STASH, KRB5_KEYTAB as KEYTAB, KRB5_USER_KEYTABS as USER_KEYTABS

KRB5_CONF = "/etc/krb5.conf"
RECORD = "/etc/kiln/kerberos/principals"
KADMIN_SCRIPT = "/run/kiln-kadmin-principals"
GSSPROXY_CLIENTS = "/var/lib/gssproxy/clients"
NFS_CONF = "/etc/nfs.conf.d/kiln-kerberos.conf"
GSSPROXY_CLIENT_CONF = "/etc/gssproxy/80-kiln-nfs-client.conf"
# gssproxy's service for rpc.gssd (no OS kiln serves ships one): root's mounts with the host's key, a user's access
# with the user's keytab (by uid), for rpc.gssd alone, which acts for any uid
GSSPROXY_CLIENT = f"""# Written by kiln (roles/kerberos.py): NFS credentials for rpc.gssd. Do not edit.
[service/kiln-nfs-client]
  mechs = krb5
  cred_store = keytab:/etc/krb5.keytab
  cred_store = ccache:FILE:{GSSPROXY_CLIENTS}/krb5cc_%U
  cred_store = client_keytab:{GSSPROXY_CLIENTS}/%U.keytab
  cred_usage = initiate
  allow_any_uid = yes
  trusted = yes
  euid = 0
  program = /usr/sbin/rpc.gssd
"""
KDC = {  # family -> package, unit, kdc.conf, database, stash file
    "debian": ("krb5-kdc", "krb5-kdc.service", "/etc/krb5kdc/kdc.conf", "/var/lib/krb5kdc/principal",
               KDC_STASH["debian"]),
    "redhat": ("krb5-server", "krb5kdc.service", "/var/kerberos/krb5kdc/kdc.conf", "/var/kerberos/krb5kdc/principal",
               KDC_STASH["redhat"]),
}
CLIENT_PACKAGES = {"debian": ("krb5-user", "gssproxy"), "redhat": ("krb5-workstation", "gssproxy")}
TICKET_TRIES = 300  # seconds the deploy waits for the KDC to give the host's key a ticket


def realm(ctx: NodeContext) -> str:
    return kerberos.realm(ctx.cluster.name, ctx.cluster.setting("kerberos_realm"))


def is_kdc(ctx: NodeContext) -> bool:
    kdc = kerberos.kdc(ctx.cluster.hosts)
    return kdc is not None and kdc.name == ctx.node.name


def principals_here(ctx: NodeContext) -> list[str]:
    return kerberos.host_principals(ctx.node, realm(ctx))


def in_realm(ctx: NodeContext) -> bool:
    return is_kdc(ctx) or bool(principals_here(ctx))


def install(ctx: NodeContext) -> None:
    family = ctx.platform.family
    if is_kdc(ctx):
        package, unit = KDC[family][:2]
        # Debian's kadmin.local comes with kadmind, which kiln never runs (nothing administers the realm over the
        # network: every key comes from kiln's secrets): it stays masked
        daemons = {package: unit, **({"krb5-admin-server": "krb5-admin-server.service"} if family == "debian" else {})}
        kept_stopped_until_configured(name="kerberos: the KDC kept stopped until configured", ctx=ctx, daemons=daemons)
        pinned_packages(name="kerberos: the KDC", ctx=ctx, packages=dict.fromkeys(daemons))
    if principals_here(ctx):
        pinned_packages(name="kerberos: kinit and gssproxy", ctx=ctx, packages=dict.fromkeys(CLIENT_PACKAGES[family]))


def krb5_conf(realm_name: str, kdc_address: str, nfs_server: bool = False) -> str:
    """/etc/krb5.conf; on an NFS server, the realm's host principals (its NFS clients' root) are root, as the
    export's root_squash or no_root_squash then says, as with sec=sys (no rule: they are no one)."""
    realm_pattern = realm_name.replace(".", "\\.")  # a realm is capitals, digits, '.', '-' (kiln_kerberos_realm)
    root = (f"        auth_to_local = RULE:[2:$1@$0](^host@{realm_pattern}$)s/.*/root/\n"
            "        auth_to_local = DEFAULT\n") if nfs_server else ""
    return (f"# Written by kiln (roles/kerberos.py): kiln's realm, for NFS with Kerberos. Do not edit.\n"
            "[libdefaults]\n"
            f"    default_realm = {realm_name}\n"
            "    dns_lookup_kdc = false\n"
            "    dns_lookup_realm = false\n"
            "    dns_canonicalize_hostname = false\n"
            "    rdns = false\n"
            "    udp_preference_limit = 1\n"
            f"    permitted_enctypes = {kerberos_keys.ENCTYPE}\n"
            "[realms]\n"
            f"    {realm_name} = {{\n"
            f"        kdc = {url_host(kdc_address)}:{KDC_PORT}\n"
            f"{root}"
            "    }\n")


def kdc_conf(realm_name: str, family: str) -> str:
    _, _, _, database, stash = KDC[family]
    return (f"# Written by kiln (roles/kerberos.py). Do not edit.\n"
            "[kdcdefaults]\n"
            f"    kdc_tcp_listen = {KDC_PORT}\n"
            "[realms]\n"
            f"    {realm_name} = {{\n"
            f"        database_name = {database}\n"
            f"        key_stash_file = {stash}\n"
            f"        master_key_type = {kerberos_keys.ENCTYPE}\n"
            f"        supported_enctypes = {kerberos_keys.ENCTYPE}:normal\n"
            "        max_life = 10h 0m 0s\n"
            "        max_renewable_life = 7d 0h 0m 0s\n"
            "    }\n")


def kadmin_script(keys: kerberos_keys.RealmKeys) -> str:
    """kadmin.local's input: each principal's key from its password, at key version KVNO (a new principal is
    added, an existing one's key set again; the command that does not apply fails alone)."""
    lines = []
    for principal, password in keys.passwords.items():
        lines += [f"addprinc -pw {password} {principal}", f"cpw -pw {password} {principal}",
                  f"modprinc -kvno {kerberos_keys.KVNO} {principal}"]
    return "\n".join(lines) + "\n"


def record(keys: kerberos_keys.RealmKeys) -> str:
    """The KDC's record: each principal with its password's digest (256 random bits: the digest tells nothing)."""
    return ("# Written by kiln once the KDC held these keys (roles/kerberos.py). Do not edit.\n"
            + "".join(f"{p} {hashlib.sha256(pw.encode()).hexdigest()}\n" for p, pw in sorted(keys.passwords.items())))


def principals_command(keys: kerberos_keys.RealmKeys, family: str) -> str:
    """Make the database where there is none (a random master key, kept only in the stash file), set every
    principal's key, and check each is at key version KVNO. The script file is removed whatever happens."""
    _, _, _, database, _ = KDC[family]
    script = quote(KADMIN_SCRIPT)
    checks = " && ".join(f"kadmin.local -q {quote('getprinc ' + p)} 2>/dev/null | grep -q "
                         f"{quote(f'Key: vno {kerberos_keys.KVNO}, {kerberos_keys.ENCTYPE}')}" for p in keys.passwords)
    return "; ".join([
        f"trap 'rm -f {script}' EXIT",
        f"if [ ! -e {quote(database)} ]; then master=$(head -c 48 /dev/urandom | base64 -w0); "
        f"printf '%s\\n%s\\n' \"$master\" \"$master\" | kdb5_util create -s -r {quote(keys.realm)} >/dev/null || exit 1; fi",
        f"kadmin.local < {script} >/dev/null 2>&1",
        f"{checks} || {{ echo 'kiln: the KDC did not take every principal of kiln (kadmin.local getprinc shows "
        f"which lacks key version {kerberos_keys.KVNO})' >&2; exit 1; }}",
    ])


def _kdc(ctx: NodeContext) -> None:
    family = ctx.platform.family
    _, unit, conf, _, _ = KDC[family]
    keys = ctx.secrets.kerberos
    ctx.watch_path(posixpath.dirname(conf))
    managed_directory(name="kerberos: the KDC's directory", ctx=ctx, path=posixpath.dirname(conf), user="root",
                      group="root", mode="700")
    conf_op = ctx.put(conf, kdc_conf(keys.realm, family), mode="600", name="kerberos: kdc.conf")
    content = record(keys)
    ctx.watch_path(KADMIN_SCRIPT)
    secret_file(name="kerberos: the principals' passwords for this run (in /run)", ctx=ctx, path=KADMIN_SCRIPT,
                content=kadmin_script(keys).encode(), mode="600", user="root", group="root",
                _if=record_differs(ctx, RECORD, content))
    recorded_commands(ctx, name="kerberos: the KDC's database and kiln's principals", record=RECORD, content=content,
                      commands=[principals_command(keys, family)])
    watched = ctx.watch_unit(unit)
    server.shell(name="kerberos: the KDC restarted (kdc.conf changed)", commands=[f"systemctl restart {unit}"],
                 _if=lambda: changed_any(conf_op) and ctx.snapshot.unit(watched).active == "active")
    service_running(name="kerberos: the KDC enabled and running", ctx=ctx, unit=watched)


def user_keytab(user: str) -> str:
    return f"{USER_KEYTABS}/{user}.keytab"


def _client(ctx: NodeContext, keytab_op) -> None:
    keys = ctx.secrets.kerberos
    users = kerberos.user_names(ctx.cluster.setting("teams"))
    for directory, mode in ((USER_KEYTABS, "700"), (GSSPROXY_CLIENTS, "700")):
        ctx.watch_path(directory)
        managed_directory(name=f"kerberos: {directory}", ctx=ctx, path=directory, user="root", group="root", mode=mode)
    written = [ctx.put(user_keytab(u), keys.keytab(f"{u}@{keys.realm}"), mode="600", secret=True,
                       name=f"kerberos: {u}'s keytab") for u in users]
    # by the uid this node resolves (a directory user's is the directory's): gssproxy finds a user's keytab by uid
    copies = " ".join(f"uid=$(id -u {quote(u)}) && install -m 600 -o root -g root {quote(user_keytab(u))} "
                      f"{GSSPROXY_CLIENTS}/\"$uid\".keytab || echo {quote(f'kiln: no uid for {u} on this node')} >&2;"
                      for u in users)
    server.shell(name="kerberos: each user's keytab where gssproxy finds it (by uid)", commands=[copies],
                 _if=when_changed(*written))
    service = ctx.put(GSSPROXY_CLIENT_CONF, GSSPROXY_CLIENT, mode="644", name="kerberos: gssproxy's service for rpc.gssd")
    server.shell(name="kerberos: gssproxy reads its services again (if they changed)",
                 commands=["systemctl restart gssproxy"], _if=when_changed(service))
    ctx.watch_path(NFS_CONF)
    conf_op = ctx.put(NFS_CONF, "# Written by kiln (roles/kerberos.py): rpc.gssd gets users' credentials from "
                      "gssproxy.\n[gssd]\nuse-gss-proxy=1\n", mode="644", name="kerberos: rpc.gssd asks gssproxy")
    gssd = ctx.watch_unit("rpc-gssd.service")
    server.shell(name="kerberos: rpc.gssd restarted (its keytab or configuration changed)",
                 commands=["systemctl restart rpc-gssd.service"], _if=when_changed(keytab_op, conf_op, service))
    service_running(name="kerberos: rpc.gssd running", ctx=ctx, unit=gssd, enabled=False)


def configure(ctx: NodeContext) -> None:
    if not in_realm(ctx):
        return
    kdc = kerberos.kdc(ctx.cluster.hosts)
    serves = bool(kerberos.kerberos_exports(ctx.node))
    conf = ctx.put(KRB5_CONF, krb5_conf(realm(ctx), kdc.address, nfs_server=serves), mode="644",
                   name="kerberos: /etc/krb5.conf")
    if is_kdc(ctx):
        _kdc(ctx)
    principals = principals_here(ctx)
    if not principals:
        return
    keytab_op = ctx.put(KEYTAB, ctx.secrets.kerberos.keytab(*principals), mode="600", secret=True,
                        name="kerberos: this host's keytab")
    gssproxy = ctx.watch_unit("gssproxy.service")
    # the kernel's NFS server keeps the accounts gssproxy gave each context: forgotten with the rules that made them
    flush = [f"echo $(date +%s) > /proc/net/rpc/{cache}/flush" for cache in ("auth.rpcsec.context", "auth.rpcsec.init")
             if serves]
    server.shell(name="kerberos: gssproxy restarted (the keytab or krb5.conf changed)",
                 commands=["systemctl restart gssproxy", *flush],
                 _if=lambda: changed_any(keytab_op, conf) and ctx.snapshot.unit(gssproxy).active == "active")
    service_running(name="kerberos: gssproxy enabled and running", ctx=ctx, unit=gssproxy)
    if kerberos.kerberos_mounts(ctx.node):
        _client(ctx, keytab_op)
    first = principals[0]
    server.shell(name="kerberos: this host's key gets a ticket from the KDC",
                 commands=[answers(f"the KDC ({kdc.name}) for {first}",
                                   f"kinit -k -t {KEYTAB} -c MEMORY:kiln {quote(first)}", TICKET_TRIES,
                                   "the NFS mounts with Kerberos were not tried")],
                 _if=when_changed(keytab_op))
