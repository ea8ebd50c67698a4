"""Inventory loading (ansible-core), validation and the typed cluster model."""

from kiln.inventory.errors import InventoryError, InventoryInvalid
from kiln.inventory.validate import load_cluster, validate

__all__ = ["InventoryError", "InventoryInvalid", "load_cluster", "validate"]
