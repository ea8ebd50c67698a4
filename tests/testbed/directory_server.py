"""A real LDAP directory for the live tests of directory identities: Debian's slapd on a testbed node,
serving users and groups (RFC 2307) over StartTLS with a certificate of a CA made for the test, and
refusing any operation over TCP without TLS (``olcSecurity: ssf=1``), so a client that reads it in clear text gets
nothing. The admin password is made on the node and never leaves it (a root-only file there).

The directory is the site's, not kiln's: kiln only reads it (SSSD, roles/directory.py).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from kiln.tls import new_ca, new_host_certificate
from tests.testbed.slurm_helpers import ok, on

BASE_DN = "dc=kiln,dc=test"
ADMIN_PASSWORD = "/root/.kiln-test-ldap-admin"
TLS = "/etc/ldap/kiln-test-tls"
PACKAGES = ("slapd", "ldap-utils")


@dataclass(frozen=True)
class Person:
    name: str
    uid: int
    team: str


def _ldif(teams: dict[str, int], people: list[Person]) -> str:
    out = [f"dn: ou=people,{BASE_DN}\nobjectClass: organizationalUnit\nou: people\n",
           f"dn: ou=groups,{BASE_DN}\nobjectClass: organizationalUnit\nou: groups\n"]
    for p in people:
        out.append(f"dn: uid={p.name},ou=people,{BASE_DN}\nobjectClass: inetOrgPerson\nobjectClass: posixAccount\n"
                   f"uid: {p.name}\ncn: {p.name}\nsn: {p.name}\nuidNumber: {p.uid}\ngidNumber: {p.uid}\n"
                   f"homeDirectory: /home/{p.name}\nloginShell: /bin/bash\n")
        out.append(f"dn: cn={p.name},ou=groups,{BASE_DN}\nobjectClass: posixGroup\ncn: {p.name}\ngidNumber: {p.uid}\n")
    for team, gid in teams.items():
        members = "".join(f"memberUid: {p.name}\n" for p in people if p.team == team)
        out.append(f"dn: cn={team},ou=groups,{BASE_DN}\nobjectClass: posixGroup\ncn: {team}\ngidNumber: {gid}\n{members}")
    return "\n".join(out)


def serve(tb, node: str, address: str, teams: dict[str, int], people: list[Person], ca_out: Path) -> None:
    """slapd on ``node`` (reached by clients at ``address``) with ``people`` in ``teams`` (name -> gid); the CA's
    certificate written to ``ca_out`` for the inventory."""
    ca_cert, ca_key = new_ca("kiln-test-directory")
    server = new_host_certificate(ca_cert, ca_key, node, [address], 30)
    ca_out.write_bytes(ca_cert)
    preseed = "\n".join(f"slapd {key}" for key in (
        f"slapd/domain string {BASE_DN.replace('dc=', '').replace(',', '.')}", "shared/organization string kiln-test",
        "slapd/no_configuration boolean false", "slapd/purge_database boolean true",
        "slapd/move_old_database boolean true", "slapd/password1 password PASSWORD",
        "slapd/password2 password PASSWORD"))
    # the password: made here on the node, into the preseed and a root-only file; never printed
    ok(tb, node, "set -e; umask 077; head -c 24 /dev/urandom | base64 | tr -d '\\n/+=' > " + ADMIN_PASSWORD + "; "
       f"sed \"s/PASSWORD/$(cat {ADMIN_PASSWORD})/\" <<'EOF' | debconf-set-selections\n{preseed}\nEOF\n"
       "apt-get update -q >/dev/null; "
       f"DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends {' '.join(PACKAGES)} >/dev/null",
       timeout=600)
    files = {f"{TLS}/ca.crt": ca_cert, f"{TLS}/server.crt": server.cert, f"{TLS}/server.key": server.key}
    ok(tb, node, f"install -d -o openldap -g openldap -m 750 {TLS}")
    for path, data in files.items():
        ok(tb, node, f"umask 077; printf %s {shlex.quote(data.decode())} > {path}; chown openldap:openldap {path}")
    ok(tb, node, f"ldapadd -x -H ldapi:/// -D cn=admin,{BASE_DN} -y {ADMIN_PASSWORD} <<'EOF' >/dev/null\n"
       f"{_ldif(teams, people)}EOF")
    # TLS, then no operation without a security strength factor: over TCP that is TLS (ldapi:// has its own)
    tls = (f"dn: cn=config\nchangetype: modify\nreplace: olcTLSCACertificateFile\nolcTLSCACertificateFile: {TLS}/ca.crt\n-\n"
           f"replace: olcTLSCertificateFile\nolcTLSCertificateFile: {TLS}/server.crt\n-\n"
           f"replace: olcTLSCertificateKeyFile\nolcTLSCertificateKeyFile: {TLS}/server.key\n-\n"
           "replace: olcSecurity\nolcSecurity: ssf=1\n")
    ok(tb, node, f"ldapmodify -Q -Y EXTERNAL -H ldapi:/// <<'EOF' >/dev/null\n{tls}EOF")


def stop(tb, node: str) -> None:
    """slapd and its data gone from ``node`` (what serve installed), whatever state it was left in."""
    on(tb, node, f"DEBIAN_FRONTEND=noninteractive apt-get purge -y -q {' '.join(PACKAGES)} >/dev/null 2>&1; "
       f"rm -rf /var/lib/ldap /etc/ldap/slapd.d {TLS} {ADMIN_PASSWORD}; echo PURGE | debconf-communicate slapd >/dev/null 2>&1; "
       "true", timeout=300)
