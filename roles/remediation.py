"""The remediation role: kiln-remediate on the controller repairs the compute nodes kiln's checks (or
Slurm) took out of service (checks/remediation.py), where ``kiln_remediation.enabled``.

Defaults (every setting in ``kiln_remediation``, kiln/inventory/monitoring_schema.py ``Remediation``):

+ the first controller: the ``checks`` package in /usr/local/lib/kiln, /usr/local/sbin/kiln-remediate,
  /etc/kiln/remediation.json (the settings, each compute node's address), the key
  /etc/kiln/remediation/id_ed25519 (0600, ``secrets/<cluster>/remediation_ed25519``), the compute nodes'
  host keys from the inventory's known_hosts (/etc/kiln/remediation/known_hosts: strict checking), and
  kiln-remediate.service (restarted when its settings change). Where kiln deploys monitoring: the
  first monitoring host's Alertmanager in the settings and its password (user kiln) in
  /etc/kiln/remediation/alertmanager.password (0600), so a reboot or GPU reset is silenced while it
  lasts (checks/alertmanager.py). Where compute nodes name their BMC (``kiln_bmc``): each one's
  address, user and fingerprint (or its CA, /etc/kiln/remediation/bmc-ca/NODE.pem; IPMI: its cipher suite,
  and ipmitool installed) in the settings, and
  the BMCs' password (``secrets/<cluster>/bmc.password``) in /etc/kiln/remediation/bmc.password (0600),
  for the power cycle of a node that answers nothing. Journal and audit trail:
  /var/lib/kiln/remediation/journal.jsonl; metrics: kiln-remediation.prom in ``kiln_check_textfile_dir``.
+ compute nodes: /usr/local/sbin/kiln-node-repair (checks/node_repair.py) and one line in root's
  authorized_keys: the key may run only that program (``restrict,command=...``), only from the
  controllers' addresses.
+ disabled: the service stopped and disabled, the key's line removed from the compute nodes.
"""

from __future__ import annotations

import json
from pathlib import Path

from pyinfra.operations import server

from kiln.known_hosts import known_hosts_lines
from kiln.monitoring import ALERTMANAGER_PORT
from kiln.monitoring.alerts import base_url
from roles.monitoring_config import CA_FILE
from kiln.monitoring.silences import Silences
from kiln.secrets import BMC_PASSWORD as BMC_PASSWORD_SECRET
from kiln.secrets import public_ssh_key
from kiln.shell import quote
from roles import health, secret_files
from roles.context import NodeContext, changed_any, when_changed
from kiln.inventory.formats import canonical_address
from roles.operations import (DAEMON_RELOAD, line_present, line_removed, managed_directory, pinned_packages,
                              service_restarted, service_running)

AUTHORIZED_KEYS = "/root/.ssh/authorized_keys"
UNIT = "/etc/systemd/system/kiln-remediate.service"
CONFIG = "/etc/kiln/remediation.json"
KEY = secret_files.REMEDIATION_KEY
KNOWN_HOSTS = "/etc/kiln/remediation/known_hosts"
ALERTMANAGER_PASSWORD = secret_files.REMEDIATION_ALERTMANAGER_PASSWORD
BMC_PASSWORD = secret_files.REMEDIATION_BMC_PASSWORD
BMC_CA_DIR = "/etc/kiln/remediation/bmc-ca"
REMEDIATE = """#!/usr/bin/python3
# kiln-remediate (kiln's remediation role); see /usr/local/lib/kiln/checks/remediation.py
import sys
sys.path.insert(0, "/usr/local/lib/kiln")
from checks.remediation import main
sys.exit(main())
"""
REPAIR = """#!/usr/bin/python3
# kiln-node-repair: what kiln-remediate's key may run here (kiln's remediation role); see
# /usr/local/lib/kiln/checks/node_repair.py
import sys
sys.path.insert(0, "/usr/local/lib/kiln")
from checks.node_repair import main
sys.exit(main())
"""
SERVICE = """[Unit]
Description=kiln-remediate: repairs compute nodes kiln's checks or Slurm took out of service
After=network-online.target slurmctld.service
Wants=network-online.target

[Service]
ExecStart=/usr/local/sbin/kiln-remediate
Restart=always
RestartSec=10

[Install]
WantedBy=multi-user.target
"""


def key_marker(cluster_name: str) -> str:
    return f"kiln-remediation@{cluster_name}"


def authorized_line(ctx: NodeContext) -> str:
    controllers = ",".join(sorted({canonical_address(h.address) for h in ctx.cluster.controllers}))
    return (f'restrict,command="/usr/local/sbin/kiln-node-repair",from="{controllers}" '
            f"{public_ssh_key(ctx.secrets.remediation_key)} {key_marker(ctx.cluster.name)}")


def config(ctx: NodeContext) -> dict:
    s = ctx.cluster.setting("remediation")
    return {"settings": s.model_dump(), "key": KEY, "known_hosts": KNOWN_HOSTS,
            "textfile_dir": ctx.cluster.setting("check_textfile_dir") if ctx.cluster.monitored else "",
            "nodes": {h.name: {"address": h.address, "port": int(h.connection.get("ssh_port", 22)),
                               **({"bmc": _bmc(h)} if h.settings.get("kiln_bmc") else {})}
                      for h in ctx.cluster.compute},
            **({"bmc_password_file": BMC_PASSWORD} if _bmc_hosts(ctx) else {}),
            **({"alertmanager": {"url": base_url(ctx.cluster, ALERTMANAGER_PORT), "password_file": ALERTMANAGER_PASSWORD,
                                 "grace_seconds": Silences.grace(ctx.cluster),
                                 **({"ca_file": CA_FILE} if ctx.cluster.setting("monitoring_tls") else {})}}
               if ctx.cluster.monitored else {})}


def _bmc_hosts(ctx: NodeContext) -> list:
    return [h for h in ctx.cluster.compute if h.settings.get("kiln_bmc")]


def _bmc(host) -> dict:
    """What kiln-remediate needs of a node's BMC (checks/redfish.py or checks/ipmi.py power_cycle_node); its
    CA file is placed under BMC_CA_DIR by the node's name."""
    b = host.settings["kiln_bmc"]
    if b.protocol == "ipmi":
        return {"protocol": "ipmi", "host": b.host, "port": b.port_number, "user": b.user,
                "cipher_suite": b.cipher_suite or 17}
    trust = {"fingerprint": b.fingerprint} if b.fingerprint else {"ca_file": f"{BMC_CA_DIR}/{host.name}.pem"}
    return {"address": b.address, "user": b.user, **trust, **({"system": b.system} if b.system else {})}


def known_hosts(ctx: NodeContext) -> str:
    """The compute nodes' host keys from the inventory's known_hosts files, under their addresses."""
    texts, aliases, reach = {}, {}, {}
    for h in ctx.cluster.compute:
        path = h.connection.get("ssh_known_hosts_file")
        if path and path not in texts:
            texts[path] = Path(path).read_text() if Path(path).is_file() else ""
        port = int(h.connection.get("ssh_port", 22))
        aliases[h.name] = [(h.name, port), (h.address, port), (str(h.connection.get("ssh_hostname", h.name)), port)]
        reach[h.name] = (h.address, port)
    return known_hosts_lines("\n".join(texts.values()), aliases, reach)


def install(ctx: NodeContext) -> None:
    """Nothing to install: the programs are files of the configure stage (they belong to the cluster's
    settings, not to an image)."""


def configure(ctx: NodeContext) -> None:
    enabled = ctx.cluster.setting("remediation").enabled
    marker = key_marker(ctx.cluster.name)
    if ctx.node.is_compute:
        keyline = ctx.watch_line(AUTHORIZED_KEYS, rf'^restrict,command="/usr/local/sbin/kiln-node-repair".* {marker}$')
        if enabled:
            ctx.put("/usr/local/sbin/kiln-node-repair", REPAIR, mode="755", name="remediation: kiln-node-repair")
            ctx.watch_path("/root/.ssh")
            managed_directory(name="remediation: /root/.ssh", ctx=ctx, path="/root/.ssh", user="root", group="root",
                              mode="700", only_create=True)
            line_present(name="remediation: kiln-remediate's key (kiln-node-repair only)", ctx=ctx, index=keyline,
                         path=AUTHORIZED_KEYS, line=authorized_line(ctx), replace_regex=f" {marker}$")
        else:
            line_removed(name="remediation: no kiln-remediate key", ctx=ctx, index=keyline,
                         command=f"sed -i {quote('/ ' + marker + '$/d')} {AUTHORIZED_KEYS}")
    if ctx.cluster.controllers and ctx.node.name == ctx.cluster.controllers[0].name:
        _controller(ctx, enabled)


def _controller(ctx: NodeContext, enabled: bool) -> None:
    unit = ctx.watch_unit("kiln-remediate.service")
    if not enabled:
        server.shell(name="remediation: kiln-remediate stopped and disabled",
                     commands=["systemctl disable --now kiln-remediate.service"],
                     _if=lambda: ctx.snapshot.unit(unit).active == "active"
                     or ctx.snapshot.unit(unit).enabled == "enabled")
        return
    health.install_package(ctx)
    for directory, mode in (("/etc/kiln/remediation", "700"), ("/var/lib/kiln", "755"),
                            ("/var/lib/kiln/remediation", "700")):
        ctx.watch_path(directory)
        managed_directory(name=f"remediation: {directory}", ctx=ctx, path=directory, user="root", group="root",
                          mode=mode)
    changed = [
        ctx.put("/usr/local/sbin/kiln-remediate", REMEDIATE, mode="755", name="remediation: kiln-remediate"),
        ctx.put(CONFIG, json.dumps(config(ctx), indent=1, sort_keys=True) + "\n", mode="644",
                name="remediation: settings and compute nodes"),
        ctx.put(KEY, ctx.secrets.remediation_key, mode="600", secret=True, name="remediation: the SSH key"),
        ctx.put(KNOWN_HOSTS, known_hosts(ctx), mode="644", name="remediation: the compute nodes' host keys"),
    ]
    if ctx.cluster.monitored:
        changed.append(ctx.put(ALERTMANAGER_PASSWORD, ctx.secrets.monitoring_password + "\n", mode="600", secret=True,
                               name="remediation: Alertmanager's password (silences for its repairs)"))
    bmcs = _bmc_hosts(ctx)
    if any(h.settings["kiln_bmc"].protocol == "ipmi" for h in bmcs):
        pinned_packages(name="remediation: ipmitool (BMCs without Redfish)", ctx=ctx, packages={"ipmitool": None})
    if bmcs:
        changed.append(ctx.put(BMC_PASSWORD, ctx.secrets.site[BMC_PASSWORD_SECRET].decode().splitlines()[0] + "\n",
                               mode="600", secret=True, name="remediation: the BMCs' password (power cycles)"))
    cas = [h for h in bmcs if h.settings["kiln_bmc"].ca_file]
    if cas:
        ctx.watch_path(BMC_CA_DIR)
        managed_directory(name=f"remediation: {BMC_CA_DIR}", ctx=ctx, path=BMC_CA_DIR, user="root", group="root",
                          mode="755")
    for h in cas:
        pem = (ctx.cluster.path / h.settings["kiln_bmc"].ca_file).read_text()
        changed.append(ctx.put(f"{BMC_CA_DIR}/{h.name}.pem", pem, mode="644", name=f"remediation: {h.name}'s BMC CA"))
    service = ctx.put(UNIT, SERVICE, mode="644", name="remediation: kiln-remediate.service")
    server.shell(name="remediation: reload systemd (if the unit changed)", commands=[DAEMON_RELOAD],
                 _if=when_changed(service))
    started = service_running(name="remediation: kiln-remediate enabled and running", ctx=ctx, unit=unit)
    service_restarted(name="remediation: restart kiln-remediate (if its settings changed)", unit=unit,
                      _if=lambda: changed_any(*changed, service) and not changed_any(started))
