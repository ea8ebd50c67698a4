"""The nodes' own firewalls (``kiln_firewall``): what may reach each node from where, by role.

Off unless ``enabled``. When on, every kiln host drops what its role does not need (nftables, table
``inet kiln``, input only; roles/firewall_rules.py says what each role lets in and from where)."""

from __future__ import annotations

from pydantic import Field, model_validator

from kiln.inventory.formats import Network
from kiln.inventory.strict import Strict

# slurm.conf's SrunPortRange while the firewall is on: srun and salloc listen there for slurmctld and the
# job's slurmd, so the compute and controller hosts may reach those ports on every host that runs srun.
SRUN_PORTS = (60001, 63000)


class Firewall(Strict):
    """Default-deny host firewalls by role (NIST SP 800-223's zones: access, management, computing, data
    storage). A change is applied with a timed rollback: the node puts its earlier rules back by itself
    unless kiln deploy, on a new SSH connection after the change, confirms it."""

    enabled: bool = Field(False, description="write and load the firewall on every kiln host")
    admin_networks: list[Network] = Field([], max_length=256, description="where operators and kiln itself "
                                          "connect from: SSH to every host, Prometheus and Alertmanager's web "
                                          "ports (required when enabled; e.g. the bastion's address as /32)")
    access_networks: list[Network] = Field(["0.0.0.0/0", "::/0"], max_length=256, description="where users "
                                           "connect from: SSH to login hosts only")
    confirm_seconds: int = Field(120, ge=30, le=3600, description="a changed firewall that kiln deploy has not "
                                 "confirmed over a new SSH connection within this many seconds is put back "
                                 "by the node itself")
    log_dropped: bool = Field(True, description="log dropped connections to the kernel log, at most 5 a minute "
                              "(prefix 'kiln-firewall drop: ')")

    @model_validator(mode="after")
    def _admin_networks_when_enabled(self) -> "Firewall":
        if self.enabled and not self.admin_networks:
            raise ValueError("admin_networks is required when the firewall is enabled: without it no operator, "
                             "and not kiln, could reach a node by SSH")
        return self
