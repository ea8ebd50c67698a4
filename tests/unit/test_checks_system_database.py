"""SYSTEM_DATABASE_SOCKET read from MariaDB's own answer (checks/system.py), and the expectation that asks
it on the slurmdbd host only."""

from __future__ import annotations

import pytest

from checks import system
from kiln.check.expectations import node_expectations
from kiln.inventory import load_cluster
from roles.slurm_config import dbd_hosts
from tests.conftest import INVENTORIES

ERROR_2002 = ("ERROR 2002 (HY000): Can't connect to local server through socket '/run/mysqld/mysqld.sock' (2)\n")


@pytest.mark.parametrize("output, severity, words", [
    ("1\t3306\n", "ok", "socket only"),
    ("0\t3306\n", "fail", "listens on TCP port 3306"),
    ("0\t13306\n", "fail", "listens on TCP port 13306"),
    (ERROR_2002, "fail", "could not ask MariaDB"),
    ("", "fail", "no answer"),
    ("bash: line 1: mysql: command not found\n", "fail", "command not found"),
    ("1\t3306\nextra\n", "fail", "could not ask"),    # never a guess from a longer answer
    ("yes\t3306\n", "fail", "could not ask"),
])
def test_the_database_check_reads_skip_networking_and_fails_on_tcp_or_no_answer(output, severity, words):
    verdict = system.database_socket(output)
    assert verdict.id == "SYSTEM_DATABASE_SOCKET" and verdict.severity == severity and words in verdict.message


@pytest.mark.parametrize("inventory", ["small", "storage"])
def test_only_the_slurmdbd_host_is_asked(inventory):
    cluster = load_cluster(INVENTORIES / inventory)
    dbd = {h.name for h in dbd_hosts(cluster)}
    assert len(dbd) == 1
    for host in cluster.hosts.values():
        expect = node_expectations(cluster, host)
        assert expect["system"]["database_socket"] == (host.name in dbd)
        assert (system.DATABASE in system.commands(expect)) == (host.name in dbd)
