"""The ssh command line kiln runs to reach an inventory host from the operator's machine (kiln check's
backend, kiln deploy's firewall confirmation): every option on the command line, where it wins over any
ssh_config, strict host keys always, every inventory value one word of ssh's argv."""

from __future__ import annotations

import os
from pathlib import Path

from kiln.inventory.model import Host

# Key exchange tried first (the rest of OpenSSH's defaults stay allowed after it, so FIPS-only nodes still
# connect): X25519, as kiln deploy's paramiko uses. OpenSSH's default post-quantum hybrid
# (sntrup761x25519) costs about 0.1 s of CPU per connection on each end, measured on the testbed; health
# check output is not secret, and at thousands of nodes that is minutes of CPU per run.
KEX_FIRST = "^curve25519-sha256,curve25519-sha256@libssh.org"


def ssh_options(host: Host, control_dir: Path) -> list[str]:
    """kiln's ssh options for ``host``, as ``-o`` words: given on the command line, they win over any
    ssh_config (ssh takes the first value it reads), so no site file can switch host keys off."""
    c = host.connection
    # ServerAlive: a node that dies while it is being checked (power lost, no TCP reset) ends its ssh
    # within about 15 s instead of the kernel's retransmission timeout: NODE_UNREACHABLE, bounded.
    options = ["StrictHostKeyChecking=yes", "BatchMode=yes", "ConnectTimeout=10", "ServerAliveInterval=5",
               "ServerAliveCountMax=3", "LogLevel=ERROR",
               "ControlMaster=auto", f"ControlPath={control_dir}/%C", "ControlPersist=15",
               f"KexAlgorithms={KEX_FIRST}", f"User={c.get('ssh_user', 'root')}", f"Port={c.get('ssh_port', 22)}"]
    if c.get("ssh_known_hosts_file"):
        options.append(f"UserKnownHostsFile={c['ssh_known_hosts_file']}")
    if c.get("ssh_key"):
        options.append(f"IdentityFile={c['ssh_key']}")
    return [word for option in options for word in ("-o", option)]


def ssh_command(host: Host, control_dir: Path, command: str) -> list[str]:
    """The whole ssh argv kiln runs for ``command`` on ``host`` (what the backend below builds)."""
    config = host.connection.get("ssh_config_file") or os.devnull
    return ["ssh", *ssh_options(host, control_dir), "-F", config, "--",
            str(host.connection.get("ssh_hostname", host.name)), command]
