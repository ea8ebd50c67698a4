"""The "did you mean" of inventory errors."""

from __future__ import annotations

import difflib
from typing import Any


def suggest(word: str, choices: Any) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
