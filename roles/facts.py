"""kiln's own pyinfra facts: a command and a pure ``process``, tested on recorded output.

Each command exits 0 when the tool is missing or its daemon is down (the fact is then empty), so a
fresh node gives "nothing there yet" instead of failing the host while operations are prepared.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra.api import FactBase


class IsContainer(FactBase):
    """True when the node is a container (``systemd-detect-virt --container``): the host keeps its clock."""

    default = bool

    def command(self) -> str:
        return "systemd-detect-virt --container 2>/dev/null || true"

    def process(self, output: list[str]) -> bool:
        kind = "".join(output).strip()
        return bool(kind) and kind != "none"


@dataclass(frozen=True)
class Association:
    account: str
    user: str          # "" for the account's own association
    fairshare: str     # as sacctmgr prints it, e.g. "60"
    grp_tres: str      # e.g. "gres/gpu=2", "" when unset


@dataclass(frozen=True)
class SlurmAccounting:
    """What the accounting database holds for one cluster."""

    reachable: bool
    cluster_registered: bool
    associations: tuple[Association, ...]

    def account(self, name: str) -> Association | None:
        return next((a for a in self.associations if a.account == name and not a.user), None)

    def users(self, account: str) -> set[str]:
        return {a.user for a in self.associations if a.account == account and a.user}


class SlurmAccountingState(FactBase):
    """Clusters and associations from ``sacctmgr``; ``reachable`` is False when slurmdbd does not answer."""

    def command(self, cluster: str) -> str:
        return ("command -v sacctmgr >/dev/null && c=$(sacctmgr -nP show cluster format=cluster 2>/dev/null)"
                f' && {{ echo "REACHABLE {cluster}"; echo "$c"; echo ---;'
                f" sacctmgr -nP show assoc cluster={cluster} format=account,user,fairshare,grptres; }}; true")

    @staticmethod
    def default() -> SlurmAccounting:
        return SlurmAccounting(False, False, ())

    def process(self, output: list[str]) -> SlurmAccounting:
        return parse_sacctmgr(output)


def parse_sacctmgr(output: list[str]) -> SlurmAccounting:
    """Parse SlurmAccountingState's output: ``REACHABLE <cluster>``, cluster names, ``---``, then
    ``account|user|fairshare|grptres`` lines."""
    lines = [line.rstrip() for line in output]
    if not lines or not lines[0].startswith("REACHABLE "):
        return SlurmAccounting(False, False, ())
    cluster = lines[0].split(" ", 1)[1].strip()
    try:
        split = lines.index("---")
    except ValueError:
        return SlurmAccounting(True, False, ())
    clusters = {line.strip() for line in lines[1:split] if line.strip()}
    assocs = []
    for line in lines[split + 1:]:
        parts = line.split("|")
        if len(parts) >= 4:
            assocs.append(Association(parts[0], parts[1], parts[2], parts[3]))
    return SlurmAccounting(True, cluster in clusters, tuple(assocs))
