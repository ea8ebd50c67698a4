"""Record what real tools print on the VM tier (Debian's rdma-core and perftest over soft-RoCE, the
guest kernel's log) into tests/recorded/captured/, for the parsers' tests: run on a VM cluster made as
the VM tier makes it (not a test of the suite; minutes under emulation).

    python -m tests.vm.capture_outputs
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from kiln.testbed.testbed import Testbed
from tests.testbed.slurm_helpers import ok, on
from tests.vm.cluster import VM_NAME, build_images, first_deploy

CAPTURED = Path(__file__).resolve().parents[1] / "recorded" / "captured"
PERF = "ib_write_bw -d rxe0 -x {gid} -s 65536 -n 200 -F -p 18515"


def _pair(tb: Testbed, server: str, client: str, args: str) -> str:
    """One ib_write_bw run, ``server`` listening, ``client`` connecting to it; the client's output."""
    address = next(n.address for n in tb.recorded_nodes() if n.name == server)
    on(tb, server, "pkill -x ib_write_bw; true")
    ok(tb, server, f"(setsid timeout 120 {args} >/tmp/perf-server.log 2>&1 </dev/null &) ; sleep 3")
    out = on(tb, client, f"timeout 120 {args} {address} 2>&1", timeout=150)
    return out.stdout


def main() -> int:
    tb = Testbed(VM_NAME, progress=lambda message: None, node_kind="vm")
    inventory = Path(tempfile.mkdtemp(prefix="kiln-capture-")) / "testbed"
    images = build_images(tb, inventory)
    first_deploy(tb, inventory, images)
    server, client = tb.computes
    try:
        gid = next(g for g in ("1", "3", "0")
                   if "BW average" in _pair(tb, server, client, PERF.format(gid=g) + " --report_gbits"))
        outputs = {
            "ib_write_bw/kiln-vm-bidirectional-rxe.txt": _pair(tb, server, client, PERF.format(gid=gid) + " -b --report_gbits"),
            "ib_write_bw/kiln-vm-mb-per-sec-rxe.txt": _pair(tb, server, client, PERF.format(gid=gid)),
            "kernel-xid/kiln-vm-dmesg-T.log": ok(tb, client, "dmesg -T | tail -n 40"),
        }
        for rel, text in outputs.items():
            (CAPTURED / rel).write_text(text)
            print(f"{rel}: {len(text.splitlines())} lines")
        print(f"captured {time.strftime('%Y-%m-%d')} on {client} -> {server}, gid index {gid}")
    finally:
        tb.down(inventory_dir=inventory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
