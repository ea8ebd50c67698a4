"""The one error type of inventory loading and validation: a file, a key and a message."""

from __future__ import annotations

import unicodedata
from dataclasses import asdict, dataclass


def printable(text: str) -> str:
    """``text`` with every control, format (bidirectional override, zero-width) and line-separator
    character written as its escape (``\\u202e``): an error message never prints a value raw that
    would reorder or hide what a terminal shows."""
    return "".join(c if unicodedata.category(c) not in ("Cc", "Cf", "Zl", "Zp") else _ESCAPES.get(c) or
                   (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}") for c in text)


_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


@dataclass
class InventoryError:
    """Something wrong in an inventory, located by file (relative to the inventory) and key."""

    file: str
    key: str
    message: str
    line: int | None = None

    def __post_init__(self) -> None:
        self.file, self.key, self.message = printable(str(self.file)), printable(str(self.key)), printable(str(self.message))

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.key}: {self.message}"

    def as_dict(self) -> dict:
        return asdict(self)


class InventoryInvalid(Exception):
    """Raised by ``load_cluster`` when the inventory has errors; carries every one of them."""

    def __init__(self, path: str, errors: list[InventoryError]):
        self.path = path
        self.errors = errors
        super().__init__(f"inventory {path} has {len(errors)} error(s):\n" + "\n".join(map(str, errors)))
