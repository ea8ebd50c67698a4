"""Slurm's cluster-wide files, rendered from the inventory alone.

Pure functions of the validated ``Cluster``: no facts, no host list of the current run. That is
what keeps slurm.conf byte-identical on every node whatever ``--limit`` selects (the pain of tools
that template slurm.conf from facts gathered on the hosts in the run).
"""

from __future__ import annotations


from kiln.hostlist import fold
from kiln.inventory.firewall_schema import SRUN_PORTS
from kiln.inventory.model import DEFAULT_PARTITION, Cluster, Host
from kiln.usage import billing
from roles.context import render

STATE_SAVE = "/var/lib/slurm/slurmctld"


def dbd_hosts(cluster: Cluster) -> list[Host]:
    """The hosts that run slurmdbd: the slurm_dbd group, else the first controller."""
    return cluster.group("slurm_dbd") or cluster.controllers[:1]


def dbd_host(cluster: Cluster) -> str:
    return dbd_hosts(cluster)[0].name


def def_mem_per_cpu(cluster: Cluster) -> int:
    configured = cluster.setting("slurm_def_mem_per_cpu")
    if configured:
        return configured
    per_cpu = [h.memory_mb // h.cpus for h in cluster.compute if h.memory_mb and h.cpus]
    return max(1, min(per_cpu)) if per_cpu else 1024


def _node_attributes(host: Host) -> tuple[str, ...]:
    attrs = [f"CPUs={host.cpus}"]
    if host.sockets:
        attrs.append(f"Sockets={host.sockets}")
    if host.cores_per_socket:
        attrs.append(f"CoresPerSocket={host.cores_per_socket}")
    if host.threads_per_core:
        attrs.append(f"ThreadsPerCore={host.threads_per_core}")
    attrs.append(f"RealMemory={host.memory_mb}")
    if host.gpu_count:
        attrs.append(f"Gres=gpu:{host.gpu_model}:{host.gpu_count}")
    if host.features:
        attrs.append(f"Features={','.join(host.features)}")
    return tuple(attrs)


def _grouped(hosts: list[Host], key) -> list[tuple[tuple, list[str]]]:
    """Hosts with the same key, in inventory order of each key's first host."""
    groups: dict[tuple, list[str]] = {}
    for host in hosts:
        groups.setdefault(key(host), []).append(host.name)
    return list(groups.items())


def node_lines(cluster: Cluster) -> list[str]:
    return [f"NodeName={fold(names)} {' '.join(attrs)} State=UNKNOWN"
            for attrs, names in _grouped(cluster.compute, _node_attributes)]


def partition_lines(cluster: Cluster) -> list[str]:
    """One line per partition; where ``kiln_usage_gpu_hour_prices`` prices its GPUs, its
    ``TRESBillingWeights`` (kiln/usage/billing.py: Slurm's billing is kiln usage's cost)."""
    hosts = cluster.partition_hosts()
    weights = billing.partition_weights(cluster, cluster.setting("usage_gpu_hour_prices"))

    def weighted(name: str) -> str:
        return f" TRESBillingWeights={weights[name]}" if weights[name] else ""
    if not cluster.partitions:
        return [f"PartitionName={DEFAULT_PARTITION} Nodes={fold([h.name for h in hosts[DEFAULT_PARTITION]])} "
                f"Default=YES MaxTime=INFINITE State=UP{weighted(DEFAULT_PARTITION)}"]
    lines = []
    for part in cluster.partitions:
        nodes = fold([h.name for h in hosts[part.name]]) if hosts[part.name] else '""'
        lines.append(f"PartitionName={part.name} Nodes={nodes} Default={'YES' if part.default else 'NO'} "
                     f"MaxTime={part.max_time} PriorityTier={part.priority_tier} State=UP{weighted(part.name)}")
    return lines


def billed(cluster: Cluster) -> bool:
    """Some partition has kiln's billing weights: Slurm bills by the largest share a job holds (MAX_TRES)."""
    return any(billing.partition_weights(cluster, cluster.setting("usage_gpu_hour_prices")).values())


def slurm_conf(cluster: Cluster) -> str:
    return render(
        "slurm/slurm.conf.j2", cluster=cluster, controllers=[h.name for h in cluster.controllers],
        state_save=STATE_SAVE, def_mem_per_cpu=def_mem_per_cpu(cluster), dbd_host=dbd_host(cluster),
        health_check=cluster.setting("slurm_health_check"), health_check_interval=cluster.health_check_interval,
        check_prolog=cluster.setting("slurm_check_prolog"), check_epilog=cluster.setting("slurm_check_epilog"),
        accounting_tres=accounting_tres(cluster), billed=billed(cluster), job_summary=job_summary(cluster), preempt=preempts(cluster),
        topology=bool(cluster.topology), configless=cluster.setting("slurm_configless"),
        slurmd_timeout=cluster.setting("slurm_slurmd_timeout"), requeue_delay=cluster.setting("slurm_requeue_delay"),
        srun_ports="-".join(map(str, SRUN_PORTS)) if cluster.setting("firewall").enabled else "",
        private_data=private_data(cluster), job_tmp=cluster.setting("slurm_job_tmp") is not None,
        store_job_scripts=cluster.setting("slurm_store_job_scripts"),
        # jobacct_gather/cgroup needs the memory controller that constrain_cores_memory uses.
        cgroup_accounting=cluster.setting("slurm_constrain_cores_memory"), node_lines=node_lines(cluster), partition_lines=partition_lines(cluster),
    )


def accounting_tres(cluster: Cluster) -> str:
    """GPUs counted in Slurm's accounting: the generic gres/gpu, and each GPU model beside it (sreport
    and sacct can then tell an H100-hour from an L40S-hour; Slurm counts typed GPUs only when listed)."""
    models = sorted({h.gpu_model for h in cluster.compute if h.gpu_count and h.gpu_model})
    return ",".join(["gres/gpu", *(f"gres/gpu:{m}" for m in models)])


def preempts(cluster: Cluster) -> bool:
    """Preemption by QoS is on when a QoS of ``kiln_qos`` preempts another."""
    return any(q.preempt for q in cluster.setting("qos"))


def job_summary(cluster: Cluster) -> bool:
    """kiln's EpilogSlurmctld records each job's GPU figures where Prometheus has them: a monitored
    cluster with GPU nodes (checks/job_summary.py)."""
    return cluster.monitored and any(h.gpu_count for h in cluster.compute)


def gres_conf(cluster: Cluster) -> str:
    lines = []
    gpu_hosts = [h for h in cluster.compute if h.gpu_count]
    for (model, count), names in _grouped(gpu_hosts, lambda h: (h.gpu_model, h.gpu_count)):
        files = "/dev/nvidia0" if count == 1 else f"/dev/nvidia[0-{count - 1}]"
        lines.append(f"NodeName={fold(names)} Name=gpu Type={model} File={files}")
    return render("slurm/gres.conf.j2", cluster_name=cluster.name, lines=lines)


def cgroup_conf(cluster: Cluster) -> str:
    return render("slurm/cgroup.conf.j2", plugin=cluster.setting("slurm_cgroup_plugin"),
                  constrain_devices=cluster.setting("slurm_constrain_devices"),
                  constrain_cores_memory=cluster.setting("slurm_constrain_cores_memory"))


def job_container_conf(cluster: Cluster) -> str | None:
    """job_container.conf for job_container/tmpfs (``kiln_slurm_job_tmp``), or None where jobs share /tmp."""
    job_tmp = cluster.setting("slurm_job_tmp")
    if job_tmp is None:
        return None
    return render("slurm/job_container.conf.j2", lines=job_tmp.job_container_lines())


def topology_conf(cluster: Cluster) -> str | None:
    if not cluster.topology:
        return None
    lines = []
    for switch, members in cluster.topology.items():
        hosts = [m for m in members if m in cluster.hosts]
        switches = [m for m in members if m not in cluster.hosts]
        line = f"SwitchName={switch}"
        if hosts:
            line += f" Nodes={fold(hosts)}"
        if switches:
            line += f" Switches={','.join(switches)}"
        lines.append(line)
    return render("slurm/topology.conf.j2", lines=lines)


def private_data(cluster: Cluster) -> str:
    """PrivateData's value, the same in slurm.conf and slurmdbd.conf ("" when users see everything)."""
    return ",".join(sorted(set(cluster.setting("slurm_private_data"))))


def slurmdbd_conf(cluster: Cluster, password: str) -> str:
    return render("slurm/slurmdbd.conf.j2", dbd_host=dbd_host(cluster), password=password,
                  private_data=private_data(cluster),
                  purge_lines=cluster.setting("slurm_accounting_retention").slurmdbd_lines())


ORPHANS = "kiln-accounting-orphans"  # the timer and service that delete stored scripts no job holds


def orphans_sql(cluster: Cluster) -> str:
    """The statements that delete the stored job scripts and environments no job refers to any more.

    slurmdbd keeps one copy of each distinct script and environment (``<cluster>_job_script_table``,
    ``_job_env_table``) that jobs point at; Slurm 22.05 (Debian 12) purges the jobs past
    ``PurgeJobAfter`` and leaves those copies, which may hold a team's secrets, for ever (later releases
    purge them with the jobs: then this finds nothing). A copy younger than a day is never touched (its job
    may not be written yet), and the NOT EXISTS is a locking read of the jobs table in InnoDB: a job that
    slurmdbd is writing with an old copy is waited for and keeps it. The cluster's name is lower case
    letters, digits and '-' (the inventory's format), so it fills a quoted identifier as it is."""
    name = cluster.name
    return "".join(
        f"DELETE FROM `{name}_job_{kind}_table` WHERE last_used < NOW() - INTERVAL 1 DAY AND NOT EXISTS "
        f"(SELECT 1 FROM `{name}_job_table` j WHERE j.{kind}_hash_inx = `{name}_job_{kind}_table`.hash_inx);\n"
        for kind in ("script", "env"))


def orphans_units(cluster: Cluster) -> tuple[str, str]:
    """The service and timer (hourly, at half past: after slurmdbd's hourly rollup, which purges) that run
    ``orphans_sql`` as MariaDB's root on the slurmdbd host."""
    service = ("[Unit]\nDescription=kiln: stored job scripts and environments of purged jobs deleted\n"
               "After=mariadb.service\n\n[Service]\nType=oneshot\n"
               f"ExecStart=/usr/bin/mysql --batch slurm_acct_db -e \"{orphans_sql(cluster).replace(chr(10), ' ').strip()}\"\n")
    timer = ("[Unit]\nDescription=kiln: stored scripts of purged jobs deleted, hourly\n\n[Timer]\n"
             "OnCalendar=*-*-* *:30:00\nPersistent=true\n\n[Install]\nWantedBy=timers.target\n")
    return service, timer
