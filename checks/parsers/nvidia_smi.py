"""nvidia-smi: ``--query-gpu`` / ``--query-remapped-rows`` CSV, ``nvlink -s``, and its exit codes."""

from __future__ import annotations

import re

from checks.verdict import CheckError

# What nvidia-smi prints in a field's place (NVML's return code of the query, in brackets), by what it
# means: the field is not there on this GPU or driver (read as None), or the GPU is in a state kiln
# must act on (the row carries it as a fault). A bracketed value not listed here is refused, not read.
NOT_AVAILABLE = ("[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Not Found]",
                 "[Requested functionality has been deprecated]", "")
GPU_FAULTS = {
    "[GPU requires reset]": "the GPU needs a reset (nvidia-smi -r, or reboot the node)",
    "[GPU is lost]": "the GPU is lost (fallen off the bus): reboot the node; if it recurs, service it",
    "[Unknown Error]": "the driver could not read this field: if it is not a known quirk of this board, reset "
                       "the GPU or reboot the node",
    "[Timeout]": "the GPU did not answer the driver in time: reset the GPU or reboot the node",
}
# Of those, the ones that say the GPU itself is gone or must be reset: the node drains. The others are
# one field the driver could not read: reported, since on some boards a field reads so for ever (fan
# speed, a consumer card's power.default_limit), and a healthy node must not drain for it.
GPU_GONE = ("[GPU requires reset]", "[GPU is lost]")
FAULTS = "_faults"  # a row's key: [(field, what nvidia-smi printed, what to do)]

# nvidia-smi's documented exit codes, with what an operator should do.
EXIT_CODES = {
    2: "a bad argument or field name was given to nvidia-smi (kiln bug or a driver too old for the query)",
    3: "the requested operation is not available on this GPU",
    4: "no permission to run nvidia-smi (run as root)",
    6: "a query of a GPU failed",
    8: "a GPU's external power cables are not attached: reseat them",
    9: "the NVIDIA driver is not loaded: check the kernel module (lsmod | grep nvidia, dmesg), reboot",
    10: "the NVIDIA kernel module detected an interrupt issue with a GPU",
    12: "the NVML shared library is missing or cannot be loaded: reinstall the driver",
    13: "the local NVML library does not support this function",
    14: "a GPU's infoROM is corrupted: contact the vendor",
    15: "a GPU has fallen off the bus: reboot; if it recurs, service the node",
    255: "nvidia-smi failed with an internal error (see its output)",
}


def explain_exit(code: int) -> str:
    return EXIT_CODES.get(code, f"nvidia-smi exited {code}")


def _value(text: str) -> str | None:
    text = text.strip()
    if text in NOT_AVAILABLE or text in GPU_FAULTS:
        return None
    if text.startswith("[") and text.endswith("]"):
        raise CheckError(f"nvidia-smi printed {text!r} in place of a value, which kiln does not know: not read "
                         "(run nvidia-smi on the node to see what it says)")
    return text


def parse_query_csv(text: str, fields: list[str] | None = None) -> list[dict[str, str | None]]:
    """Rows of ``--format=csv[,noheader][,nounits]`` as dicts (field -> value, None for [N/A]).

    With a header line the field names come from it (units in brackets dropped); with ``noheader``
    give ``fields``. A row with the wrong number of values (truncated output) is an error. A field
    that nvidia-smi could not read because of the GPU's state (``[GPU requires reset]``, ``[GPU is
    lost]``, ``[Unknown Error]``) is None, and the row lists it under ``FAULTS`` with what to do."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise CheckError("nvidia-smi printed nothing")
    if fields is None:
        fields = [re.sub(r"\s*\[[^\]]*\]$", "", f.strip()) for f in lines[0].split(",")]
        lines = lines[1:]
    rows = []
    for line in lines:
        values = [v for v in line.split(",")]
        if len(values) == len(fields) + 1 and not values[-1].strip():
            values = values[:-1]  # some drivers end rows with ", "
        if len(values) != len(fields):
            raise CheckError(f"nvidia-smi row has {len(values)} values for {len(fields)} fields: {line[:80]!r}")
        row: dict = {f: _value(v) for f, v in zip(fields, values)}
        row[FAULTS] = [(f, v.strip(), GPU_FAULTS[v.strip()]) for f, v in zip(fields, values) if v.strip() in GPU_FAULTS]
        rows.append(row)
    return rows


def number(value: str | None) -> float | None:
    """``'0'``, ``'41 C'``, ``'16x'``, ``'0x0000000000000004'`` -> a number; None stays None."""
    if value is None:
        return None
    text = value.strip()
    if text.lower().startswith("0x"):
        return float(int(text, 16))
    match = re.match(r"^-?\d+(\.\d+)?", text)
    if not match:
        if text.lower() in ("yes", "enabled", "active"):
            return 1.0
        if text.lower() in ("no", "disabled", "not active"):
            return 0.0
        raise CheckError(f"not a number: {value!r}")
    return float(match.group(0))


_ALL_INACTIVE = re.compile(r"all links are inactive", re.IGNORECASE)


def parse_nvlink_status(text: str) -> dict[int, dict]:
    """``nvidia-smi nvlink -s``: gpu index -> {"name", "links": {n: GB/s or None if inactive},
    "all_inactive": bool}. Indentation is not needed (a capture whose spaces were lost reads the
    same); a line under a GPU that is neither a link nor the all-inactive notice is refused, never
    skipped (a GPU would look like one with no NVLink)."""
    gpus: dict[int, dict] = {}
    current = None
    for line in text.splitlines():
        header = re.match(r"^GPU (\d+): (.*?)(?: \(UUID: [^)]*\))?\s*$", line)
        if header:
            current = gpus.setdefault(int(header.group(1)), {"name": header.group(2), "links": {},
                                                              "all_inactive": False})
            continue
        if current is None:
            if line.strip():
                raise CheckError(f"nvlink status line outside a GPU: {line[:80]!r}")
            continue
        if _ALL_INACTIVE.search(line):  # drivers spell it "inactive", "inActive"; some write "Nvlink"
            current["all_inactive"] = True
            continue
        link = re.match(r"^\s*Link (\d+): (.*)$", line)
        if link:
            speed = link.group(2).strip()
            current["links"][int(link.group(1))] = None if "inactive" in speed.lower() else number(speed)
        elif line.strip():
            raise CheckError(f"nvlink status line not understood under GPU {next(reversed(gpus))}: {line[:80]!r}")
    if not gpus:
        raise CheckError("no GPU in nvlink status output")
    return gpus
