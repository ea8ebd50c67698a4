"""The accounting database on the shared testbed (#47): MariaDB opens no network port; slurmdbd, on its
host, reaches it through its socket, so no accounting data or database password crosses the network.
SYSTEM_DATABASE_SOCKET passes on the slurmdbd host and fails once MariaDB listens on TCP (then a compute
node reaches port 3306, which it could not before); kiln deploy puts the setting back and accounting works
throughout."""

from __future__ import annotations


import pytest

from roles.platform import PLATFORMS
from tests.testbed.slurm_helpers import deploy_json, ok, on, suite_verdicts, tcp_opens, wait_for

CONF = PLATFORMS["debian12"].mariadb_conf


def _database_check(tb) -> tuple[str, str]:
    return suite_verdicts(tb.inventory, "system", tb.controller).get("SYSTEM_DATABASE_SOCKET", ("missing", ""))


@pytest.mark.proves("slurm", "kiln check", tier="nspawn")
def test_mariadb_opens_no_port_and_the_check_fails_once_it_listens_until_a_deploy_puts_it_back(slurm):
    tb, node = slurm, slurm.computes[0]
    address = next(n.address for n in tb.recorded_nodes() if n.name == tb.controller)
    reach = lambda: tcp_opens(tb, node, address, 3306)  # noqa: E731  anything answering on MariaDB's port
    assert ok(tb, tb.controller, f"cat {CONF}").count("skip-networking") == 1
    assert not reach()
    severity, message = _database_check(tb)
    assert severity == "ok", message
    ok(tb, tb.controller, "sacctmgr -n -P show cluster format=cluster")  # slurmdbd reaches it on its socket
    try:
        # the fault: MariaDB told to listen on the network (kiln's file overwritten), and restarted
        ok(tb, tb.controller, f"printf '[mysqld]\\nskip-networking=0\\nbind-address=0.0.0.0\\n' > {CONF} && "
                              "systemctl restart mariadb")
        wait_for(reach, timeout=60, interval=2,
                 what="MariaDB answering on TCP 3306")
        severity, message = _database_check(tb)
        assert severity == "fail" and "listens on TCP port 3306" in message, message
        print(f"MariaDB on the network: SYSTEM_DATABASE_SOCKET {severity}: {message}")
    finally:
        rc, data, text = deploy_json(tb.inventory, "--roles", "slurm", "--limit", tb.controller)
    assert rc == 0, text
    assert not reach()
    severity, message = _database_check(tb)
    assert severity == "ok", message
    # slurmdbd restarted with MariaDB and answers: a job's record reaches the database
    job = ok(tb, tb.controller, "sbatch --parsable -N1 --wrap true").strip()
    wait_for(lambda: "COMPLETED" in on(tb, tb.controller, f"sacct -n -X -P -j {job} -o State").stdout,
             timeout=120, interval=2, what=f"job {job} recorded in accounting")
