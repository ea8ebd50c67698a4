"""The one way kiln puts a value into a shell command: every word quoted, so a value is one word.

Roles, the patch engine and kiln check build commands that run under ``sh`` on nodes. Every value in
them that did not come from kiln's own code (inventory values, pins, host names, paths, reasons) goes
through ``quote``; ``command`` builds a whole command from words. The inventory's strict formats
(``kiln/inventory/formats.py``) are the first wall; this is the second, so a value the formats allow
still cannot become syntax. (Node-side check code ships without kiln and uses ``shlex.quote``, the
same function, directly.)
"""

from __future__ import annotations

import shlex
from typing import Iterable


def quote(word: object) -> str:
    """``word`` as one shell word: ``gpu01`` stays, ``a b`` becomes ``'a b'``, ints are written out."""
    return shlex.quote(str(word))


def command(*words: object) -> str:
    """A command line of ``words``, each quoted: ``command("mkdir", "-p", path)``."""
    return " ".join(quote(w) for w in words)


def quote_all(words: Iterable[object], sep: str = " ") -> str:
    """Several values as shell words (``sep=" "``) or as one word of a list (``sep=","``: ``a,b``)."""
    if sep == " ":
        return " ".join(quote(w) for w in words)
    return quote(sep.join(str(w) for w in words))
