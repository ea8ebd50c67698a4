"""The `kiln` command: the face of kiln. It may import everything; nothing imports it."""

from kiln.cli.main import main

__all__ = ["main"]
