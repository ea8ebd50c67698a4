"""kiln's own pyinfra facts: a command and a pure ``process``, tested on recorded output.

Each command exits 0 when the tool is missing or its daemon is down (the fact is then empty), so a
fresh node gives "nothing there yet" instead of failing the host while operations are prepared.
"""

from __future__ import annotations

from pyinfra.api import FactBase


class IsContainer(FactBase):
    """True when the node is a container (``systemd-detect-virt --container``): the host keeps its clock."""

    default = bool

    def command(self) -> str:
        return "systemd-detect-virt --container 2>/dev/null || true"

    def process(self, output: list[str]) -> bool:
        kind = "".join(output).strip()
        return bool(kind) and kind != "none"
