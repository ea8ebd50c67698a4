"""A daemon kiln starts is judged by what it serves: slurmdbd that is slow to open its port holds back
slurmctld's start (the deploy waits and succeeds), and one that never answers fails the deploy naming
slurmdbd, within kiln_service_start_timeout, with slurmctld left unstarted.

The delay sits in front of the real slurmdbd (a drop-in whose ExecStart sleeps, then execs it): the
unit is active at once and the port opens later, as on a controller whose slurmdbd reads, or converts,
a large database. Without the wait slurmctld starts first and exits ("slurmdbd and/or database must
be up at slurmctld start time"), which is how a first deploy of VMs booted from images failed.
"""

from __future__ import annotations

import re
import shlex
import time

import pytest

from roles.slurm_config import STATE_SAVE
from tests.testbed.slurm_helpers import copy_inventory, deploy_json, ok, on, wait_for

pytestmark = pytest.mark.testbed

SLOW = 25  # seconds slurmdbd takes to open its port
DROPIN = "/etc/systemd/system/slurmdbd.service.d/zz-test-delay.conf"


def _slurmdbd_argv(tb) -> str:
    shown = ok(tb, tb.controller, "systemctl show slurmdbd -p ExecStart --value")
    argv = re.search(r"argv\[\]=([^;]+);", shown)
    assert argv, shown
    return argv.group(1).strip()


def _stop_slurm_and_put(tb, exec_start: str) -> None:
    """slurmctld and slurmdbd stopped, slurmdbd's start replaced by ``exec_start``, and slurmctld's saved
    associations removed, as on a first start: a slurmctld that has them starts without slurmdbd, one
    that has none exits ("slurmdbd and/or database must be up at slurmctld start time")."""
    dropin = f"[Service]\nExecStart=\nExecStart={exec_start}\n"
    ok(tb, tb.controller, f"mkdir -p {DROPIN.rsplit('/', 1)[0]} && printf %s {shlex.quote(dropin)} > {DROPIN} && "
                          "systemctl daemon-reload && systemctl stop slurmctld slurmdbd && "
                          f"rm -f {STATE_SAVE}/assoc_mgr_state {STATE_SAVE}/assoc_mgr_state.old")


def _ops(data: dict, host: str) -> dict:
    return next(h for h in data["hosts"] if h["host"] == host)


def test_deploy_waits_for_a_slow_slurmdbd_and_fails_naming_one_that_never_answers(slurm, tmp_path):
    tb = slurm
    argv = _slurmdbd_argv(tb)
    try:
        # slow: active at once, listening SLOW seconds later
        _stop_slurm_and_put(tb, f"/bin/sh -c 'sleep {SLOW}; exec \"$$0\" \"$$@\"' {argv}")  # $$: systemd's literal $
        since = ok(tb, tb.controller, "date '+%Y-%m-%d %H:%M:%S'").strip()
        start = time.monotonic()
        rc, data, text = deploy_json(tb.inventory, "--limit", tb.controller)
        took = time.monotonic() - start
        assert rc == 0, text
        host = _ops(data, tb.controller)
        assert {"slurm: slurmdbd running", "slurm: slurmdbd stays active after its start",
                "slurm: slurmctld running", "slurm: slurmctld stays active after its start"} <= set(host["changed"]), host
        assert took >= SLOW, f"the deploy took {took:.0f} s: was slurmdbd slow at all?"
        assert ok(tb, tb.controller, "systemctl is-active slurmctld slurmdbd").split() == ["active", "active"]
        assert "sleep" in ok(tb, tb.controller, "systemctl show slurmdbd -p ExecStart --value")  # the delay was in place
        journal = on(tb, tb.controller, f"journalctl -u slurmctld --since '{since}' --no-pager -o cat").stdout
        assert "must be up at slurmctld start time" not in journal, journal
        ok(tb, tb.controller, "sacctmgr -n -P show cluster format=cluster")  # slurmctld registered with slurmdbd
        print(f"slurmdbd {SLOW} s slow to open its port: deploy of the controller waited and succeeded in {took:.0f} s")

        # never: active, never listening; the bound comes from the inventory
        _stop_slurm_and_put(tb, "/bin/sleep infinity")
        inventory = copy_inventory(tb.inventory, tmp_path / "inventory", {"kiln_service_start_timeout": 20})
        start = time.monotonic()
        rc, data, text = deploy_json(inventory, "--limit", tb.controller)
        took = time.monotonic() - start
        assert rc == 1, text
        host = _ops(data, tb.controller)
        assert host["status"] == "failed"
        assert host["failed_operation"] == "slurm: slurmdbd stays active after its start", host
        assert host["error"].splitlines()[-1] == "slurmdbd is active but slurmdbd did not answer within 20 s", host
        assert took < 20 + 90, f"the deploy took {took:.0f} s to give up"
        assert on(tb, tb.controller, "systemctl is-active slurmctld").stdout.strip() != "active"  # never started
        print(f"slurmdbd never answering: deploy failed naming it in {took:.0f} s (bound 20 s)")
    finally:
        ok(tb, tb.controller, f"rm -f {DROPIN} && systemctl daemon-reload && systemctl restart slurmdbd")
        rc, data, text = deploy_json(tb.inventory, "--limit", tb.controller)
        assert rc == 0, text
        wait_for(lambda: on(tb, tb.controller, "sinfo -h -N -o '%N %T'").stdout.count("idle") == len(tb.computes),
                 timeout=120, interval=2, what="every compute node idle again")
