"""What Slurm lets one user see of another, and how long accounting keeps what it records
(``kiln_slurm_private_data``, ``kiln_slurm_store_job_scripts``, ``kiln_slurm_accounting_retention``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from kiln.inventory.strict import Strict

# slurm.conf(5) and slurmdbd.conf(5) PrivateData: what a user sees only of their own (operators, Slurm's
# administrators, root and SlurmUser see all; an account's coordinator sees the account's).
PRIVATE_DATA = ("accounts", "cloud", "events", "jobs", "nodes", "partitions", "reservations", "usage", "users")
PrivateDataKind = Literal[PRIVATE_DATA]
DEFAULT_PRIVATE_DATA = ["accounts", "jobs", "usage", "users"]

# slurmdbd.conf(5) Purge*After: a number of months, or of hours or days with that unit behind it; records
# older are deleted at the start of each such unit (ArchiveJobs and the like stay off: purged is gone).
PurgeAge = Annotated[str, Field(pattern=r"^[1-9][0-9]{0,5}(hours|days|months)$")]


class AccountingRetention(Strict):
    """How long slurmdbd keeps each kind of record before it purges it (``Purge<Kind>After``); a kind
    set to null is kept for ever. Jobs hold their stored scripts and environments: both go with them."""

    jobs: PurgeAge | None = Field("12months", description="jobs, with their stored scripts and environments "
                                  "(PurgeJobAfter)")
    steps: PurgeAge | None = Field("12months", description="job steps (PurgeStepAfter)")
    events: PurgeAge | None = Field("12months", description="node and cluster events: drains, downs "
                                    "(PurgeEventAfter)")
    reservations: PurgeAge | None = Field("12months", description="reservations (PurgeResvAfter)")
    suspends: PurgeAge | None = Field("12months", description="job suspensions (PurgeSuspendAfter)")
    transactions: PurgeAge | None = Field("12months", description="sacctmgr's changes to accounts, users and "
                                          "QoS (PurgeTXNAfter)")
    usage: PurgeAge | None = Field("24months", description="hourly, daily and monthly usage rollups that "
                                   "sreport and fair share read (PurgeUsageAfter)")

    def slurmdbd_lines(self) -> list[str]:
        """``Purge<Kind>After=<age>`` for each kind that is purged, in slurmdbd.conf's names."""
        names = {"jobs": "Job", "steps": "Step", "events": "Event", "reservations": "Resv", "suspends": "Suspend",
                 "transactions": "TXN", "usage": "Usage"}
        return [f"Purge{names[kind]}After={age}" for kind, age in self.model_dump().items() if age]
