"""A node's BMC over IPMI v2.0 (RMCP+, ``ipmitool -I lanplus``): its power state and a power cycle, for
kiln-remediate's out-of-band step where the BMC speaks no Redfish (checks/redfish.py is the first choice).

What it runs, and nothing more (ipmitool from the OS, on the controller):

- ``chassis power status``: ``Chassis Power is on`` or ``off``;
- ``chassis power on`` for a system that is off (``Chassis Power Control: Up/On``), else
  ``chassis power cycle`` (``Chassis Power Control: Cycle``).

IPMI has no certificate to check: RMCP+ authenticates both ends with the password and encrypts with the
cipher suite asked for (17: HMAC-SHA256 and AES-128, the default; 3: HMAC-SHA1 and AES-128, for older
BMCs), so keep BMCs on the management network. The password reaches ipmitool in its environment
(``IPMI_PASSWORD`` with ``-E``), never on a command line another process can read. Every failure is an
``IpmiError`` naming the BMC and what ipmitool said.
"""

from __future__ import annotations

import os
import re
import subprocess

from checks.redfish import bmc_password

STATUS = re.compile(r"^Chassis Power is (on|off)\s*$", re.M)
DONE = {"on": re.compile(r"^Chassis Power Control: Up/On\s*$", re.M),
        "cycle": re.compile(r"^Chassis Power Control: Cycle\s*$", re.M)}
PASSWORD_MAX = 20  # bytes: IPMI v2.0's password field; ipmitool refuses longer ones
TIMEOUT = 60  # seconds one ipmitool run may take (it retries a lost datagram itself: -R, -N)


class IpmiError(Exception):
    pass


def parse_power_status(text: str) -> str:
    """``on`` or ``off`` from ``ipmitool chassis power status``; IpmiError on anything else."""
    found = STATUS.findall(text)
    if len(found) != 1:
        raise IpmiError(f"ipmitool chassis power status printed {text.strip()[:200]!r}, not 'Chassis Power is on|off'")
    return found[0]


def command(bmc: dict, *words: str) -> list[str]:
    """ipmitool's argument list for ``words`` on ``bmc`` (host, port, user, cipher_suite)."""
    return ["ipmitool", "-I", "lanplus", "-C", str(int(bmc.get("cipher_suite", 17))), "-H", bmc["host"],
            "-p", str(int(bmc.get("port", 623))), "-U", bmc["user"], "-E", "-R", "3", "-N", "2", *words]


def _run(bmc: dict, password: str, *words: str, run=subprocess.run) -> str:
    what = f"BMC {bmc['host']}:{bmc.get('port', 623)} (IPMI)"
    try:
        out = run(command(bmc, *words), capture_output=True, text=True, timeout=TIMEOUT,
                  env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "IPMI_PASSWORD": password})
    except FileNotFoundError:
        raise IpmiError(f"{what}: ipmitool is not installed on this host (kiln's remediation role installs it "
                        "where a BMC speaks IPMI)") from None
    except subprocess.TimeoutExpired:
        raise IpmiError(f"{what}: ipmitool {' '.join(words)} did not finish within {TIMEOUT} s") from None
    if out.returncode != 0:
        said = " | ".join(line.strip() for line in (out.stderr + out.stdout).strip().splitlines()[-2:])
        raise IpmiError(f"{what}: ipmitool {' '.join(words)} exited {out.returncode}: {said[:300] or 'nothing'}: "
                        "check the BMC's address, user, password (kiln's secret bmc.password) and cipher suite")
    return out.stdout


def power_cycle_node(bmc: dict, password_file: str, run=subprocess.run) -> str:
    """Power the node on if it is off, else power-cycle it; the Redfish reset type that names what was
    sent (On or PowerCycle), as kiln-remediate's journal records it for either protocol."""
    password = bmc_password(password_file, bmc.get("host"), IpmiError)
    if len(password.encode()) > PASSWORD_MAX:
        raise IpmiError(f"BMC {bmc.get('host')} (IPMI): its password is longer than {PASSWORD_MAX} bytes, the most "
                        "IPMI v2.0 takes: give the BMC account a shorter one (kiln's secret bmc.password)")
    state = parse_power_status(_run(bmc, password, "chassis", "power", "status", run=run))
    action, sent = ("on", "On") if state == "off" else ("cycle", "PowerCycle")
    out = _run(bmc, password, "chassis", "power", action, run=run)
    if not DONE[action].search(out):
        raise IpmiError(f"BMC {bmc['host']} (IPMI): chassis power {action} printed {out.strip()[:200]!r}")
    return sent
