"""Every number an inventory gives kiln has an upper bound (a GPU limit of 10**30 reaches slurm.conf
and sacctmgr as it is written): each int or float in the settings and in the models under them is
bounded above, found by walking the schema rather than listed by hand."""

from __future__ import annotations

import typing

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from kiln.inventory.schema import SETTINGS


def _bounded(metadata) -> bool:
    return any(isinstance(m, (annotated_types.Le, annotated_types.Lt)) for m in metadata)


def _unbounded(annotation, where: str, metadata=(), seen=None) -> list[str]:
    seen = seen if seen is not None else set()
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        inner, *extra = args
        meta = list(metadata)
        for e in extra:
            meta += e.metadata if isinstance(e, FieldInfo) else [e]
        return _unbounded(inner, where, meta, seen)
    if annotation in (int, float):
        return [] if _bounded(metadata) else [where]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation in seen:
            return []
        seen.add(annotation)
        found = []
        for name, field in annotation.model_fields.items():
            found += _unbounded(field.annotation, f"{where}.{name}", field.metadata, seen)
        return found
    found = []
    for i, arg in enumerate(args):
        if origin is dict and i == 0:
            continue  # keys: names
        found += _unbounded(arg, where, metadata if origin in (typing.Union, type(int | None)) else (), seen)
    return found


def test_every_number_in_the_schema_has_an_upper_bound():
    missing = [w for s in SETTINGS.values() for w in _unbounded(s.annotation, s.name)]
    assert missing == [], f"numbers without an upper bound: {missing}"
