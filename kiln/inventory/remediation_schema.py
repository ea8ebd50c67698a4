"""kiln-remediate's settings (``kiln_remediation``): integers and a switch, each with its default."""

from __future__ import annotations

from pydantic import Field

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
