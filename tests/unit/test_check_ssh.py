"""kiln check's ssh: kiln's security options on the command line win over any ssh_config, every
inventory value is one word of ssh's argv (never config text), the destination comes after ``--``."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from kiln.check.remote import KilnSsh, ssh_command
from kiln.inventory import load_cluster
from tests.conftest import INVENTORIES


def _host(tmp_path: Path, **connection):
    host = next(iter(load_cluster(INVENTORIES / "small").hosts.values()))
    return replace(host, connection={**host.connection, **connection})


def test_every_value_is_one_word_and_the_destination_follows_double_dash(tmp_path):
    odd = {"ssh_hostname": "gpu-01.rack_a.example", "ssh_user": "ops.team-1", "ssh_port": 2222,
           "ssh_known_hosts_file": "/srv/k@n+o=w,n:~hosts", "ssh_key": "/srv/keys/id-ed25519@ops"}
    argv = ssh_command(_host(tmp_path, **odd), tmp_path / "cm", "echo 'a b'; id")
    backend = KilnSsh(argv)
    words, args = backend._build_ssh_command("echo 'a b'; id")
    line = backend.quote(" ".join(words), *args)
    assert shlex.split(line) == argv  # what the shell runs is exactly kiln's argv
    assert argv[argv.index("--") + 1] == "gpu-01.rack_a.example" and argv[-1] == "echo 'a b'; id"
    assert "UserKnownHostsFile=/srv/k@n+o=w,n:~hosts" in argv and "User=ops.team-1" in argv
    assert argv.index("StrictHostKeyChecking=yes") < argv.index("-F")


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client (ssh -G evaluates options "
                    "without connecting)")
def test_a_site_ssh_config_cannot_switch_host_key_checking_off(tmp_path):
    site = tmp_path / "site_config"
    site.write_text("Host *\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  BatchMode no\n"
                    "  ControlPath /tmp/elsewhere-%C\n  Compression yes\n")
    host = _host(tmp_path, ssh_config_file=str(site), ssh_known_hosts_file=str(tmp_path / "known_hosts"),
                 ssh_hostname="10.0.0.9")
    argv = ssh_command(host, tmp_path / "cm", "true")
    out = subprocess.run([argv[0], "-G", *argv[1:-1]], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    effective = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    assert effective["stricthostkeychecking"] in ("true", "yes")
    assert effective["userknownhostsfile"] == str(tmp_path / "known_hosts")
    assert effective["batchmode"] == "yes"
    assert effective["controlpath"].startswith(str(tmp_path / "cm"))
    assert effective["compression"] == "yes"  # the site's own settings still apply
    assert effective["hostname"] == "10.0.0.9"
