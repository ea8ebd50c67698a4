"""The NVIDIA driver role live on the testbed, with Debian's non-free packages (535.261.03-1).

The nodes are containers without a GPU and cannot load kernel modules: the testbed inventory asks for
the user-space driver only (``kiln_nvidia_kernel_modules: none``). What is shown is real: packages from
Debian through the testbed's apt proxy, holds, the apt preference against the newer security version,
the kernel guard, /etc/nccl.conf and systemd ordering. Nothing here is GPU proof.
"""

from __future__ import annotations

import pytest

from kiln.testbed.inventory import DRIVER_UPGRADE, TESTBED_VERSIONS
from tests.testbed.slurm_helpers import copy_inventory, deploy_json, ok, on

pytestmark = pytest.mark.testbed
PIN = TESTBED_VERSIONS["nvidia_driver"]
REPO = "/srv/kiln-guard-repo"


@pytest.mark.proves("nvidia_driver", tier="nspawn")
def test_the_pinned_driver_is_installed_held_and_survives_apt_get_upgrade(slurm):
    for node in slurm.computes:
        assert ok(slurm, node, "dpkg-query -W -f='${Version}' nvidia-smi") == PIN
        assert "nvidia-smi" in ok(slurm, node, "apt-mark showhold").split()
        policy = ok(slurm, node, "apt-cache policy nvidia-smi libnvidia-ml1")
        assert DRIVER_UPGRADE in policy and f"Candidate: {PIN}" in policy  # newer exists, pin wins
    node = slurm.computes[0]
    ok(slurm, node, "DEBIAN_FRONTEND=noninteractive apt-get upgrade -y -q >/dev/null", timeout=600)
    assert ok(slurm, node, "dpkg-query -W -f='${Version}' nvidia-smi libnvidia-ml1") == PIN + PIN


def test_the_kernel_guard_ran_and_passed_in_the_first_deploy(slurm):
    for node in slurm.computes:
        host = next(h for h in slurm.first_deploy["hosts"] if h["host"] == node)
        assert host["status"] == "changed" and "nvidia_driver: 535.261.03 (none modules), held" in host["changed"]
        # user-space only in a container: nothing to reboot for
        assert host["reboot_required"] == []
        assert not ok(slurm, node, "dpkg-query -W -f='${Package}\\n' 'linux-image-*' 2>/dev/null || true").strip()


def test_nccl_conf_and_slurmd_after_nvidia_persistenced(slurm):
    for node in slurm.computes:
        conf = ok(slurm, node, "cat /etc/nccl.conf").splitlines()
        assert conf[1:] == ["NCCL_IB_HCA=mlx5_0,mlx5_1", "NCCL_NET_GDR_LEVEL=PHB", "NCCL_SOCKET_IFNAME=host0"]
        assert "nvidia-persistenced.service" in ok(slurm, node, "systemctl show -p After --value slurmd").split()
        assert ok(slurm, node, "systemctl is-enabled nvidia-persistenced").strip() == "enabled"
        # no driver loaded here: skipped by its condition, so the node is not "degraded"
        assert on(slurm, node, "systemctl is-active nvidia-persistenced").stdout.strip() == "inactive"
        assert ok(slurm, node, "systemctl show -p ConditionResult --value nvidia-persistenced").strip() == "no"
    assert "nccl: /etc/nccl.conf from the fabric" not in {
        op for h in slurm.first_deploy["hosts"] if h["host"] == slurm.controller for op in h["changed"]}


def _guard_repo(tb, node) -> None:
    """A local apt repository on ``node``: a package of the driver's version that pulls a kernel."""
    ok(tb, node, f"""set -e; rm -rf {REPO}; mkdir -p {REPO}/build; cd {REPO}/build
mk() {{ mkdir -p $1/DEBIAN; printf 'Package: %s\\nVersion: %s\\nArchitecture: all\\nMaintainer: kiln tests <t@kiln>\\nDescription: kiln kernel guard test\\n%b' "$1" "$2" "$3" > $1/DEBIAN/control; dpkg-deb -b $1 {REPO}/$1.deb >/dev/null; }}
mk linux-image-6.1.0-99-amd64 6.1.0-99 ''
mk nvidia-kiln-guard-test {PIN} 'Depends: linux-image-6.1.0-99-amd64\\n'
cd {REPO}; for d in *.deb; do dpkg-deb -f $d; echo "Filename: ./$d"; echo "Size: $(stat -c %s $d)"; echo "SHA256: $(sha256sum $d | cut -d' ' -f1)"; echo; done > Packages
echo 'deb [trusted=yes] file:{REPO} ./' > /etc/apt/sources.list.d/kiln-guard-test.list""")


def test_the_kernel_guard_stops_a_driver_install_that_pulls_an_unpinned_kernel(slurm, tmp_path):
    node = slurm.computes[0]
    _guard_repo(slurm, node)
    try:
        inventory = copy_inventory(slurm.inventory, tmp_path / "inventory",
                                   {"kiln_nvidia_driver_extra_packages": ["nvidia-kiln-guard-test"]})
        rc, data, text = deploy_json(inventory, "--limit", node, "--roles", "nvidia_driver")
        assert rc == 1, text
        (host,) = data["hosts"]
        assert host["status"] == "failed" and host["failed_operation"].startswith("nvidia_driver: 535.261.03")
        assert "kernel guard" in host["error"] and "linux-image-6.1.0-99-amd64" in host["error"], host["error"]
        assert on(slurm, node, "dpkg -s nvidia-kiln-guard-test linux-image-6.1.0-99-amd64").returncode != 0
        assert "nvidia-smi" in ok(slurm, node, "apt-mark showhold").split()  # holds untouched
        # with that kernel pinned, the guard lets it through (shown by the dry run of apt alone)
        allowed = on(slurm, node, "apt-get install -s -q nvidia-kiln-guard-test | grep '^Inst linux-image'")
        assert "linux-image-6.1.0-99-amd64" in allowed.stdout
    finally:
        ok(slurm, node, f"rm -rf {REPO} /etc/apt/sources.list.d/kiln-guard-test.list && apt-get update -q >/dev/null")
