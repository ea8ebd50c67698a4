"""The base of kiln's structured inventory values."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """Structured values reject keys they do not know, so a typo inside a dict is caught too."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
