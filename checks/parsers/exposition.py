"""Prometheus' text exposition format (0.0.4), the one writer of every ``.prom`` file kiln puts in
node_exporter's textfile directory: the node checks (kiln.prom), the Slurm collector (kiln-slurm.prom),
kiln-remediate (kiln-remediation.prom) and the deploy's static kiln-node.prom. Pure but for ``write``;
standard library only (it runs on hosts beside the readers, with nothing installed).

What node_exporter refuses takes the whole file with it (every metric of it disappears), so:

- metric and label names are checked against the format's patterns (a bad one is kiln's bug: ValueError);
- each family's HELP and TYPE come once, before its samples, which stay together;
- a label value is cut to ``LABEL_MAX`` characters first and then escaped (``\\``, ``"``, newline): a cut
  after the escape could leave a lone backslash;
- a value is a number (bool and text are refused), NaN and the infinities written as the format says;
- ``write`` replaces the file atomically, so node_exporter never reads half of one.
"""

from __future__ import annotations

import math
import os
import re

METRIC = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
KINDS = ("counter", "gauge", "summary", "histogram", "untyped")
SUFFIXES = {"summary": ("", "_sum", "_count"), "histogram": ("_bucket", "_sum", "_count")}
LABEL_MAX = 200


def label_value(value: object) -> str:
    """A label value as the format writes it: cut, then escaped."""
    return str(value)[:LABEL_MAX].replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def number(value: int | float) -> str:
    """A sample value: whole numbers as such, others with ten significant digits, NaN, +Inf, -Inf."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"a sample value is a number, not {value!r}")
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.10g}"


class Exposition:
    """Families in the order first declared, each with its samples."""

    def __init__(self) -> None:
        self._families: dict[str, tuple[str, str, list[str]]] = {}

    def add(self, name: str, kind: str, help_text: str, value: int | float | None = None,
            labels: dict[str, object] | None = None, suffix: str = "") -> None:
        """Declare the family ``name`` (once: its kind and help must not change) and, unless ``value`` is
        None, add one sample (``suffix``: a summary's ``_sum``/``_count``)."""
        if not METRIC.fullmatch(name) or kind not in KINDS:
            raise ValueError(f"not a metric family kiln writes: {name!r} ({kind!r})")
        family = self._families.setdefault(name, (kind, help_text, []))
        if family[:2] != (kind, help_text):
            raise ValueError(f"{name} declared twice, differently")
        if value is None:
            return
        if suffix not in SUFFIXES.get(kind, ("",)):
            raise ValueError(f"{name}{suffix}: no sample of a {kind}")
        pairs = []
        for key, text in (labels or {}).items():
            if not LABEL.fullmatch(key) or key.startswith("__"):
                raise ValueError(f"not a label name: {key!r}")
            pairs.append(f'{key}="{label_value(text)}"')
        family[2].append(f"{name}{suffix}" + (f"{{{','.join(pairs)}}}" if pairs else "") + f" {number(value)}")

    def text(self) -> str:
        out = []
        for name, (kind, help_text, samples) in self._families.items():
            help_line = help_text.replace("\\", "\\\\").replace("\n", "\\n")
            out += [f"# HELP {name} {help_line}", f"# TYPE {name} {kind}", *samples]
        return "\n".join(out) + "\n"


def write(directory: str, filename: str, text: str) -> None:
    """``text`` as ``directory``/``filename`` (mode 644), replaced atomically (a temporary file beside it,
    flushed to disk, then renamed over it)."""
    tmp = os.path.join(directory, f".{filename}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, os.path.join(directory, filename))
