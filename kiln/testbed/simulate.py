"""The testbed's GPU and fabric tool simulators (kiln/testbed/simulators): installed as files on compute nodes,
set up healthy at boot, and broken on purpose with ``kiln testbed inject``. kiln never imports them."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

# Package data of the testbed feature (never installed on a real cluster, never GPU proof)
SIMULATORS = Path(str(files("kiln.testbed") / "simulators"))
TOOLS = ("nvidia-smi", "dcgmi", "ibstat", "ibv_devinfo", "ib_write_bw", "all_reduce_perf", "kiln-sim", "simstate.py",
         "dcgm-exporter")
UNITS = ("nvidia-fabricmanager.service", "kiln-sim-boot.service", "kiln-sim-dcgm-exporter.service")
# kiln's dcgm-exporter counters: the stand-in serves exactly these fields, as the real exporter would
COUNTERS = Path(str(files("templates") / "monitoring" / "dcgm-counters.csv"))
FAULTS = ("gpu-lost", "ecc-uncorrected", "remap-pending", "xid-79", "xid-48", "xid-13", "nvlink-down",
          "ib-port-down", "ib-rate-low", "mount-missing", "clock-throttle", "driver-mismatch", "nccl-slow", "slurmd-stopped", "fabric-incomplete", "gres-low")


def available() -> bool:
    return all((SIMULATORS / t).is_file() for t in TOOLS)


FABRIC_TOOLS = ("ibstat", "ibv_devinfo", "ib_write_bw")


def simulator_files(fabric: bool = True) -> dict[str, tuple[str, int]]:
    """Node path -> (content, mode) for every simulator, in /usr/local/bin (ahead of /usr/bin), and the
    simulated fabric manager's unit. ``fabric=False``: no fabric tools (a VM's soft-RoCE is real)."""
    files = {f"/usr/local/bin/{t}": ((SIMULATORS / t).read_text(), 0o644 if t.endswith(".py") else 0o755)
             for t in TOOLS if fabric or t not in FABRIC_TOOLS}
    for unit in UNITS:
        files[f"/etc/systemd/system/{unit}"] = ((SIMULATORS / unit).read_text(), 0o644)
    files["/etc/kiln-sim/dcgm-counters.csv"] = (COUNTERS.read_text(), 0o644)
    # kiln-node-repair stops the GPU clients before a reset (NVIDIA: no process may hold a GPU): the
    # stand-in of dcgm-exporter runs under its own unit name
    files["/etc/kiln/gpu-clients"] = ("kiln-sim-dcgm-exporter\n", 0o644)
    return files


def init_command(gpus: int, model: str, driver: str, nvlinks: int, hcas: int, rate: int) -> list[str]:
    """Make the node's simulated hardware healthy, unless it already has a state (a reboot keeps faults)."""
    return ["sh", "-c", f"test -f /etc/kiln-sim/state.json || kiln-sim init --gpus {gpus} --model {model} "
                        f"--driver {driver} --nvlinks {nvlinks} --hcas {hcas} --rate {rate} --layer InfiniBand"]
