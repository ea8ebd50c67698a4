"""kiln-remediate's settings (``kiln_remediation``): integers and a switch, each with its default; and a
compute node's BMC (``kiln_bmc``), through which it power-cycles a node that answers nothing."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator, model_validator

from kiln.inventory.formats import Address, FilePath, Token

from kiln.inventory.strict import Strict


class Remediation(Strict):
    """Automatic repair of nodes kiln (or Slurm itself) drained: kiln-remediate on the controller
    (checks/remediation.py). Off unless ``enabled``; every limit has a default."""

    enabled: bool = Field(False, description="run kiln-remediate on the controller")
    interval_seconds: int = Field(30, ge=5, le=3600, description="seconds between two looks at the cluster")
    settle_seconds: int = Field(60, ge=0, le=3600, description="a new fault waits this long before its first "
                                "repair, so an outage that takes many nodes at once opens the circuit breaker "
                                "before any of them is touched")
    budget_per_kind: int = Field(2, ge=0, le=100, description="repairs of one kind (a restart, a GPU reset, a "
                                 "reboot) one node may have within budget_hours; then it is escalated")
    budget_hours: int = Field(24, ge=1, le=24 * 90, description="the window of budget_per_kind")
    repeat_offender_faults: int = Field(2, ge=1, le=100, description="a node repaired and returned this many "
                                        "times within repeat_offender_days is escalated at its next fault")
    repeat_offender_days: int = Field(7, ge=1, le=365, description="the window of repeat_offender_faults")
    breaker_percent: int = Field(50, ge=1, le=100, description="more than this share of compute nodes failing "
                                 "within breaker_minutes stops all automatic repair (an outage is no node fault) "
                                 "until kiln remediate --reset-breaker")
    breaker_minutes: int = Field(10, ge=1, le=24 * 60, description="the window of breaker_percent")
    reboot_timeout_seconds: int = Field(900, ge=60, le=7200, description="a node not back this long after its "
                                        "reboot is escalated")


FINGERPRINT = r"^[0-9a-f]{2}(:[0-9a-f]{2}){31}$"
REDFISH_SYSTEM = r"^/redfish/v1/Systems/[A-Za-z0-9._~-]{1,128}$"


class Bmc(Strict):
    """A compute node's BMC (``kiln_bmc``, a host variable): what kiln-remediate power-cycles a node that
    answers neither Slurm nor SSH through, over Redfish (HTTPS). Its certificate is trusted by a CA file or
    pinned by its SHA-256 fingerprint (one of them: there is no "do not verify"); its password is kiln's
    secret ``bmc.password`` (one for the cluster's BMCs, never in the inventory). The BMC's network should
    be the management network, reached from the controller."""

    host: Address = Field(description="the BMC's address or name on the management network")
    port: int = Field(443, ge=1, le=65535, description="its HTTPS port")
    user: Token = Field(description="the BMC account kiln-remediate uses (an operator's privilege is enough "
                        "to reset the system)")
    fingerprint: Annotated[str, Field(pattern=FINGERPRINT)] | None = Field(
        None, description="its certificate's SHA-256 fingerprint as `openssl x509 -noout -fingerprint -sha256` "
        "prints it, lower case (ab:cd:...)")
    ca_file: FilePath | None = Field(None, description="a PEM file of the CA that signed its certificate, "
                                     "relative to the inventory directory; keep it outside that directory (e.g. ../pki/bmc-ca.pem): Ansible "
                                     "reads every file inside as an inventory source")
    system: Annotated[str, Field(pattern=REDFISH_SYSTEM)] | None = Field(
        None, description="the node's system on a BMC that serves several (/redfish/v1/Systems/ID); default: "
        "the BMC's one system")

    @field_validator("fingerprint", mode="before")
    @classmethod
    def _lower(cls, v):
        return v.lower() if isinstance(v, str) else v

    @model_validator(mode="after")
    def _one_trust(self) -> "Bmc":
        if (self.fingerprint is None) == (self.ca_file is None):
            raise ValueError("give the BMC certificate's fingerprint or its ca_file (one of them)")
        return self

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
