"""Validation of the settings of encryption in transit against the rest of the inventory: the certificates of
the cluster CA (kiln/tls.py) and Slurm's own TLS."""

from __future__ import annotations

from typing import Any

from kiln.inventory.loader import RawInventory
from kiln.patch.slurm_versions import RELEASES, release_of

SLURM_TLS_FROM = "25.05"  # the first Slurm release with TLS between its daemons and clients (tls/s2n)


def check_tls(raw: RawInventory, values: dict[str, Any], versions: dict[str, str], add: Any) -> None:
    days, renew = values.get("kiln_tls_certificate_days", 365), values.get("kiln_tls_renew_days", 30)
    if renew >= days:
        file, line = raw.origin("kiln_tls_renew_days", default="group_vars/all/")
        add(file, "kiln_tls_renew_days", f"{renew} is not less than kiln_tls_certificate_days ({days}): every deploy "
            "would make every certificate anew; renew fewer days ahead than a certificate lives", line)
    if values.get("kiln_log_shipping", True) and not values.get("kiln_monitoring_tls", True) and raw.groups.get("monitoring"):
        file, line = raw.origin("kiln_monitoring_tls", default="group_vars/all/")
        add(file, "kiln_monitoring_tls", "is off, but kiln_log_shipping (on by default) sends every journal to the log "
            "host over HTTPS with the hosts' certificates of the cluster CA, which kiln_monitoring_tls places: turn "
            "kiln_log_shipping off too, or kiln_monitoring_tls on", line)
    if not values.get("kiln_slurm_tls"):
        return
    file, line = raw.origin("kiln_slurm_tls", default="group_vars/all/")
    slurm = versions.get("slurm") or ""
    release = release_of(slurm)
    if release is None or release not in RELEASES or RELEASES.index(release) < RELEASES.index(SLURM_TLS_FROM):
        add(file, "kiln_slurm_tls", f"Slurm's own TLS (TLSType=tls/s2n) needs Slurm {SLURM_TLS_FROM} or later, and "
            f"this cluster runs {slurm or 'no Slurm pin'}" + (f" (Slurm {release})" if release else "") + ": turn "
            "kiln_slurm_tls off (munge still signs every Slurm message; their content crosses the network "
            "readable, so keep Slurm's traffic on the cluster network) or move the cluster to Slurm "
            f"{SLURM_TLS_FROM}", line)
    else:
        add(file, "kiln_slurm_tls", f"Slurm {release} has TLS (tls/s2n), but kiln does not configure it yet (a "
            "certificate for slurmctld, slurmdbd and each slurmd from the cluster CA): turn kiln_slurm_tls off", line)
