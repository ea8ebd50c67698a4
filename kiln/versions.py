"""Every version pin kiln knows, with its default: the one place defaults live.

An inventory sets pins in ``group_vars/all/versions.yml`` under ``kiln_versions``; a pin it does not
set takes the default below. A pin whose default is ``None`` has no safe default (the right value
depends on the site's hardware and OS) and must be set whenever a role that uses it runs on some
host; validation names the pin and the hosts. A pin marked ``optional`` may be set to "" to leave
that component out (it comes with the node image, or the site does not use it). Pins are exact
package versions as the package source spells them (``535.261.03-1`` from Debian,
``550.163.01-0ubuntu1`` from NVIDIA's repository for Ubuntu): roles install exactly that version and
hold it; only ``kiln patch`` moves a pin on a live cluster. What the checks compare with the node
(``nvidia-smi``'s driver version) is the upstream part, ``upstream(pin)``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pin:
    name: str
    default: str | None
    role: str
    doc: str
    optional: bool = False


PINS: dict[str, Pin] = {
    p.name: p
    for p in (
        Pin("nvidia_driver", None, "nvidia_driver",
            "NVIDIA driver package version, e.g. 535.261.03-1 (Debian) or 550.163.01-0ubuntu1 (nodes with GPUs)"),
        Pin("cuda", None, "cuda", "CUDA toolkit package version, e.g. 12.4.1-1; \"\": no toolkit", True),
        Pin("nccl", None, "nccl", "NCCL package version without the +cuda suffix, e.g. 2.21.5-1; \"\": none", True),
        Pin("nccl_tests", "2.13.11", "nccl", "nccl-tests release built into /opt/nccl-tests"),
        Pin("dcgm", None, "dcgm", "DCGM package version, e.g. 1:3.3.9 or 1:4.2.3-1; \"\": no DCGM", True),
        Pin("dcgm_exporter", "", "dcgm", "dcgm-exporter package version (DCGM 4 repositories); \"\": none", True),
        Pin("fabricmanager", None, "fabricmanager",
            "NVIDIA fabric manager (NVSwitch nodes); same upstream version as the driver; \"\": not installed", True),
        Pin("nvidia_container_toolkit", "", "containers", "nvidia-container-toolkit version; \"\": none", True),
        Pin("enroot", "", "containers", "enroot release, e.g. 3.5.0 (containers in Slurm jobs); \"\": none", True),
        Pin("pyxis", "", "containers", "pyxis release, e.g. 0.20.0 (srun --container-image); \"\": none", True),
        Pin("slurm", None, "slurm", "Slurm packages, e.g. 22.05.8-4+deb12u3 on Debian 12"),
        Pin("ofed", "", "rdma", "DOCA-OFED or MLNX_OFED package version (fabrics with stack doca or mlnx_ofed)",
            True),
        Pin("lustre", "", "storage", "Lustre client packages, e.g. 2.15.6-1.el9 (nodes with a lustre mount)", True),
        Pin("beegfs", "", "storage", "BeeGFS client packages, e.g. 7.4.5 (nodes with a beegfs mount)", True),
        Pin("prometheus", None, "monitoring", "Prometheus package (hosts in the monitoring group), e.g. "
            "2.42.0+ds-5+deb12u1 on Debian 12"),
        Pin("alertmanager", None, "monitoring", "Alertmanager package (hosts in the monitoring group), e.g. "
            "0.25.0-1+b4 on Debian 12"),
        Pin("node_exporter", None, "monitoring", "prometheus-node-exporter package (every host of a monitored "
            "cluster), e.g. 1.5.0-1+b6 on Debian 12"),
        Pin("kernel", "", "base", "running kernel every node must have, e.g. 6.1.0-28-amd64; empty: not enforced"),
    )
}


def required_pins(roles: set[str]) -> list[str]:
    """Pins without a default that the given roles need."""
    return sorted(p.name for p in PINS.values() if p.role in roles and p.default is None)


def upstream(pin: str) -> str:
    """The upstream version inside a package version: ``1:3.3.9-1`` -> ``3.3.9``,
    ``535.261.03-1`` -> ``535.261.03``, ``550.163.01-0ubuntu1`` -> ``550.163.01``."""
    return pin.split(":", 1)[-1].split("-", 1)[0].split("~", 1)[0]
