"""Every version pin kiln knows, with its default: the one place defaults live.

An inventory sets pins in ``group_vars/all/versions.yml`` under ``kiln_versions``; a pin it does not
set takes the default below. A pin whose default is ``None`` has no safe default (the right value
depends on the site's hardware and OS) and must be set whenever a role that uses it runs on some
host; validation names the pin and the hosts. Pins are exact package versions: roles install exactly
that version and hold it; only ``kiln patch`` moves a pin on a live cluster.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pin:
    name: str
    default: str | None
    role: str
    doc: str


PINS: dict[str, Pin] = {
    p.name: p
    for p in (
        Pin("nvidia_driver", None, "nvidia_driver", "NVIDIA driver, e.g. 550.163.01 (nodes with GPUs)"),
        Pin("cuda", None, "cuda", "CUDA toolkit, e.g. 12.4.1 (nodes with GPUs)"),
        Pin("nccl", None, "nccl", "NCCL, e.g. 2.21.5 (nodes with GPUs)"),
        Pin("dcgm", None, "dcgm", "DCGM, e.g. 3.3.9 (nodes with GPUs)"),
        Pin("fabricmanager", None, "fabricmanager",
            "NVIDIA fabric manager (NVSwitch nodes); must equal the driver version"),
        Pin("slurm", None, "slurm", "Slurm packages, e.g. 22.05.8-4+deb12u3 on Debian 12"),
        Pin("ofed", "inbox", "rdma", "RDMA stack: 'inbox' (the distribution's rdma-core) or a DOCA-OFED release"),
        Pin("kernel", "", "base", "running kernel every node must have, e.g. 6.1.0-28-amd64; empty: not enforced"),
        Pin("image_base", "debian12", "image", "base OS of built node images"),
    )
}


def required_pins(roles: set[str]) -> list[str]:
    """Pins without a default that the given roles need."""
    return sorted(p.name for p in PINS.values() if p.role in roles and p.default is None)
