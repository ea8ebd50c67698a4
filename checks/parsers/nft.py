"""``nft list chain inet kiln input``: whether kiln's firewall is loaded and what its input chain does
with what no rule lets in. Pure: text in, facts out."""

from __future__ import annotations

import re

_POLICY = re.compile(r"^\s*type filter hook input priority [^;]+;\s*policy (accept|drop);", re.M)


def input_policy(listing: str) -> str | None:
    """``drop`` or ``accept``: the policy of the listed input chain; None where nft listed no such chain
    (the table is not loaded: nft says "No such file or directory")."""
    found = _POLICY.search(listing)
    return found.group(1) if found else None
