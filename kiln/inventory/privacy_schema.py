"""What Slurm lets one user see of another, what one job sees of another's files, how long accounting keeps
what it records, how much of a login host one user may take, and who may act as root
(``kiln_slurm_private_data``, ``kiln_slurm_job_tmp``, ``kiln_slurm_store_job_scripts``,
``kiln_slurm_accounting_retention``, ``kiln_login_user_limits``, ``kiln_operators``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from kiln.inventory.formats import MountPoint, PosixName
from kiln.inventory.strict import Strict

# slurm.conf(5) and slurmdbd.conf(5) PrivateData: what a user sees only of their own (operators, Slurm's
# administrators, root and SlurmUser see all; an account's coordinator sees the account's).
PRIVATE_DATA = ("accounts", "cloud", "events", "jobs", "nodes", "partitions", "reservations", "usage", "users")
PrivateDataKind = Literal[PRIVATE_DATA]
DEFAULT_PRIVATE_DATA = ["accounts", "jobs", "usage", "users"]

# slurmdbd.conf(5) Purge*After: a number of months, or of hours or days with that unit behind it; records
# older are deleted at the start of each such unit (ArchiveJobs and the like stay off: purged is gone).
PurgeAge = Annotated[str, Field(pattern=r"^[1-9][0-9]{0,5}(hours|days|months)$")]


class JobTmp(Strict):
    """A private ``/tmp`` and ``/dev/shm`` for every job (Slurm's job_container/tmpfs, with
    ``PrologFlags=Contain``): a job sees only its own files there, its steps and the SSH sessions
    pam_slurm_adopt adopts into it share them, and all of it is removed when the job ends. Slurm 22.05 and
    24.11 make these two directories private (not others). A change restarts slurmd on each compute node,
    which Slurm says may disturb jobs running there: change it with the nodes drained (``kiln patch``).

    Off unless set: on kiln's container testbed (systemd-nspawn nodes) both Slurm 22.05 and 24.11 fail to
    start a job now and then with it (slurmstepd: ``_create_ns: ns base mount failed: Invalid argument``,
    the job cancelled), 12 of 20 two-node jobs after a few slurmd restarts; the VM tier, with its own
    kernel, runs with it on (tests/vm/test_vm.py)."""

    base_path: MountPoint = Field("/var/lib/slurm/job-tmp", description="where each job's /tmp is kept on the "
                                  "node's own disk (job_container.conf BasePath, created by slurmd; a directory "
                                  "per job below it). Put it on local scratch, never on shared storage, /tmp or "
                                  "/dev/shm")

    @field_validator("base_path")
    @classmethod
    def _not_private_itself(cls, value: str) -> str:
        if any(value == d or value.startswith(d + "/") for d in ("/tmp", "/dev/shm", "/var/tmp")):
            raise ValueError(f"{value!r} is a directory kiln's jobs get privately (or the host's shared temporary "
                             "space): Slurm mounts each job's /tmp below base_path; give a directory of its own such "
                             "as /var/lib/slurm/job-tmp or local scratch")
        return value

    def job_container_lines(self) -> list[str]:
        """job_container.conf's lines for every node (slurmd creates base_path, 0755, when it starts)."""
        return ["AutoBasePath=true", f"BasePath={self.base_path}"]


class AccountingRetention(Strict):
    """How long slurmdbd keeps each kind of record before it purges it (``Purge<Kind>After``); a kind
    set to null is kept for ever. Jobs hold their stored scripts and environments: both go with them
    (kiln-accounting-orphans deletes, hourly, the copies Slurm 22.05 leaves behind its purge)."""

    jobs: PurgeAge | None = Field("12months", description="jobs, with their stored scripts and environments "
                                  "(PurgeJobAfter; the scripts no job holds any more go within the hour, "
                                  "by kiln-accounting-orphans.timer)")
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


class LoginUserLimits(Strict):
    """What all of one user's login sessions together may use on a login host (systemd's user-UID.slice,
    through a drop-in for every user-.slice; root's own slice is left unlimited, so an operator and kiln
    itself are never held back). Jobs are not in these slices: Slurm's cgroups hold them."""

    cpu_cores: float = Field(4, gt=0, le=4096, description="CPU time, in cores (CPUQuota=cores*100%)")
    memory_percent: int = Field(20, ge=1, le=100, description="memory, in percent of the host's (MemoryMax); "
                                "above it the kernel reclaims, then kills in that user's slice only")
    tasks: int = Field(4096, ge=16, le=4_194_304, description="processes and threads (TasksMax): a fork bomb "
                       "stops there")

    def slice_lines(self) -> list[str]:
        cpu = f"{self.cpu_cores * 100:.0f}%"
        return [f"CPUQuota={cpu}", f"MemoryMax={self.memory_percent}%", f"TasksMax={self.tasks}"]


class Operators(Strict):
    """The operators group: its members may run any command as root through sudo on every node
    (/etc/sudoers.d/kiln-operators, checked with visudo before it is placed); kiln gives sudo to nobody
    else, and the isolation suite fails where a team's probe account has any sudo rule."""

    group: PosixName = Field("kiln-operators", description="the group's name")
    gid: int = Field(ge=1000, le=2**31 - 2, description="the group's gid, the same on every node")
    users: list[PosixName] = Field(min_length=1, max_length=1000, description="its members: users of kiln_teams "
                                   "(their accounts exist on every node)")
    password: bool = Field(True, description="sudo asks for the member's own password; false: it does not "
                           "(NOPASSWD), for accounts that log in by key and have no password")

    def sudoers(self) -> str:
        """The sudoers drop-in for the group."""
        return (f"# Written by kiln (kiln_operators). Do not edit.\n%{self.group} ALL=(ALL:ALL) "
                f"{'' if self.password else 'NOPASSWD: '}ALL\n")
