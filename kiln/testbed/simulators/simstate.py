"""State shared by kiln's tool simulators: one JSON file per node (``$KILN_SIM_STATE``, default
/etc/kiln-sim/state.json). Test-only: installed on testbed nodes by ``kiln testbed up``, never on a
real cluster, never GPU proof. Standard library only (the nodes' python3).

Beside the JSON (for people and tests to read) ``save`` writes a ``marshal`` twin that ``load`` reads:
the simulators start with ``python3 -I -S`` and import nothing slow, so one call costs about 10 ms of a
node's CPU instead of 25 (the testbed's nodes all share the host's CPUs; benchmarks/checks.py). A JSON
file newer than its twin (edited by hand) wins.
"""

from __future__ import annotations

import marshal
import os
import time

PATH = os.environ.get("KILN_SIM_STATE", "/etc/kiln-sim/state.json")
MODELS = {"h100": "NVIDIA H100 80GB HBM3", "h200": "NVIDIA H200", "a100": "NVIDIA A100-SXM4-80GB",
          "l40s": "NVIDIA L40S"}


# nvidia-smi -q's Fabric section (State, Status, CliqueId, Health Summary): an NVSwitch GPU registered with
# the fabric, a PCIe GPU in none, and one whose registration has not finished (the fabric manager or the
# NVLink switches are not done with it)
FABRIC_DONE, FABRIC_NONE, FABRIC_PENDING = (("Completed", "Success", "0", "Healthy"), ("N/A", "N/A", "N/A", "N/A"),
                                            ("In Progress", "N/A", "N/A", "N/A"))


def healthy(gpus: int, model: str, driver: str, nvlinks: int, hcas: int, rate: int, layer: str) -> dict:
    return {
        "driver": driver, "cuda": "12.2", "nvidia_smi_exit": 0,
        "gpus": [{"index": i, "name": MODELS.get(model.lower(), f"NVIDIA {model.upper()}"),
                  "bus": f"00000000:{0x18 + 0x10 * i:02X}:00.0", "uuid": f"GPU-00000000-0000-0000-0000-{i:012d}",
                  "persistence": "Enabled", "ecc": "Enabled", "ecc_uncorrected": 0, "retired_pending": "No",
                  "remap_pending": "No", "remap_failure": "No", "pcie_gen": 5, "pcie_gen_max": 5,
                  "pcie_width": 16, "pcie_width_max": 16, "throttle": 0x1, "nvlinks": [26.562] * nvlinks,
                  "fabric": list(FABRIC_DONE if nvlinks else FABRIC_NONE),  # (an "ecc_pending" differs from "ecc")
                  "lost": False} for i in range(gpus)],
        "hcas": [{"name": f"mlx5_{i}", "state": "Active", "phys": "LinkUp", "rate": rate, "layer": layer,
                  "guid": f"0x946dae0300cde7{i:02x}"} for i in range(hcas)],
        "kernel_log": [],
        "dcgm_fail": [],
        "bandwidth_gbps": 390.87 if rate >= 400 else rate * 0.97,
    }


def load() -> dict:
    try:
        if os.stat(PATH + ".bin").st_mtime_ns >= os.stat(PATH).st_mtime_ns:
            with open(PATH + ".bin", "rb") as f:
                return marshal.load(f)
    except (OSError, EOFError, ValueError, TypeError):
        pass
    import json
    with open(PATH) as f:
        return json.load(f)


def save(state: dict) -> None:
    tmp = PATH + ".tmp"
    import json
    with open(tmp, "w") as f:
        json.dump(state, f, indent=1)
    os.replace(tmp, PATH)
    with open(tmp, "wb") as f:
        marshal.dump(state, f)
    os.replace(tmp, PATH + ".bin")


def kernel_stamp() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)) + ",%06d" % int((t % 1) * 1e6) + time.strftime("%z")


GPU_FAULT_FIELDS = ("lost", "ecc_uncorrected", "remap_pending", "retired_pending", "nvlinks", "throttle", "fabric")


XID_TEXT = {79: "GPU has fallen off the bus.", 13: "Graphics SM Warp Exception on (GPC 0, TPC 0): Out Of Range Address",
            48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer"}


def xid(state: dict, gpu: dict, code: int, app: bool = False) -> None:
    """One Xid line in the simulated kernel log, as the driver prints it (journalctl -o short-iso)."""
    bus = gpu["bus"][4:-2].lower()  # 00000000:18:00.0 -> 0000:18:00
    who = "pid=4242, name=python3" if app else "pid='<unknown>', name=<unknown>"
    line = (f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')} {os.uname().nodename} kernel: NVRM: Xid (PCI:{bus}): {code}, "
            f"{who}, {XID_TEXT[code]}")
    state["kernel_log"].append({"t": time.time(), "line": line})


# Programs that hold the GPUs open while they run (the real ones open /dev/nvidia*; kiln's stand-ins do
# not, so they are known by the name they run under): a GPU reset is refused while any runs
GPU_CLIENTS = ("nv-hostengine", "dcgm-exporter", "nvidia-persistenced", "nv-fabricmanager")


def gpu_clients(proc: str = "/proc") -> list[str]:
    """'pid name' of each running GPU client."""
    found = []
    for pid in (p for p in os.listdir(proc) if p.isdigit()):
        try:
            with open(os.path.join(proc, pid, "cmdline"), "rb") as f:
                words = f.read().split(b"\0")
        except OSError:
            continue
        names = {os.path.basename(w.decode(errors="replace")) for w in words[:3] if w}  # argv0, or a script's path
        hit = sorted(names & set(GPU_CLIENTS))
        if hit:
            found.append(f"{pid} {hit[0]}")
    return found


def reset_gpus(state: dict) -> list[str]:
    """``nvidia-smi -r``: every GPU without a persistent fault gets its healthy fields back (the kernel
    log keeps its Xid lines, as dmesg does); a persistent Xid fault's GPU logs its Xid again (the fault
    is still there); the bus ids of the GPUs reset."""
    broken = {gpu for fault, gpu, _ in state.get("persistent", [])}
    healthy = {g["index"]: g for g in state["healthy"]["gpus"]}
    done = []
    for gpu in state["gpus"]:
        if gpu["index"] not in broken:
            for field in GPU_FAULT_FIELDS:
                if field in healthy[gpu["index"]]:  # (a state written before the field existed)
                    gpu[field] = healthy[gpu["index"]][field]
            done.append(gpu["bus"])
    for fault, index, _ in state.get("persistent", []):
        if fault.startswith("xid-") and state["gpus"]:
            xid(state, state["gpus"][min(index, len(state["gpus"]) - 1)], int(fault[4:]), app=fault == "xid-13")
    state["transient"] = [f for f in state.get("transient", []) if f[1] in broken]
    return done
