"""``nvidia-smi -q``: the full query, read as the tree it prints, and the sections kiln acts on. Pure,
standard library only; tested on real outputs of drivers 460 to 590 (tests/recorded/captured/nvidia-smi-q).

The text is a banner, a few ``Key : value`` lines (driver, CUDA, ``Attached GPUs``), then one block per
GPU headed by its PCI bus id (``GPU 00000000:18:00.0``). Inside, each level is indented four spaces more;
a line without `` : `` opens a section (``Remapped Rows``, ``Fabric``, ``Clocks Event Reasons``). Key
columns are padded to the driver's width (42 on 535, 55 on 590): the separator is the first `` : ``.
A key given twice in one section (a process list) keeps every value, in order.

Output cut short (fewer GPU blocks than ``Attached GPUs`` says) raises CheckError: never a partial pass.
"""

from __future__ import annotations

import re

from checks.verdict import CheckError

_GPU = re.compile(r"GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])")


def _tree(lines: list[tuple[int, str]]) -> dict:
    """Indented ``Key : value`` lines (indent, text) -> nested dicts; a repeated key's values as a list."""
    root: dict = {}
    stack: list[tuple[int, dict]] = [(-1, root)]
    for indent, text in lines:
        while stack and indent <= stack[-1][0]:
            stack.pop()
        parent = stack[-1][1]
        if " : " in text or text.endswith(" :"):  # a value (an empty one ends with " :")
            key, _, value = text.partition(" :")
            _put(parent, key.strip(), value.strip())
        else:
            key = text.strip()
            section: dict = {}
            _put(parent, key, section)
            stack.append((indent, section))
    return root


def _put(parent: dict, key: str, value) -> None:
    if key in parent:
        old = parent[key]
        parent[key] = (old if isinstance(old, list) else [old]) + [value]
    else:
        parent[key] = value


def read(text: str) -> dict:
    """{"driver": ..., "cuda": ..., "gpus": {bus id: section tree}}."""
    head: dict[str, str] = {}
    gpus: dict[str, list[tuple[int, str]]] = {}
    current: list[tuple[int, str]] | None = None
    for raw in text.split("\n"):
        line = raw.rstrip()
        if not line.strip() or line.startswith("="):
            continue
        m = _GPU.fullmatch(line)
        if m:
            current = gpus.setdefault(m.group(1), [])
            continue
        indent = len(line) - len(line.lstrip(" "))
        if current is None or indent == 0:
            key, _, value = line.partition(" : ")
            head[key.strip()] = value.strip()
            current = None if indent == 0 else current
            continue
        current.append((indent, line.strip()))
    attached = head.get("Attached GPUs", "")
    if not attached.isdigit():
        raise CheckError("nvidia-smi -q printed no 'Attached GPUs' line")
    if int(attached) != len(gpus):
        raise CheckError(f"nvidia-smi -q says {attached} GPUs but lists {len(gpus)}: its output was cut short")
    return {"driver": head.get("Driver Version", ""), "cuda": head.get("CUDA Version", ""),
            "gpus": {bus: _tree(lines) for bus, lines in gpus.items()}}


def _section(gpu: dict, *names: str) -> dict:
    for name in names:
        if isinstance(gpu.get(name), dict):
            return gpu[name]
    return {}


def remapped_rows(gpu: dict) -> dict[str, str] | None:
    """Remapped Rows (Ampere and newer): correctable, uncorrectable, pending, failure; None where the GPU
    has no such section or says N/A."""
    rows = _section(gpu, "Remapped Rows")
    if not rows or rows.get("Pending") in (None, "N/A"):
        return None
    return {"correctable": rows.get("Correctable Error", ""), "uncorrectable": rows.get("Uncorrectable Error", ""),
            "pending": rows.get("Pending", ""), "failure": rows.get("Remapping Failure Occurred", "")}


def ecc_mode(gpu: dict) -> tuple[str, str]:
    """(current, pending) ECC mode: a pending mode other than the current one needs a reboot."""
    mode = _section(gpu, "ECC Mode", "Ecc Mode")  # "Ecc Mode" before driver 5xx
    return mode.get("Current", ""), mode.get("Pending", "")


def clock_event_reasons(gpu: dict) -> list[str]:
    """The clock event (throttle) reasons active now, nested ones included ("HW Thermal Slowdown");
    drivers before 535 call the section Clocks Throttle Reasons (``Clocks Event Reasons`` after)."""
    reasons = _section(gpu, "Clocks Event Reasons", "Clocks Throttle Reasons")
    active = []

    def walk(section: dict) -> None:
        for key, value in section.items():
            if isinstance(value, dict):
                walk(value)
            elif value == "Active":
                active.append(key)
    walk(reasons)
    return active


def fabric(gpu: dict) -> dict[str, str] | None:
    """The NVLink fabric's state as the GPU sees it (Hopper and newer: State, Status, CliqueId, Health
    Summary); None where the driver prints none or the GPU is in no fabric (N/A)."""
    section = _section(gpu, "Fabric")
    if not section or section.get("State") in (None, "N/A"):
        return None
    health = section.get("Health") if isinstance(section.get("Health"), dict) else {}
    return {"state": section.get("State", ""), "status": section.get("Status", ""),
            "clique": section.get("CliqueId", ""), "health": health.get("Summary", "")}


def devices(tree: dict) -> list[tuple[str, int, str]]:
    """(PCI bus id, minor number, UUID) of each GPU: the minor number N is the GPU's ``/dev/nvidiaN``, the
    device Slurm's gres.conf names and gives a job; NVML's index (dcgm-exporter's ``gpu`` label) follows
    the PCI order instead, and the two differ on real nodes (tests/recorded/captured/nvidia-smi-q). A GPU
    without a readable minor number or UUID is left out."""
    out = []
    for bus, gpu in tree["gpus"].items():
        minor, uuid = str(gpu.get("Minor Number", "")), str(gpu.get("GPU UUID", ""))
        if minor.isdigit() and re.fullmatch(r"(?:GPU|MIG)-[0-9A-Fa-f-]{8,64}", uuid):
            out.append((bus, int(minor), uuid))
    return out
