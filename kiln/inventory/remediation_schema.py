"""kiln-remediate's settings (``kiln_remediation``): integers and a switch, each with its default; and a
compute node's BMC (``kiln_bmc``), through which it power-cycles a node that answers nothing."""

from __future__ import annotations

from typing import Annotated, Literal

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
    answers neither Slurm nor SSH through: over Redfish (HTTPS, the default), or IPMI v2.0 (RMCP+,
    ipmitool) where the BMC has no Redfish. A Redfish BMC's certificate is trusted by a CA file or pinned by
    its SHA-256 fingerprint (one of them: there is no "do not verify"); IPMI has no certificate (RMCP+
    authenticates both ends by the password). The password is kiln's secret ``bmc.password`` (one for the
    cluster's BMCs, never in the inventory). The BMC's network should be the management network, reached
    from the controller."""

    protocol: Literal["redfish", "ipmi"] = Field("redfish", description="redfish, or ipmi for a BMC without "
                                                  "Redfish (kiln installs ipmitool on the controller)")
    host: Address = Field(description="the BMC's address or name on the management network")
    port: int | None = Field(None, ge=1, le=65535, description="its HTTPS port (Redfish, default 443) or UDP "
                             "port (IPMI, default 623)")
    user: Token = Field(description="the BMC account kiln-remediate uses (an operator's privilege is enough "
                        "to reset the system)")
    fingerprint: Annotated[str, Field(pattern=FINGERPRINT)] | None = Field(
        None, description="Redfish: its certificate's SHA-256 fingerprint as `openssl x509 -noout -fingerprint "
        "-sha256` prints it, lower case (ab:cd:...)")
    ca_file: FilePath | None = Field(None, description="Redfish: a PEM file of the CA that signed its "
                                     "certificate, relative to the inventory directory; keep it outside that "
                                     "directory (e.g. ../pki/bmc-ca.pem): Ansible reads every file inside as an "
                                     "inventory source")
    system: Annotated[str, Field(pattern=REDFISH_SYSTEM)] | None = Field(
        None, description="Redfish: the node's system on a BMC that serves several (/redfish/v1/Systems/ID); "
        "default: the BMC's one system")
    cipher_suite: Literal[3, 17] | None = Field(None, description="IPMI: the RMCP+ cipher suite (17: "
                                                "HMAC-SHA256 and AES-128, the default; 3: HMAC-SHA1 and AES-128, "
                                                "for older BMCs)")

    @field_validator("fingerprint", mode="before")
    @classmethod
    def _lower(cls, v):
        return v.lower() if isinstance(v, str) else v

    @model_validator(mode="after")
    def _one_trust(self) -> "Bmc":
        if self.protocol == "ipmi":
            given = [k for k in ("fingerprint", "ca_file", "system") if getattr(self, k) is not None]
            if given:
                raise ValueError(f"{', '.join(given)}: Redfish's; an IPMI BMC has no certificate or system path")
        elif self.cipher_suite is not None:
            raise ValueError("cipher_suite: IPMI's; a Redfish BMC speaks HTTPS")
        elif (self.fingerprint is None) == (self.ca_file is None):
            raise ValueError("give the BMC certificate's fingerprint or its ca_file (one of them)")
        return self

    @property
    def port_number(self) -> int:
        return self.port or (623 if self.protocol == "ipmi" else 443)

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port_number}" if ":" in self.host else f"{self.host}:{self.port_number}"
