"""kiln: provision, validate and patch GPU clusters."""

__version__ = "0.1.0"
