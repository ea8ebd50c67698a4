"""Validation of the NVIDIA stack's settings and pins as a whole, before any connection.

What one package source can give is fixed: Debian's non-free archive has the driver, nvidia-smi and
an older CUDA toolkit, but no NCCL, DCGM or fabric manager; Ubuntu's archive has the -server drivers,
fabric manager, NCCL and the toolkit, but no DCGM; NVIDIA's CUDA repository has everything. A pin the
chosen source cannot satisfy is an error naming the pin, instead of an apt failure on every node.
"""

from __future__ import annotations

from typing import Any

from kiln.inventory import model
from kiln.inventory.schema import SETTINGS
from kiln.versions import upstream

# Pins each source cannot satisfy (set them to "" there).
UNAVAILABLE = {
    "debian": ("nccl", "dcgm", "dcgm_exporter", "fabricmanager"),
    "ubuntu": ("dcgm", "dcgm_exporter"),
    "cuda": (),
}
# The OS each source serves. NVIDIA's CUDA repository has no Debian 13 tree (repos/ lists debian10 to
# debian12): Debian 13's GPU nodes take Debian's own non-free driver.
SOURCE_OS = {"debian": ("debian12", "debian13"), "ubuntu": ("ubuntu2204", "ubuntu2404"),
             "cuda": ("debian12", "ubuntu2204", "ubuntu2404", "rocky9")}


def check(raw, hosts: dict[str, model.Host], values: dict[str, Any], pins: dict[str, str], out) -> None:
    gpu_hosts = [h for h in hosts.values() if "nvidia_driver" in h.roles]
    if not gpu_hosts:
        return
    source = values.get("kiln_nvidia_source", SETTINGS["kiln_nvidia_source"].default)
    settings_file, settings_line = raw.origin("kiln_nvidia_source", default="group_vars/all/cluster.yml")
    pins_file, pins_line = raw.origin("kiln_versions", default="group_vars/all/versions.yml")
    add_setting = lambda key, message: out.add(settings_file, key, message, settings_line)  # noqa: E731
    add_pin = lambda key, message: out.add(pins_file, key, message, pins_line)  # noqa: E731
    wrong_os = sorted({h.os for h in gpu_hosts if h.os not in SOURCE_OS[source]})
    if wrong_os:
        serving = [name for name, oses in SOURCE_OS.items() if all(os in oses for os in wrong_os)]
        add_setting("kiln_nvidia_source", f"source {source!r} has no packages for {', '.join(wrong_os)} "
                f"(GPU nodes run it): use " + (" or ".join(serving) if serving else "one source per OS in "
                "clusters of their own") + f" (sources by OS: " + "; ".join(
                    f"{name}: {', '.join(oses)}" for name, oses in SOURCE_OS.items()) + ")")
    for pin in UNAVAILABLE[source]:
        if pins.get(pin):
            add_pin(f"kiln_versions.{pin}", f"{pin} {pins[pin]!r} is not packaged in the {source} "
                    "archive: set it to \"\" (leave it out) or use kiln_nvidia_source: cuda")
    if source == "cuda" and pins.get("nccl") and not pins.get("cuda"):
        add_pin("kiln_versions.nccl", "NVIDIA's NCCL packages are built per CUDA version "
                "(2.21.5-1+cuda12.4): set the cuda pin too")
    fabric = pins.get("fabricmanager")
    if fabric and any(h.nvswitch for h in gpu_hosts) and upstream(fabric) != upstream(pins["nvidia_driver"]):
        add_pin("kiln_versions.fabricmanager", f"fabric manager {fabric} must have the driver's version "
                f"{upstream(pins['nvidia_driver'])} (NVIDIA refuses to start a mismatched one)")
    if pins.get("pyxis") and not pins.get("enroot"):
        add_pin("kiln_versions.pyxis", "pyxis runs containers with enroot: set the enroot pin too")
