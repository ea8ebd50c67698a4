"""What an earlier run of the suite left running on this machine, taken down before a new run starts
(``.ci/run``): a run stopped at CI's time limit leaves its testbeds' nodes and VMs up, and their emulated
CPUs would then share this machine's two cores with the whole next run, making it slower until it too is
stopped at the limit. Only the suite's own testbeds and its Vagrant cluster are touched; an operator's
testbed of another name is left alone. Never run it beside a run of the suite: it takes that run's testbeds
down too.

    python -m tests.leftovers
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time

# Every testbed name the suite uses: the lanes' shared testbeds (tests/testbed/conftest.py), the VM tier's
# cluster (tests/vm/cluster.py), the Debian 13 testbed, the installed wheel's, and test_lifecycle's own
SUITE_TESTBEDS = ("kilntest", "kilnlb", "kilnvm", "kilnd13", "wheel", "kilndown", "kilnkill", "kilnapt")


def _say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] leftovers: {line}", flush=True)


def testbeds() -> list[str]:
    """The suite's testbeds this machine still records (up, stopped or half made); ``kilntgwN`` is the shared
    testbed of a worker pytest-xdist started in place of a crashed one (tests/testbed/conftest.py)."""
    from kiln.testbed.testbed import STATE_ROOT
    found = [p.name for p in STATE_ROOT.iterdir()] if STATE_ROOT.is_dir() else []
    return sorted(n for n in found if n in SUITE_TESTBEDS or re.fullmatch(r"kilntgw[0-9]+", n))


def vagrant_domains() -> list[str]:
    from kiln import vagrant as vg
    if shutil.which("virsh") is None or subprocess.run(["pgrep", "-x", "libvirtd"], capture_output=True).returncode:
        return []
    out = subprocess.run(["virsh", "-c", "qemu:///system", "list", "--all", "--name"], capture_output=True, text=True,
                         timeout=60).stdout
    return [d for d in out.split() if d.startswith(vg.CLUSTER)]


def main() -> int:
    from kiln import vagrant as vg
    from kiln.testbed.testbed import Testbed
    for name in testbeds():
        started = time.monotonic()
        try:
            Testbed(name, progress=lambda message: None).down()
            _say(f"took down testbed {name} ({time.monotonic() - started:.0f} s)")
        except Exception as error:  # noqa: BLE001 - one leftover that resists must not keep the others up
            _say(f"testbed {name} could not be taken down: {error}")
    for domain in vagrant_domains():
        for args in (["destroy", domain], ["undefine", domain, "--remove-all-storage", "--nvram"]):
            subprocess.run(["virsh", "-c", "qemu:///system", *args], capture_output=True, timeout=120)
        _say(f"removed the Vagrant cluster's VM {domain}")
    if (vg.STATE / "host.json").exists():
        try:
            for line in vg.host_stop():
                _say(line)
        except Exception as error:  # noqa: BLE001
            _say(f"the Vagrant host's daemons and pool could not be stopped: {error}")
    if not testbeds() and not vagrant_domains():
        return 0
    _say("something of an earlier run could not be taken down: " + ", ".join(testbeds() + vagrant_domains()))
    return 1


if __name__ == "__main__":
    sys.exit(main())
