"""NVIDIA's Xid catalog as kiln acts on it: for each Xid code, whether it drains the node (the GPU or
the node needs a reset, a reboot, NVLink attention or service), is the application's own (a bug or a
killed job: never drains), or is one kiln does not know (a warning that names the code, never a silent
pass). Buckets follow the "immediate action" column of NVIDIA's Xid catalog for Ampere and newer
(docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html); Xid 154 carries its own action.
Pure data and functions: no I/O.
"""

from __future__ import annotations

import re

RESET = "reset the GPU (or reboot the node); if it recurs, service the GPU"
REBOOT = "reboot the node; if it recurs, service it"
SERVICE = "service the GPU (RMA)"
NVLINK = "check NVLink and the fabric manager, then reset the GPUs; if it recurs, service the baseboard"
APPLICATION = "the application's own error (a bug, a bad access, a killed job): the node stays in service"

# code -> (what it is, what to do); codes kiln drains on
FATAL: dict[int, tuple[str, str]] = {
    46: ("GPU stopped processing", RESET),
    48: ("double-bit ECC error", RESET),
    56: ("display engine error", RESET),
    57: ("error programming video memory interface", RESET),
    58: ("unstable video memory interface", RESET),
    61: ("internal micro-controller breakpoint/warning", RESET),
    62: ("internal micro-controller halt", RESET),
    63: ("row remapping or page retirement recorded", "reset the GPU (or reboot) to apply the remapping"),
    64: ("row remapping or page retirement failed", SERVICE),
    65: ("video processor exception", RESET),
    68: ("NVDEC0 exception", RESET),
    69: ("graphics engine class error", RESET),
    73: ("NVENC2 error", RESET),
    74: ("NVLink error", NVLINK),
    79: ("GPU has fallen off the bus", "the GPU fell off the bus: " + REBOOT),
    80: ("corrupted data sent to the GPU", RESET),
    81: ("VGA subsystem error", RESET),
    92: ("high single-bit ECC error rate", RESET),
    95: ("uncontained ECC error", RESET),
    110: ("security fault", REBOOT),
    119: ("GSP RPC timeout", RESET),
    120: ("GSP error", RESET),
    122: ("SPI PMU RPC read failure", RESET),
    123: ("SPI PMU RPC write failure", RESET),
    140: ("unrecovered ECC error", RESET),
    143: ("GPU initialization failure", REBOOT),
    144: ("NVLink error (Blackwell)", NVLINK),
    145: ("NVLink error (Blackwell)", NVLINK),
    146: ("NVLink error (Blackwell)", NVLINK),
    147: ("NVLink error (Blackwell)", NVLINK),
    148: ("NVLink error (Blackwell)", NVLINK),
    149: ("NVLink error (Blackwell)", NVLINK),
    150: ("NVLink error (Blackwell)", NVLINK),
}
# Errors the GPU contained to one application: NVIDIA's catalog asks to restart the application, not the
# node (reported as a warning that names the action; never drains)
CONTAINED: dict[int, tuple[str, str]] = {
    94: ("contained ECC error", "restart the application (the GPU contained the error); reset the GPU if it "
         "recurs"),
}
# NVSwitch SXid codes are five digits (11004 ... 24007); GPU Xids stay under 1000
SXID_MIN = 10_000
# Errors an application causes: reported, never drain a node
APPLICATION_XIDS: dict[int, str] = {
    8: "GPU stopped processing (the application's channel)",
    13: "graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "preemptive cleanup (a killed process)",
    109: "context switch timeout",
}
# Xid 154 names the recovery the driver now wants (NVML's nvmlDeviceGpuRecoveryAction_t)
RECOVERY_ACTIONS = {0: None, 1: RESET, 2: REBOOT, 3: "drain peer-to-peer traffic: " + RESET,
                    4: "drain peer-to-peer traffic, then " + RESET}
_RECOVERY = re.compile(r"recovery action changed from \S+ \([^)]*\) to (0x[0-9a-fA-F]+|\d+)")


def classify(code: int, message: str = "") -> tuple[str, str]:
    """(severity, what to do) of one Xid: severity "fail" drains, "warn" reports an Xid kiln does not
    know, "ok" is the application's own."""
    if code == 154:
        found = _RECOVERY.search(message)
        action = int(found.group(1), 0) if found else 1
        todo = RECOVERY_ACTIONS.get(action, REBOOT)
        return ("ok", "the driver needs no recovery any more") if todo is None else \
            ("fail", f"the driver asks for recovery action {action}: {todo}")
    if code in FATAL:
        return "fail", FATAL[code][1]
    if code in CONTAINED:
        return "warn", f"Xid {code}, {CONTAINED[code][0]}: {CONTAINED[code][1]}"
    if code in APPLICATION_XIDS:
        return "ok", APPLICATION
    return "warn", f"Xid {code} is not in kiln's catalog: look it up in NVIDIA's Xid catalog"
