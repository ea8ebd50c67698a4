"""Where kiln finds an inventory when ``-i`` is not given: the operator's own operations repository.

The lookup, in order: ``-i DIR``; ``$KILN_INVENTORY``; ``./inventory/testbed`` in the current
directory (what ``kiln testbed up`` writes there). Secrets default to ``secrets/`` beside the inventory
directory (``kiln_secrets_dir``). Nothing here depends on where kiln itself is installed.
"""

from __future__ import annotations

import os
from pathlib import Path


def testbed_inventory(name: str = "kiln") -> Path:
    """The inventory ``kiln testbed up --name NAME`` writes, under the current directory."""
    return Path("inventory") / ("testbed" if name == "kiln" else f"testbed-{name}")


def default_inventory() -> Path:
    return Path(os.environ.get("KILN_INVENTORY") or testbed_inventory())
