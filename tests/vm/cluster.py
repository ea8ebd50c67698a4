"""The VM tier's cluster made as an operator makes one (README, VM nodes): the inventory first, images
of the compute node type and of the controller built from it as qcow2 disks, the VMs booted from them,
one first deploy, every compute VM idle in Slurm and a job across them. Used by the VM tier's shared
fixture (tests/vm/conftest.py), by ``python -m tests.vm.first_deploys`` (first deploys in a row) and by
``tests/prebuild.py``, which in CI boots and deploys the cluster ahead of the tier and hands it over
(``HANDOFF``: a JSON file the fixture reads; ``prebuilt``)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Callable

from kiln.testbed.testbed import Testbed
from tests.testbed.slurm_helpers import deploy_json, kiln, ok, on, wait_for

VM_NAME = "kilnvm"
VM_NODES = 3  # 1 controller + 2 compute
# The VMs' OS: Debian 12 in CI; KILN_TEST_VM_OS=debian13 runs the whole tier on Debian 13 (cgroup v2 on its
# own kernel, the storage and fabric roles) by hand.
VM_OS = os.environ.get("KILN_TEST_VM_OS", "debian12")


def build_image(inventory: Path, *target: str) -> str:
    out = kiln("image", "build", "-i", str(inventory), *target, "--format", "qcow2", "--json", timeout=1800)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)["images"][0]["name"]


def build_images(tb: Testbed, inventory: Path) -> tuple[str, str]:
    tb.inventory = inventory
    tb.write_inventory(VM_NODES, inventory)
    return (build_image(inventory, "--node-type", "testbed_compute"),
            build_image(inventory, "--group", "slurm_controller"))


def first_deploy(tb: Testbed, inventory: Path, images: tuple[str, str]) -> dict:
    """Boot fresh VMs from ``images`` (nothing of an earlier run's disks or Slurm state), deploy once,
    wait for every compute VM idle in sinfo and run a job across them. Returns the seconds of each
    step and the deploy's JSON; the deploy's own failure is raised with its output."""
    tb.images = images
    started = time.monotonic()
    tb.up(VM_NODES, inventory_dir=inventory, images=images, fresh=True)
    booted = time.monotonic()
    rc, data, text = deploy_json(inventory)
    deployed = time.monotonic()
    assert rc == 0, text
    nodes = [n.name for n in tb.recorded_nodes()]
    tb.controller, tb.computes = nodes[0], nodes[1:]
    try:
        wait_for(lambda: on(tb, tb.controller, "sinfo -h -N -o '%N %T'").stdout.count("idle") == len(tb.computes),
                 timeout=180, interval=3, what="every compute VM idle in sinfo")
    except AssertionError as timed_out:
        # Say why: the node states with their reasons, and the compute VMs' slurmd logs.
        why = on(tb, tb.controller, "sinfo -N -o '%N %T %E'; scontrol show nodes | grep -E 'NodeName|State|Reason'").stdout
        logs = "".join(on(tb, n, "journalctl -u slurmd --no-pager -n 30").stdout for n in tb.computes)
        raise AssertionError(f"{timed_out}\n{why}\n{logs}") from None
    ok(tb, tb.controller, f"srun -N{len(tb.computes)} hostname", timeout=180)
    done = time.monotonic()
    return {"boot": booted - started, "deploy": deployed - booted, "idle_and_job": done - deployed,
            "deploy_json": data}


# In CI (.ci/run sets it for the prebuild and the tests alike): the file where tests/prebuild.py says what
# it did with the VM cluster: {"state": "booting", "pid"}, then "ready" (inventory, images, steps) or
# "failed" (error).
HANDOFF = "KILN_TEST_VM_HANDOFF"
PREBUILT_PREFIX = "kiln-ci-vm-"  # the prebuild's inventory's directory: the tier removes it when done


def write_handoff(data: dict) -> None:
    path = os.environ.get(HANDOFF)
    if path:
        Path(path).write_text(json.dumps(data) + "\n")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except (OSError, TypeError):
        return False


def prebuilt(tb: Testbed, say: Callable[[str], None], timeout: float = 1800) -> dict | None:
    """The cluster tests/prebuild.py booted and deployed, taken over as ``first_deploy`` leaves one (its
    steps' seconds returned), once the prebuild has finished with it; None where there is none to take
    (not CI, its prebuild failed or died, or a VM or Slurm is not up), the reason said."""
    path = os.environ.get(HANDOFF)
    if not path:
        return None
    deadline = time.monotonic() + timeout
    while True:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            say(f"no VM cluster handed over in {path}")
            return None
        if data.get("state") != "booting" or not _alive(data.get("pid")) or time.monotonic() > deadline:
            break
        time.sleep(5)
    if data.get("state") != "ready":
        say(f"the prebuild's VM cluster is not ready ({data.get('state')}: {data.get('error', 'its prebuild ended')}); "
            "booting one here")
        return None
    tb.inventory, tb.images = Path(data["inventory"]), tuple(data["images"])
    nodes = [n.name for n in tb.recorded_nodes()]
    tb.controller, tb.computes = nodes[0], nodes[1:]
    states = {n["name"]: n["state"] for n in tb.status()["nodes"]}
    idle = on(tb, tb.controller, "sinfo -h -N -o '%N %T'", timeout=60).stdout if len(states) == VM_NODES else ""
    if any(s not in ("running", "degraded") for s in states.values()) or idle.count("idle") != len(tb.computes):
        say(f"the prebuild's VM cluster is not whole ({states}; sinfo: {idle.strip()!r}); booting one here")
        return None
    priority_back(tb)
    return data["steps"]


def priority_back(tb: Testbed) -> None:
    """Every thread of the testbed's VM supervisors and QEMUs back to the normal CPU priority: the
    prebuild booted them at nice 19, beside the nspawn tier, and a supervisor's QEMU after a reboot
    inherits its nice (Linux keeps a nice per thread: each one is set)."""
    mark = f"{tb.state}/nodes/".encode()
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and mark in (proc / "cmdline").read_bytes():
                for task in (proc / "task").iterdir():
                    os.setpriority(os.PRIO_PROCESS, int(task.name), 0)
        except OSError:
            continue  # a process or thread that ended meanwhile
