"""The cluster's secrets: the munge key and the slurmdbd database password, which kiln generates, and the
secrets a site's own services hold (``site_secrets``: BeeGFS's connAuthFile, a CephX keyring), which kiln
never makes up: it reads them from the same directory, and refuses to start without them.

They live in ``<kiln_secrets_dir>/<cluster name>/`` (default ``secrets/`` beside the inventory
directory), the directory 0700 and each file 0600, generated on first use and reused after. kiln
refuses a secrets directory that git would commit, one that is a symbolic link, belongs to another
user or is writable by others (whoever can write it chooses the cluster's munge key), and reads each
file without following links. It never prints a secret: deploy output, diffs and logs show
``********`` instead.
"""

from __future__ import annotations

import os
import secrets as random
import stat
import subprocess
from pathlib import Path

from kiln import disk_keys, kerberos_keys, tls
from kiln.inventory import encryption, gluster, kerberos
from kiln.inventory.model import Cluster, Secrets

MUNGE_KEY = "munge.key"
DBD_PASSWORD = "slurmdbd.password"
MONITORING_PASSWORD = "monitoring.password"
REMEDIATION_KEY = "remediation_ed25519"  # kiln-remediate's SSH key (the controller to the compute nodes)
BEEGFS_CONNAUTH = "beegfs-connauth"
BMC_PASSWORD = "bmc.password"  # the compute nodes' BMC account's (kiln_bmc), for kiln-remediate's power cycle
IPMI_PASSWORD_MAX = 20  # bytes: IPMI v2.0's password field (RMCP+), ipmitool refuses longer ones


class SecretsError(Exception):
    pass


def site_secrets(cluster: Cluster) -> dict[str, str]:
    """File name -> what it is and where it comes from, for each secret the cluster's filesystems need."""
    types = {m.type for h in cluster.hosts.values() for m in h.storage_mounts}
    needed = {}
    beegfs, ceph = cluster.setting("beegfs"), cluster.setting("ceph")
    if "beegfs" in types and beegfs is not None and beegfs.connauth:
        needed[BEEGFS_CONNAUTH] = "BeeGFS's connAuthFile: copy it from the BeeGFS servers"
    if "cephfs" in types and ceph is not None:
        needed[ceph_keyring(ceph.client_name)] = (f"the keyring of CephX user client.{ceph.client_name}: "
                                                   f"ceph auth get client.{ceph.client_name} on the Ceph cluster")
    if cluster.setting("remediation").enabled and any(h.settings.get("kiln_bmc") for h in cluster.compute):
        needed[BMC_PASSWORD] = ("the password of the BMC account kiln_bmc names (user), on its first line: "
                                "from whoever runs the BMCs")
    return needed


def ceph_keyring(client_name: str) -> str:
    return f"ceph.client.{client_name}.keyring"


def _site_files(cluster: Cluster, path: Path, create: bool) -> dict[str, bytes]:
    files = {}
    for name, what in site_secrets(cluster).items():
        f = path / name
        if not f.exists():
            if not create:  # a dry run shows the change; the real run needs the file
                files[name] = random.token_bytes(32)
                continue
            raise SecretsError(f"{f} is missing: {what}, and put it there (mode 0600). kiln never makes it up; "
                               "nothing was changed on any node")
        _owned_and_private(f, "secret file")
        try:
            files[name] = _read_private(f)
        except OSError as e:
            raise SecretsError(f"cannot read {f}: {e.strerror}") from None
        if not files[name].strip():
            raise SecretsError(f"{f} is empty: {what}")
        if name == BMC_PASSWORD and len(files[name].splitlines()[0]) > IPMI_PASSWORD_MAX and \
                any(h.settings.get("kiln_bmc") and h.settings["kiln_bmc"].protocol == "ipmi" for h in cluster.compute):
            raise SecretsError(f"{f}: its first line is longer than {IPMI_PASSWORD_MAX} bytes, the most IPMI v2.0 takes "
                               "(a kiln_bmc has protocol: ipmi); give that BMC account a shorter password. Nothing was "
                               "changed on any node")
    return files


def secrets_path(cluster: Cluster) -> Path:
    return cluster.secrets_dir / cluster.name


def _tracked_by_git(path: Path) -> bool:
    """True when ``path`` is inside a git work tree and not ignored there."""
    probe = path if path.exists() else path.parent
    while not probe.exists():
        probe = probe.parent
    try:
        inside = subprocess.run(["git", "-C", str(probe), "rev-parse", "--is-inside-work-tree"],
                                capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        return False
    ignored = subprocess.run(["git", "-C", str(probe), "check-ignore", "-q", str(path / MUNGE_KEY)],
                             capture_output=True, timeout=10)
    return ignored.returncode != 0


def write_new_private(path: Path, data: bytes) -> None:
    """A new file, 0600 from its creation, never through a link (fails if it exists)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _owned_and_private(path: Path, what: str) -> None:
    """``path`` is no link, belongs to the user running kiln, and no one else may write it."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        raise SecretsError(f"{what} {path} is a symbolic link: kiln keeps secrets only in a real directory of "
                           "the user running it; replace the link with the directory")
    if info.st_uid != os.geteuid():
        raise SecretsError(f"{what} {path} belongs to uid {info.st_uid}, not to the user running kiln "
                           f"(uid {os.geteuid()}): chown it, or run kiln as its owner")
    if info.st_mode & 0o022:
        raise SecretsError(f"{what} {path} is writable by others than its owner "
                           f"(mode {info.st_mode & 0o777:o}): anyone who can write it chooses the cluster's "
                           f"secrets; chmod go-w {path}, and check its content")


def _read_private(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        return f.read(1 << 20)


def monitoring_password(cluster: Cluster) -> str:
    """The password of the cluster's monitoring listeners (user kiln), for reading Prometheus and
    Alertmanager from the operator's machine; ``SecretsError`` when no deploy has made it yet."""
    path = secrets_path(cluster) / MONITORING_PASSWORD
    if not path.is_file():
        raise SecretsError(f"{path} does not exist: run kiln deploy first (it makes the password)")
    _owned_and_private(path, "secret file")
    return _read_private(path).decode().strip()


def load_or_create(cluster: Cluster, create: bool = True) -> Secrets:
    """The cluster's secrets, generated and kept when missing; with ``create=False`` (dry runs) missing
    secrets are made up in memory and never written. ``SecretsError`` says what to fix."""
    path = secrets_path(cluster)
    if _tracked_by_git(path):
        raise SecretsError(f"secrets directory {path} is inside a git work tree and not ignored: add it to "
                           ".gitignore or set kiln_secrets_dir to a path outside the repository")
    _owned_and_private(cluster.secrets_dir, "secrets directory")
    _owned_and_private(path, "secrets directory")
    if not path.exists():
        if not create:
            # A dry run on a new cluster: show the changes with secrets that are never written.
            return Secrets(munge_key=random.token_bytes(1024), dbd_password=random.token_urlsafe(32),
                           site=_site_files(cluster, path, create=False),
                           monitoring_password=random.token_urlsafe(32),
                           remediation_key=new_ssh_key() if cluster.setting("remediation").enabled else b"",
                           tls=_cluster_tls(cluster, path, create=False), disks=_disk_keys(cluster, path, False),
                           kerberos=_realm_keys(cluster, path, False))
        path.mkdir(parents=True, mode=0o700)
    os.chmod(path, 0o700)
    key_file, password_file, monitoring_file = path / MUNGE_KEY, path / DBD_PASSWORD, path / MONITORING_PASSWORD
    if create and not key_file.exists():
        write_new_private(key_file, random.token_bytes(1024))
    # the monitoring password only where kiln deploys monitoring (an inventory with a monitoring group)
    for f in (password_file, monitoring_file) if cluster.monitored else (password_file,):
        if create and not f.exists():
            write_new_private(f, random.token_urlsafe(32).encode())
    for f in (key_file, password_file, monitoring_file):
        _owned_and_private(f, "secret file")
    try:
        # a dry run's missing ones made up, never written: the directory may hold only what a site placed in
        # it before the first deploy (a BMC password, BeeGFS's connAuthFile)
        key = _read_private(key_file) if key_file.exists() else random.token_bytes(1024)
        password = (_read_private(password_file).decode().strip() if password_file.exists()
                    else random.token_urlsafe(32))
        monitoring = (_read_private(monitoring_file).decode().strip() if monitoring_file.exists()
                      else random.token_urlsafe(32) if cluster.monitored else "")
    except OSError as e:
        raise SecretsError(f"cannot read the secrets of cluster {cluster.name!r} in {path}: {e.strerror}") from None
    if len(key) < 32:
        raise SecretsError(f"{key_file} holds {len(key)} bytes: a munge key needs at least 32 (delete it to regenerate)")
    for f, secret in ((password_file, password), (monitoring_file, monitoring)):
        if f == monitoring_file and not cluster.monitored:
            continue
        if not secret or any(c in secret for c in "'\"\\$` \n:"):
            raise SecretsError(f"{f} is empty or has quotes, spaces, ':' or '$': delete it to regenerate")
    for f in (key_file, password_file, monitoring_file):
        if f.exists() and f.stat().st_mode & 0o077:
            os.chmod(f, 0o600)
    return Secrets(munge_key=key, dbd_password=password, site=_site_files(cluster, path, create),
                   monitoring_password=monitoring, remediation_key=_remediation_key(cluster, path, create),
                   tls=_cluster_tls(cluster, path, create), disks=_disk_keys(cluster, path, create),
                   kerberos=_realm_keys(cluster, path, create))


def _disk_keys(cluster: Cluster, path: Path, create: bool) -> disk_keys.DiskKeys | None:
    """Tang's keys and the recovery passphrases (kiln/disk_keys.py), where any host has an encrypted volume."""
    volumes = [(h.name, v.name) for h in encryption.encrypting_hosts(cluster.hosts) for v in h.setting("encrypted_volumes")]

    def read(f: Path) -> bytes:
        _owned_and_private(f.parent, "secrets directory")
        _owned_and_private(f, "secret file")
        return _read_private(f)

    try:
        return disk_keys.disk_keys(path, volumes, read, write_new_private, create)
    except disk_keys.DiskKeysError as e:
        raise SecretsError(f"{e}; nothing was changed on any node") from None


def realm(cluster: Cluster) -> str:
    """The realm of kiln's KDC (kiln/inventory/kerberos.py)."""
    return kerberos.realm(cluster.name, cluster.setting("kerberos_realm"))


def _realm_keys(cluster: Cluster, path: Path, create: bool) -> kerberos_keys.RealmKeys | None:
    """A password for each principal of kiln's realm (kiln/kerberos_keys.py), where NFS uses Kerberos."""
    principals = kerberos.principals(cluster.hosts, cluster.setting("teams"), realm(cluster))

    def read(f: Path) -> bytes:
        _owned_and_private(f.parent, "secrets directory")
        _owned_and_private(f, "secret file")
        return _read_private(f)

    try:
        return kerberos_keys.realm_keys(path, realm(cluster), principals, read, write_new_private, create)
    except kerberos_keys.KerberosKeysError as e:
        raise SecretsError(f"{e}; nothing was changed on any node") from None


def serves_tls(cluster: Cluster) -> bool:
    """Whether kiln's monitoring listeners serve HTTPS with the cluster CA's certificates."""
    return cluster.monitored and bool(cluster.setting("monitoring_tls"))


def _cluster_tls(cluster: Cluster, path: Path, create: bool) -> tls.ClusterTls | None:
    """The CA and every host's certificate (kiln/tls.py) where the monitoring listeners or GlusterFS serve TLS."""
    if not serves_tls(cluster) and not gluster_tls_hosts(cluster):
        return None
    try:
        return tls.cluster_tls(cluster.name, path, {h.name: [h.address] for h in cluster.hosts.values()},
                               cluster.setting("tls_certificate_days"), cluster.setting("tls_renew_days"), create)
    except tls.TlsError as e:
        raise SecretsError(f"{e}; nothing was changed on any node") from None


def gluster_tls_hosts(cluster: Cluster) -> list[str]:
    """The hosts that speak TLS to the GlusterFS volumes kiln serves (kiln/inventory/gluster.py)."""
    return gluster.tls_hosts(cluster.hosts, bool(cluster.setting("storage_gluster_tls")))


def ca_file(cluster: Cluster) -> Path | None:
    """The CA certificate the operator's side trusts for the cluster's listeners (None: they speak plain HTTP)."""
    return tls.ca_file(secrets_path(cluster)) if serves_tls(cluster) else None


def new_ssh_key() -> bytes:
    """A new Ed25519 key in OpenSSH's private key format."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    return Ed25519PrivateKey.generate().private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                                      serialization.NoEncryption())


def public_ssh_key(private: bytes) -> str:
    """``ssh-ed25519 AAAA...`` of an OpenSSH private key."""
    from cryptography.hazmat.primitives import serialization
    key = serialization.load_ssh_private_key(private, password=None)
    return key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


def _remediation_key(cluster: Cluster, path: Path, create: bool) -> bytes:
    """kiln-remediate's key where remediation is enabled: made once, kept in the secrets directory."""
    if not cluster.setting("remediation").enabled:
        return b""
    f = path / REMEDIATION_KEY
    if not f.exists():
        if not create:
            return new_ssh_key()  # a dry run's: never written
        write_new_private(f, new_ssh_key())
    _owned_and_private(f, "secret file")
    data = _read_private(f)
    try:
        public_ssh_key(data)
    except (ValueError, TypeError):
        raise SecretsError(f"{f} is not an OpenSSH private key: delete it to regenerate") from None
    return data
