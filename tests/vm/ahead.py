"""The VM tier's cluster deployed ahead of its tests (in CI, by ``tests/prebuild.py``), and adopted by them.

The VM tier runs last and alone: its QEMU VMs are bound by CPU under software emulation. Its first
minutes went on booting three VMs and a first deploy, while the nspawn tier before it leaves about one of
the machine's two cores idle (its tests mostly wait on Slurm, timers and reboots). ``deploy_ahead`` boots
and deploys the same cluster during the nspawn tier, from a cpu cgroup of low weight (``CPU_GROUP``:
``cpu.shares`` 128 against 1024 for everything else), so it takes mostly what the nspawn tier leaves.
Niceness alone does not do that: with the kernel's autogroups each process that starts a session (every
testbed node's supervisor does) is weighed as a group of its own, whatever its nice value; a first try at
nice 19 took about 1.2 of the two cores all through the nspawn tier and slowed it. The VM tier's fixture then
adopts the cluster (``adopt``): only when it was deployed from the very inventory the tier writes and it
still serves (every compute VM idle, a job across them); its processes go back to the root cgroup and to
nice 0 first, as the tier runs them without a cluster ahead. Anything else (no cluster ahead, its deploy
failed, another inventory, not serving) and the fixture deploys its own, as without this, saying why. A
cluster ahead that the tier never adopts is taken down at the run's end (``.ci/run``: ``tests/leftovers.py``).

State, in ``AHEAD``: ``state.json`` (``deploying`` with the deploying process, ``ready`` with the images
and the first deploy's seconds and JSON, or ``failed`` with the error's end), the inventory (``testbed/``)
and its secrets, as a test's own cluster keeps them.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from kiln.testbed.cpu_limit import CPU_ROOT
from kiln.testbed.host import pid_alive
from kiln.testbed.testbed import Testbed
from tests.vm.cluster import VM_NODES, build_images, first_deploy, serving

AHEAD = Path("/var/tmp/kiln-vm-ahead")
STATE = AHEAD / "state.json"
CPU_GROUP = CPU_ROOT / "kiln-vm-ahead"
LOW_SHARES = 128  # of cpu.shares; 1024 is every other group's (an autogroup's, the root's)
DEPLOY_TIMEOUT = 2400


def low_weight(group: Path = CPU_GROUP) -> None:
    """This process, and what it starts from now on, in ``group`` of ``LOW_SHARES`` (cgroup v1 cpu)."""
    group.mkdir(exist_ok=True)
    (group / "cpu.shares").write_text(f"{LOW_SHARES}\n")
    (group / "cgroup.procs").write_text(f"{os.getpid()}\n")


def full_weight(group: Path = CPU_GROUP) -> None:
    """Every process of ``group`` back in the root cgroup (each then weighed as without it), and the group
    removed; asked again for a process forked while the others moved. Nothing to do without the group."""
    if not group.is_dir():
        return
    (group / "cpu.shares").write_text("1024\n")  # at once, whatever the moves below take
    for _ in range(10):
        pids = (group / "cgroup.procs").read_text().split()
        if not pids:
            break
        for pid in pids:
            try:
                (group.parent / "cgroup.procs").write_text(f"{pid}\n")
            except ProcessLookupError:
                pass  # gone meanwhile
    try:
        group.rmdir()
    except OSError:
        pass  # a process still in it: weighed as the root's others (1024) all the same


def _write_state(state: dict) -> None:
    tmp = STATE.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    tmp.rename(STATE)


def read_state() -> dict | None:
    try:
        return json.loads(STATE.read_text())
    except (OSError, ValueError):
        return None


def deploy_ahead(tb: Testbed) -> dict:
    """Boot and deploy ``tb``'s VM cluster from its images into ``AHEAD`` (what was there is taken down
    first); the state says ``ready`` or ``failed``, and a failure is raised."""
    shutil.rmtree(AHEAD, ignore_errors=True)
    AHEAD.mkdir(mode=0o700, parents=True)
    _write_state({"state": "deploying", "pid": os.getpid()})
    try:
        images = build_images(tb, AHEAD / "testbed")
        # on what the others leave: minutes more than the tier's own deploy, alone on the machine, takes
        steps = first_deploy(tb, AHEAD / "testbed", images, deploy_timeout=DEPLOY_TIMEOUT)
    except BaseException as error:
        _write_state({"state": "failed", "error": str(error)[-3000:]})
        tb.down()  # its VMs would go on taking CPU from the nspawn tier until the VM tier boots its own
        raise
    _write_state({"state": "ready", "images": list(images), "steps": steps})
    return steps


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _normal_priority(tb: Testbed) -> None:
    """Every process the deploy ahead left running for ``tb`` (its VMs' QEMUs and supervisors, which start
    the next QEMU at a reboot, its BMC, its apt proxy, SSH connections held open) back from nice 19 to 0,
    every thread: the tier's tests then time what they time as they would without a cluster ahead. A
    process is the testbed's when its command line names it; only nice-19 ones are touched."""
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if tb.name not in (proc / "cmdline").read_bytes().decode(errors="replace") or \
                    os.getpriority(os.PRIO_PROCESS, int(proc.name)) != 19:
                continue
            for task in (proc / "task").iterdir():
                os.setpriority(os.PRIO_PROCESS, int(task.name), 0)
        except OSError:
            continue  # a process or thread that has just ended


def adopt(tb: Testbed, say, timeout: float = 2400) -> dict | None:
    """The cluster deployed ahead, as ``first_deploy`` returns its steps, with ``tb`` set up on it
    (inventory, images, controller, computes); None, said why, when the tier must deploy its own. Waits for
    a deploy ahead still running, up to ``timeout``."""
    state = read_state()
    if state is None:
        return None
    started, said = time.monotonic(), False
    while state and state["state"] == "deploying" and pid_alive(state.get("pid")):
        if time.monotonic() - started > timeout:
            say(f"the VM cluster deployed ahead is still deploying after {timeout:.0f} s: the tier deploys its own")
            return None
        if not said:
            say("the VM tier waits for its cluster's deploy ahead to end")
            said = True
        time.sleep(5)
        state = read_state()
    if not state or state["state"] != "ready":
        why = state.get("error", "its deploy ended without a result") if state else "no state"
        say(f"the VM cluster deployed ahead is not ready ({why[-600:]}): the tier deploys its own")
        return None
    with tempfile.TemporaryDirectory(prefix="kiln-vm-inventory-") as scratch:
        tb.write_inventory(VM_NODES, Path(scratch) / "testbed")
        if _files(Path(scratch) / "testbed") != _files(AHEAD / "testbed"):
            say("the VM cluster deployed ahead has another inventory than this run's: the tier deploys its own")
            return None
    tb.inventory, tb.images = AHEAD / "testbed", tuple(state["images"])
    full_weight()
    _normal_priority(tb)
    try:
        serving(tb)
    except AssertionError as error:
        say(f"the VM cluster deployed ahead does not serve ({str(error)[-600:]}): the tier deploys its own")
        return None
    return state["steps"]
