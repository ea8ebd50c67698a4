"""Every file holding a secret that kiln's roles may place on a host, named once here: the roles write
them, and the isolation suite (checks/isolation.py) makes sure no user can read them. A role that places a
new secret names its path here."""

from __future__ import annotations

from kiln.disk_keys import EXCHANGE, SIGNING
from kiln.inventory import kerberos
from kiln.inventory.model import Cluster
from kiln.secrets import ceph_keyring

MUNGE_KEY = "/etc/munge/munge.key"
SLURMDBD_CONF = "/etc/slurm/slurmdbd.conf"  # the database password
PROMETHEUS_PASSWORD = "/etc/prometheus/kiln-password"  # what Prometheus sends to the listeners it scrapes
MONITORING_TLS_KEY = "/etc/prometheus/kiln-tls.key"  # the key of the host's certificate for its listeners
JOB_SUMMARY_PASSWORD = "/etc/slurm/kiln-prometheus.password"  # what kiln-job-summary sends to Prometheus
REMEDIATION_KEY = "/etc/kiln/remediation/id_ed25519"  # kiln-remediate's SSH key to compute nodes
REMEDIATION_ALERTMANAGER_PASSWORD = "/etc/kiln/remediation/alertmanager.password"
REMEDIATION_BMC_PASSWORD = "/etc/kiln/remediation/bmc.password"  # the compute nodes' BMCs' (power cycles)
BEEGFS_CONNAUTH_FILE = "/etc/beegfs/connauthfile"
# the host's key for GlusterFS's TLS (roles/gluster_tls.py), beside its certificate and the CA: glusterfs reads
# them in its build's OpenSSL directory, /usr/lib/ssl for Debian's and Ubuntu's glusterfs 10 and 11 (the VM tier's
# 10.3 logs "could not load our cert at /usr/lib/ssl/glusterfs.pem" with them in /etc/ssl), /etc/ssl for the
# glusterfs 6 client of Rocky's repositories
GLUSTER_TLS_KEYS = {"debian": "/usr/lib/ssl/glusterfs.key", "redhat": "/etc/ssl/glusterfs.key"}
# tang's key directory and account per OS family (roles/disk_encryption.py), and kiln's keys in it on the
# controllers: whoever reads them unlocks every encrypted volume of the cluster
TANG = {"debian": ("/var/lib/tang", "_tang"), "redhat": ("/var/db/tang", "tang")}
TANG_KEYS = [f"{directory}/{name}" for directory, _ in TANG.values() for name in (SIGNING, EXCHANGE)]
# kiln's Kerberos realm (roles/kerberos.py): a host's keys (its NFS principal), the KDC's master key (its stash),
# and on NFS clients each user's keytab (whoever reads one acts as that user on the shares)
KRB5_KEYTAB = "/etc/krb5.keytab"
KDC_STASH = {"debian": "/etc/krb5kdc/stash", "redhat": "/var/kerberos/krb5kdc/stash"}
KRB5_USER_KEYTABS = "/var/lib/kiln/krb5-users"


def secret_files(cluster: Cluster) -> list[str]:
    """The paths, whichever hosts hold them (the suite reads those a host has)."""
    paths = [MUNGE_KEY, SLURMDBD_CONF, PROMETHEUS_PASSWORD, MONITORING_TLS_KEY, JOB_SUMMARY_PASSWORD, REMEDIATION_KEY,
             REMEDIATION_ALERTMANAGER_PASSWORD, REMEDIATION_BMC_PASSWORD, BEEGFS_CONNAUTH_FILE,
             *GLUSTER_TLS_KEYS.values(), *TANG_KEYS, KRB5_KEYTAB, *KDC_STASH.values()]
    if kerberos.nfs_clients(cluster.hosts):
        paths += [f"{KRB5_USER_KEYTABS}/{user}.keytab" for user in kerberos.user_names(cluster.setting("teams"))]
    ceph = cluster.setting("ceph")
    if ceph:
        paths.append(f"/etc/ceph/{ceph_keyring(ceph.client_name)}")
    return paths
