"""The settings reference, generated from the schema and the pin table (never typed twice): every
``kiln_*`` setting with its type, default, scope and meaning, the fields of the structured ones, and
every version pin. ``kiln inventory settings`` prints it; docs/settings.md is this module's output."""

from __future__ import annotations

import json
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel

from kiln.inventory.schema import SETTINGS
from kiln.versions import PINS


def type_name(annotation: Any) -> str:
    """A person's name for a schema type: ``list of name``, ``integer 1..86400``, ``host name``."""
    origin = get_origin(annotation)
    if origin is Annotated:
        base, *meta = get_args(annotation)
        for m in meta:
            if isinstance(m, AfterValidator):
                return m.func.__name__.removeprefix("check_").replace("_", " ")
        bounds = [getattr(c, attr) for m in meta for c in getattr(m, "metadata", [m])
                  for attr in ("ge", "gt", "le") if getattr(c, attr, None) is not None]
        return f"{type_name(base)} {bounds[0]}..{bounds[-1]}" if len(bounds) == 2 else type_name(base)
    if origin in (Union, types.UnionType):
        return " or ".join(type_name(a) for a in get_args(annotation))
    if origin is Literal:
        return " | ".join(json.dumps(a) for a in get_args(annotation))
    if origin is list:
        return f"list of {type_name(get_args(annotation)[0])}"
    if origin is dict:
        key, value = get_args(annotation)
        return f"map of {type_name(key)} to {type_name(value)}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation.__name__
    return {str: "string", int: "integer", float: "number", bool: "true/false"}.get(annotation, str(annotation))


def _models() -> list[type[BaseModel]]:
    found: list[type[BaseModel]] = []

    def walk(annotation: Any) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation not in found:
                found.append(annotation)
                for field in annotation.model_fields.values():
                    walk(field.annotation)
            return
        for arg in get_args(annotation):
            walk(arg)

    for setting in SETTINGS.values():
        walk(setting.annotation)
    return found


def settings() -> list[dict]:
    return [{"name": s.name, "type": type_name(s.annotation), "scope": s.scope, "meaning": s.doc,
             "default": s.default.model_dump() if hasattr(s.default, "model_dump") else s.default}
            for s in SETTINGS.values()]


def fields() -> dict[str, list[dict]]:
    out = {}
    for model in _models():
        out[model.__name__] = [{"name": name, "type": type_name(f.annotation),
                                "default": None if f.is_required() else f.default,
                                "required": f.is_required(), "meaning": f.description or ""}
                               for name, f in model.model_fields.items()]
    return out


def pins() -> list[dict]:
    return [{"name": p.name, "default": p.default, "role": p.role, "optional": p.optional, "meaning": p.doc}
            for p in PINS.values()]


def _cell(value: Any) -> str:
    text = "(required)" if value is None else json.dumps(value) if not isinstance(value, str) else f'"{value}"'
    return text.replace("|", "\\|")


def markdown() -> str:
    lines = ["# kiln's inventory settings", "",
             "Generated from `kiln/inventory/schema.py` and `kiln/versions.py` by `kiln inventory settings "
             "--markdown`; a test keeps this file equal to that output. Scope `cluster`: one value for the whole "
             "inventory (set it in `group_vars/all/`); `host`: may differ per group or host.", "",
             "| setting | type | default | scope | meaning |", "|---|---|---|---|---|"]
    for s in settings():
        default = "(none)" if s["default"] is None else _cell(s["default"])
        lines.append(f"| `{s['name']}` | {s['type'].replace('|', '/')} | {default} | {s['scope']} | "
                     f"{s['meaning'].replace('|', '/')} |")
    for model, rows in fields().items():
        lines += ["", f"## {model}", "", "| key | type | default | meaning |", "|---|---|---|---|"]
        for f in rows:
            lines.append(f"| `{f['name']}` | {f['type'].replace('|', '/')} | "
                         f"{'(required)' if f['required'] else _cell(f['default'])} | {f['meaning'].replace('|', '/')} |")
    lines += ["", "## Version pins (`kiln_versions`, in `group_vars/all/versions.yml`)", "",
              "A pin without a default must be set wherever its role runs; an optional pin may be `\"\"` to leave "
              "that component out.", "", "| pin | default | role | meaning |", "|---|---|---|---|"]
    for p in pins():
        lines.append(f"| `{p['name']}` | {'(set it)' if p['default'] is None else _cell(p['default'])} | {p['role']} | "
                     f"{p['meaning'].replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def text() -> str:
    rows = [(s["name"], s["type"], "(none)" if s["default"] is None else json.dumps(s["default"]), s["scope"])
            for s in settings()]
    width = max(len(r[0]) for r in rows)
    out = [f"{name:<{width}}  {scope:<7}  {kind}  default {default}" for name, kind, default, scope in rows]
    out += ["", "version pins (kiln_versions):"]
    out += [f"  {p['name']:<26} role {p['role']:<14} default {p['default'] if p['default'] is not None else '(set it)'}"
            for p in pins()]
    return "\n".join(out)
