"""Users and groups from an LDAP directory: SSSD on every node, for the teams marked ``directory: true``.

Part of the base role, and only where the inventory sets ``kiln_directory`` (kiln/inventory/directory_schema.py);
without it nothing here runs, and an SSSD the site runs for itself is left alone.

+ install: SSSD's LDAP provider and its NSS and PAM modules (Debian: ``sssd-ldap``, ``libnss-sss``,
  ``libpam-sss``; Rocky: ``sssd-ldap``, ``sssd-client``). sssd stays masked until kiln has written its
  configuration (the package's own start would run it on no configuration).
+ configure: ``CA_FILE`` (the certificates of the inventory's ``ca_file``) and ``SSSD_CONF`` (0600, root: SSSD
  refuses any other): one domain, ``id_provider = ldap`` with RFC 2307 groups, StartTLS on ``ldap://``
  URIs, the server's certificate checked (``ldap_tls_reqcert = demand``), ids below ``min_id`` ignored
  (a directory entry can never be root or a service account), no enumeration, no cached passwords;
  ``access_provider = permit``: who logs in where stays pam_access's (roles/login_access.py) and
  pam_slurm_adopt's. NSS asks SSSD after the local files for users and groups (``passwd`` and ``group``
  lines of /etc/nsswitch.conf end in ``sss``; a line without it is replaced by ``NSSWITCH_LINES``).
  Where users get a shell (login hosts, compute nodes), sshd's session stack makes a directory user's home
  at the first login (pam_mkhomedir, 0700). A changed file restarts a running sssd and expires its cache.

Every node asks the same directory, so a user's uid and groups agree on every node and on the NFS server
(SYSTEM_DIRECTORY in the system suite checks each node's answer, checks/directory.py).
"""

from __future__ import annotations

from pyinfra.operations import server

from roles import login_access
from roles.context import NodeContext, render
from roles.operations import changed_any, kept_stopped_until_configured, line_present, pinned_packages, service_restarted, service_running

SSSD_CONF = "/etc/sssd/sssd.conf"
CA_FILE = "/etc/sssd/kiln-directory-ca.pem"
UNIT = "sssd.service"
NSSWITCH = "/etc/nsswitch.conf"
# (database, the line kiln writes when the node's own lacks sss, the regex of a line that has it)
NSSWITCH_LINES = (("passwd", "passwd:         files systemd sss"), ("group", "group:          files systemd sss"))
MKHOMEDIR = "session    optional     pam_mkhomedir.so skel=/etc/skel umask=0077"
MKHOMEDIR_REGEX = r"^session\s+optional\s+pam_mkhomedir\.so(\s|$)"


def packages(ctx: NodeContext) -> list[str]:
    return ["sssd-ldap", "libnss-sss", "libpam-sss"] if ctx.platform.uses_apt else ["sssd-ldap", "sssd-client"]


def sssd_conf(directory) -> str:
    return render("base/sssd.conf.j2", directory=directory, ca_file=CA_FILE)


def install(ctx: NodeContext) -> None:
    if ctx.cluster.setting("directory") is None:
        return
    kept_stopped_until_configured(name="base: sssd kept stopped until kiln configures it", ctx=ctx,
                                  daemons={"sssd-common": UNIT})
    pinned_packages(name="base: SSSD (users and groups from the directory)", ctx=ctx,
                    packages={name: None for name in packages(ctx)})


def configure(ctx: NodeContext) -> None:
    directory = ctx.cluster.setting("directory")
    if directory is None:
        return
    unit = ctx.watch_unit(UNIT)
    written = [ctx.put(CA_FILE, directory.ca_certificates(ctx.cluster.path), mode="644", name="base: the directory's CA"),
               ctx.put(SSSD_CONF, sssd_conf(directory), mode="600", name="base: SSSD reads the directory")]
    for database, line in NSSWITCH_LINES:
        line_present(name=f"base: NSS asks SSSD for {database} entries", ctx=ctx, path=NSSWITCH, line=line,
                     index=ctx.watch_line(NSSWITCH, rf"^{database}:.*\ssss(\s|$)"), replace_regex=rf"^{database}:")
    if login_access.users_shell_here(ctx.cluster, ctx.node):
        pam = ctx.platform.pam_sshd
        line_present(name="base: a directory user's home made at the first login", ctx=ctx, path=pam, line=MKHOMEDIR,
                     index=ctx.watch_line(pam, MKHOMEDIR_REGEX))
    started = service_running(name="base: sssd running", ctx=ctx, unit=unit)
    service_restarted(name="base: restart sssd (if its configuration changed)", unit=unit,
                      _if=lambda: changed_any(*written) and not changed_any(started))
    # entries cached under the old configuration (another base, another server) are not served again
    server.shell(name="base: expire SSSD's cache (if its configuration changed)", commands=["sss_cache -E"],
                 _if=lambda: changed_any(*written) and not changed_any(started))
