"""Slurm's cluster-wide files come from the inventory alone (roles/slurm_config.py)."""

from __future__ import annotations

import pytest

from kiln.inventory import load_cluster
from roles import slurm_config
from tests.conftest import REPO


@pytest.fixture(scope="module")
def example():
    return load_cluster(REPO / "inventory" / "example")


def test_node_lines_group_identical_nodes(example):
    assert slurm_config.node_lines(example) == [
        "NodeName=hgx[001-032] CPUs=224 Sockets=2 CoresPerSocket=56 ThreadsPerCore=2 RealMemory=2000000 "
        "Gres=gpu:h100:8 Features=h100,nvswitch,ib_ndr State=UNKNOWN",
        "NodeName=l40s[01-08] CPUs=64 RealMemory=512000 Gres=gpu:l40s:4 Features=l40s,roce State=UNKNOWN",
    ]


def test_partitions_come_from_inventory_groups(example):
    assert slurm_config.partition_lines(example) == [
        "PartitionName=h100 Nodes=hgx[001-032] Default=YES MaxTime=7-00:00:00 PriorityTier=1 State=UP",
        "PartitionName=l40s Nodes=l40s[01-08] Default=NO MaxTime=2-00:00:00 PriorityTier=1 State=UP",
        "PartitionName=debug Nodes=hgx[001-032],l40s[01-08] Default=NO MaxTime=01:00:00 PriorityTier=10 State=UP",
    ]


def test_slurm_conf_has_accounting_fair_share_and_cgroups(example):
    conf = slurm_config.slurm_conf(example)
    for line in ("ClusterName=hopper", "SlurmctldHost=ctl01", "AccountingStorageHost=ctl01",
                 "AccountingStorageEnforce=associations,limits,qos,safe",
                 "AccountingStorageTRES=gres/gpu,gres/gpu:h100,gres/gpu:l40s",
                 "PriorityType=priority/multifactor", "PriorityWeightFairshare=10000", "GresTypes=gpu",
                 "ProctrackType=proctrack/cgroup", "PrologFlags=Contain", "RebootProgram=/usr/sbin/reboot",
                 "JobAcctGatherType=jobacct_gather/cgroup", "DefMemPerCPU=8000"):
        assert line + "\n" in conf, line
    assert "HealthCheckProgram=/usr/local/sbin/kiln-node-check-health\nHealthCheckInterval=300\n" in conf
    assert "TopologyPlugin" not in conf


def test_health_check_off_and_topology_when_set(example):
    from dataclasses import replace
    settings = dict(example.settings, kiln_slurm_health_check=False)
    cluster = replace(example, settings=settings, topology={"leaf1": ["hgx001", "hgx002"], "spine": ["leaf1"]})
    conf = slurm_config.slurm_conf(cluster)
    assert "HealthCheck" not in conf
    assert "TopologyPlugin=topology/tree\n" in conf
    topo = slurm_config.topology_conf(cluster)
    assert "SwitchName=leaf1 Nodes=hgx[001-002]\n" in topo and "SwitchName=spine Switches=leaf1\n" in topo


def test_prolog_and_epilog_checks_when_set(example):
    """Off by default; the prolog also asks the scheduler to requeue a job whose prolog failed without
    holding it (a held job needs an admin to release it)."""
    from dataclasses import replace
    assert "Prolog=" not in slurm_config.slurm_conf(example) and "Epilog=" not in slurm_config.slurm_conf(example)
    assert "nohold_on_prolog_fail" not in slurm_config.slurm_conf(example)
    conf = slurm_config.slurm_conf(replace(example, settings=dict(example.settings, kiln_slurm_check_prolog=True,
                                                                  kiln_slurm_check_epilog=True)))
    for line in ("Prolog=/usr/local/sbin/kiln-node-check-prolog", "Epilog=/usr/local/sbin/kiln-node-check-epilog",
                 "SchedulerParameters=nohold_on_prolog_fail", "PrologFlags=Contain"):
        assert line + "\n" in conf, line


def test_gres_conf_lists_device_files(example):
    gres = slurm_config.gres_conf(example)
    assert "NodeName=hgx[001-032] Name=gpu Type=h100 File=/dev/nvidia[0-7]\n" in gres
    assert "NodeName=l40s[01-08] Name=gpu Type=l40s File=/dev/nvidia[0-3]\n" in gres
    assert "AutoDetect" not in gres.replace("(no AutoDetect)", "")


def test_cgroup_conf_follows_the_settings(example):
    conf = slurm_config.cgroup_conf(example)
    assert "CgroupPlugin=autodetect\n" in conf and "ConstrainDevices=yes\n" in conf
    assert "ConstrainRAMSpace=yes\n" in conf


def test_slurmdbd_conf_carries_the_password_only_there(example):
    conf = slurm_config.slurmdbd_conf(example, "s3cretpass")
    assert "StoragePass=s3cretpass\n" in conf and "DbdHost=ctl01\n" in conf
    assert "s3cretpass" not in slurm_config.slurm_conf(example)


def test_users_see_only_their_own_jobs_usage_and_accounts_by_default(example):
    """PrivateData is the same in slurm.conf (squeue, scontrol) and slurmdbd.conf (sacct, sreport); batch
    scripts and environments are kept in accounting; slurmdbd purges each kind of record after its age."""
    conf = slurm_config.slurm_conf(example)
    dbd = slurm_config.slurmdbd_conf(example, "secret")
    assert "\nPrivateData=accounts,jobs,usage,users\n" in conf and "\nPrivateData=accounts,jobs,usage,users\n" in dbd
    assert "\nAccountingStoreFlags=job_comment,job_script,job_env\n" in conf
    for line in ("PurgeJobAfter=12months", "PurgeStepAfter=12months", "PurgeEventAfter=12months",
                 "PurgeResvAfter=12months", "PurgeSuspendAfter=12months", "PurgeTXNAfter=12months",
                 "PurgeUsageAfter=24months"):
        assert f"\n{line}\n" in dbd, line
    assert dbd.endswith("\n") and "StoragePass=secret\n" in dbd


def test_privacy_and_retention_follow_their_settings(example):
    from dataclasses import replace

    from kiln.inventory.privacy_schema import AccountingRetention
    settings = dict(example.settings, kiln_slurm_private_data=[], kiln_slurm_store_job_scripts=False,
                    kiln_slurm_accounting_retention=AccountingRetention(jobs="90days", usage=None))
    cluster = replace(example, settings=settings)
    conf, dbd = slurm_config.slurm_conf(cluster), slurm_config.slurmdbd_conf(cluster, "secret")
    assert "PrivateData" not in conf and "PrivateData" not in dbd and "\nAccountingStoreFlags=job_comment\n" in conf
    assert "\nPurgeJobAfter=90days\n" in dbd and "PurgeUsageAfter" not in dbd


def test_each_job_gets_a_private_tmp_when_set_and_none_by_default(example):
    """JobContainerType beside the PrologFlags it needs, job_container.conf with its base path alone (the
    same file for every node); null (the default): neither, and jobs share the node's /tmp (Slurm's default)."""
    from dataclasses import replace

    from kiln.inventory.privacy_schema import JobTmp
    assert example.setting("slurm_job_tmp") is None
    example = replace(example, settings=dict(example.settings, kiln_slurm_job_tmp=JobTmp()))
    conf = slurm_config.slurm_conf(example)
    assert "\nPrologFlags=Contain\n" in conf and "\nJobContainerType=job_container/tmpfs\n" in conf
    lines = [line for line in slurm_config.job_container_conf(example).splitlines() if not line.startswith("#")]
    assert lines == ["AutoBasePath=true", "BasePath=/var/lib/slurm/job-tmp"]
    scratch = replace(example, settings=dict(example.settings, kiln_slurm_job_tmp=JobTmp(base_path="/scratch/job-tmp")))
    assert "BasePath=/scratch/job-tmp\n" in slurm_config.job_container_conf(scratch)
    off = replace(example, settings=dict(example.settings, kiln_slurm_job_tmp=None))
    assert "JobContainerType" not in slurm_config.slurm_conf(off) and slurm_config.job_container_conf(off) is None
    assert "\nPrologFlags=Contain\n" in slurm_config.slurm_conf(off)  # pam_slurm_adopt still needs it


@pytest.mark.parametrize("value, complaint", [
    ({"kiln_slurm_private_data": ["jobs", "secrets"]}, "kiln_slurm_private_data"),
    ({"kiln_slurm_private_data": "jobs"}, "kiln_slurm_private_data"),
    ({"kiln_slurm_accounting_retention": {"jobs": "12"}}, "jobs"),
    ({"kiln_slurm_accounting_retention": {"jobs": "1month;rm"}}, "jobs"),
    ({"kiln_slurm_accounting_retention": {"jobs": "0days"}}, "jobs"),
    ({"kiln_slurm_accounting_retention": {"job": "1days"}}, "job"),
    ({"kiln_slurm_job_tmp": {"base_path": "/tmp/jobs"}}, "base_path"),
    ({"kiln_slurm_job_tmp": {"base_path": "/dev/shm"}}, "base_path"),
    ({"kiln_slurm_job_tmp": {"base_path": "/var/tmp"}}, "base_path"),
    ({"kiln_slurm_job_tmp": {"base_path": "/var/lib"}}, "base_path"),
    ({"kiln_slurm_job_tmp": {"base_path": "scratch/jobs"}}, "base_path"),
    ({"kiln_slurm_job_tmp": {"base_path": "/scratch/jobs\nInitScript=/x"}}, "base_path"),
    ({"kiln_slurm_job_tmp": {"base_path": "/scratch/a b"}}, "base_path"),
    ({"kiln_slurm_job_tmp": {"base": "/scratch"}}, "base"),
])
def test_privacy_and_retention_values_are_checked(tmp_path, value, complaint):
    """A kind Slurm does not know, an age without its unit or with anything after it, is refused with
    the setting's name, before anything is touched."""
    import shutil

    import yaml

    from kiln.inventory.errors import InventoryInvalid
    root = tmp_path / "inv"
    shutil.copytree(REPO / "inventory" / "example", root)
    (root / "group_vars" / "all" / "privacy.yml").write_text(yaml.safe_dump(value))
    with pytest.raises(InventoryInvalid) as raised:
        load_cluster(root)
    said = "\n".join(str(e) for e in raised.value.errors)
    assert complaint in said and "privacy.yml" in said, said


@pytest.mark.parametrize("password, said", [(False, "no"), (True, "yes")])
def test_sshd_takes_keys_only_unless_the_inventory_says_otherwise(password, said):
    """The drop-in comes before any other (sshd takes the first value it reads: a cloud image's
    50-cloud-init.conf saying yes cannot win) and says both ways a password could be asked."""
    from roles.base import SSHD_CONF
    from roles.context import render
    text = render("base/sshd.conf.j2", password=password)
    assert SSHD_CONF == "/etc/ssh/sshd_config.d/00-kiln.conf"
    assert f"\nPasswordAuthentication {said}\n" in text and f"\nKbdInteractiveAuthentication {said}\n" in text
    assert "\nPermitRootLogin prohibit-password\n" in text and "\nPermitEmptyPasswords no\n" in text


def test_the_purged_jobs_stored_scripts_go_hourly_and_only_copies_no_job_holds_for_a_day(example):
    """kiln-accounting-orphans: one DELETE per stored kind (scripts, environments) of the cluster's tables,
    kept to copies older than a day that no job row refers to (the live test: tests/testbed/test_isolation.py);
    run by MariaDB's root from a oneshot service, on a timer at half past each hour."""
    sql = slurm_config.orphans_sql(example)
    name = example.name
    assert sql.count("DELETE FROM") == 2 and sql.endswith(";\n")
    for kind in ("script", "env"):
        assert (f"DELETE FROM `{name}_job_{kind}_table` WHERE last_used < NOW() - INTERVAL 1 DAY AND NOT EXISTS "
                f"(SELECT 1 FROM `{name}_job_table` j WHERE j.{kind}_hash_inx = `{name}_job_{kind}_table`.hash_inx);") in sql
    service, timer = slurm_config.orphans_units(example)
    [exec_start] = [line for line in service.splitlines() if line.startswith("ExecStart=")]
    assert exec_start == f'ExecStart=/usr/bin/mysql --batch slurm_acct_db -e "{sql.replace(chr(10), " ").strip()}"'
    assert "\nType=oneshot\n" in service and "%" not in service  # no systemd specifier to expand
    assert "\nOnCalendar=*-*-* *:30:00\n" in timer and "\nWantedBy=timers.target\n" in timer
