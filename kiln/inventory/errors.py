"""The one error type of inventory loading and validation: a file, a key and a message."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class InventoryError:
    """Something wrong in an inventory, located by file (relative to the inventory) and key."""

    file: str
    key: str
    message: str
    line: int | None = None

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
