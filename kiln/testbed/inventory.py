"""Write the testbed's own inventory (Ansible YAML) describing the nodes it made."""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from kiln.testbed.vm_supervise import LOCAL_DISK_SERIAL

if TYPE_CHECKING:
    from kiln.testbed.nspawn import Node
    from kiln.testbed.testbed import Testbed

# What each Debian release carries; the testbed's nodes install exactly these. The NVIDIA driver comes
# from Debian's non-free archive, with a real upgrade to roll out: bookworm has 535.261.03-1 and
# bookworm-security 535.309.01-0+deb12u1; trixie has 550.163.01-2 and trixie-backports 550.163.01-4~bpo13+1.
# Debian packages no NCCL, DCGM or fabric manager, and the CUDA toolkit (2 GB a node) is left out: those
# pins are "" (the fabric manager unit on compute nodes is the simulator's).
_NOT_PACKAGED = {"cuda": "", "nccl": "", "dcgm": "", "fabricmanager": ""}
VERSIONS_BY_OS = {
    "debian12": {"slurm": "22.05.8-4+deb12u3", "nvidia_driver": "535.261.03-1", **_NOT_PACKAGED,
                 "prometheus": "2.42.0+ds-5+deb12u1", "alertmanager": "0.25.0-1+b4", "node_exporter": "1.5.0-1+b6"},
    "debian13": {"slurm": "24.11.5-4+deb13u1", "nvidia_driver": "550.163.01-2", **_NOT_PACKAGED,
                 "prometheus": "2.53.3+ds1-2", "alertmanager": "0.28.1+ds-1", "node_exporter": "1.9.0-1+b4"},
}
DRIVER_UPGRADES = {"debian12": "535.309.01-0+deb12u1", "debian13": "550.163.01-4~bpo13+1"}
TESTBED_VERSIONS, DRIVER_UPGRADE = VERSIONS_BY_OS["debian12"], DRIVER_UPGRADES["debian12"]

# Compute nodes get this many stand-in GPU device files (see Testbed._node_files): enough for Slurm's
# GPU GRES to be exercised for real; there is no GPU behind them.
GPUS_PER_NODE = 4

# What the tool simulators on compute nodes report (kiln/testbed/simulators, installed by `kiln testbed up`).
SIM_GPU_MODEL, SIM_NVLINKS, SIM_HCAS, SIM_RATE = "h100", 18, 2, 400
HEALTH_CHECK_INTERVAL = 10  # seconds; short so tests see a node drain and resume quickly
# Under software emulation a health run costs a VM about 5 s of CPU (14 commands, each a process start
# the emulator translates): every 10 s, the two compute VMs kept the host's 2 cores 97% busy with
# nothing else running (each VM's QEMU: 55 CPU-seconds a minute; 1 with the checks off). Every 60 s.
VM_HEALTH_CHECK_INTERVAL = 60
# Seconds a mount has to answer kiln check's probe on a VM (kiln_check_storage_timeout; 10 by default).
# Under software emulation with the host's 2 cores busy (two other VMs, a health run, kiln check's own
# commands), a healthy GlusterFS (FUSE) or NFS mount was seen taking over 10 s to answer one probe: the
# default would report a live mount as dead. A dead mount is still reported, in this time.
VM_STORAGE_TIMEOUT = 30

# Two teams, so fair-share, per-team GPU limits, QoS and pam_slurm_adopt can be shown with real users, and
# each with a probe account for the isolation suite.
TESTBED_TEAMS = [
    {"name": "vision", "shares": 60, "gid": 2001, "gpu_limit": 2,
     "users": [{"name": "alice", "uid": 2101}], "qos": ["normal", "high", "scavenger"], "default_qos": "normal",
     "probe_uid": 2191},
    {"name": "language", "shares": 40, "gid": 2002, "gpu_limit": 4,
     "users": [{"name": "bob", "uid": 2102}], "qos": ["normal", "scavenger"], "probe_uid": 2192},
]
# QoS as a site sets them: a high-priority QoS with a wall-time and per-user GPU limit that preempts a
# free scavenger QoS (its jobs are requeued, after 10 s of grace).
TESTBED_QOS = [
    {"name": "normal", "priority": 10},
    {"name": "high", "priority": 100, "max_wall": "1-00:00:00", "max_gpus_per_user": 2, "preempt": ["scavenger"]},
    {"name": "scavenger", "priority": 0, "usage_factor": 0.0, "preempt_mode": "requeue", "grace_seconds": 10},
]


# kiln-remediate on the testbed's controller: a look every 10 s, a new fault settles 20 s (the health
# checks run every 10 s: an injected outage drains every node within that). On the container kind only: under
# software emulation a VM's reboot takes minutes, and the VM tier's tests break nodes on purpose.
REMEDIATION = {"enabled": True, "interval_seconds": 10, "settle_seconds": 20}
# Containers: the host mounts cgroups as the hybrid (v1 + unified) hierarchy, where Slurm needs v1;
# nodes get their own writable freezer and devices cgroups but share the host's cpuset and memory
# hierarchies read-only, so Slurm constrains devices (GPUs) there, not cores or memory.
NSPAWN_SETTINGS = {"kiln_remediation": REMEDIATION, "kiln_slurm_cgroup_plugin": "cgroup/v1", "kiln_slurm_constrain_cores_memory": False,
                   "kiln_health_check_interval": HEALTH_CHECK_INTERVAL}

# VMs have their own kernel: what a real node runs (cgroup v2; cores, memory and devices constrained;
# jobacct_gather/cgroup follows from the constraints; reboots through RebootProgram are real).
VM_SETTINGS = {"kiln_slurm_cgroup_plugin": "cgroup/v2", "kiln_slurm_constrain_cores_memory": True,
               "kiln_slurm_constrain_devices": True, "kiln_health_check_interval": VM_HEALTH_CHECK_INTERVAL,
               "kiln_check_storage_timeout": VM_STORAGE_TIMEOUT,
               # login limits low enough that a test reaches them in seconds (tests/vm/test_vm.py); only VMs
               # enforce them: the nspawn nodes' cgroup controllers are the host's, read-only inside
               "kiln_login_user_limits": {"cpu_cores": 1, "memory_percent": 50, "tasks": 64},
               # each job's own /tmp and /dev/shm (off in containers: see JobTmp)
               "kiln_slurm_job_tmp": {"base_path": "/var/lib/slurm/job-tmp"}}


# Monitoring on the testbed: scrape every 10 s; a node down 20 s, a daemon stopped 20 s, a drained node
# 10 s fire; Alertmanager shows a new group after 5 s. The rules are kiln's own; only thresholds differ.
MONITORING_SETTINGS = {
    "kiln_monitoring_dcgm_exporter_external": True,
    "kiln_monitoring_scrape_seconds": 10,
    "kiln_monitoring_retention_days": 2,
    "kiln_monitoring_retention_gb": 1,
    "kiln_alert_thresholds": {"node_down_seconds": 20, "slurm_daemon_seconds": 20, "drained_seconds": 10,
                              "check_stale_seconds": 300},
    "kiln_monitoring_alerting": {"group_wait_seconds": 5, "group_interval_seconds": 30},
}

# On VMs under software emulation every scrape, rule evaluation and kiln-slurm-metrics run (a Python start the
# emulator translates) costs several times a container's CPU, and the VM tier is bound by CPU: every 30 s.
VM_MONITORING_SETTINGS = {"kiln_monitoring_scrape_seconds": 30}

# The VM kind's fabric is real: soft-RoCE (rdma_rxe) on the testbed NIC, set up by the rdma role. rxe on a
# virtio NIC reports "Rate: 2.5" (ibstat): at least 2 is expected. GID 1 is the RoCE v2 GID of the NIC's IPv4
# address.
VM_FABRIC = {"type": "rxe", "hca_count": 1, "hcas": ["rxe0"], "rxe_netdev": "eth0", "gid_index": 1,
             "socket_ifname": "eth0", "rate_gbps": 2}

# The VM kind's NFS: exported by the controller VM, mounted on every compute VM. Hard, NFS 4.2, and a short
# RPC timeout (timeo is in tenths of a second) so a dead server is noticed quickly in tests; the storage
# check's own bound (kiln_check_storage_timeout) is what keeps kiln check from hanging.
STORAGE_GROUP = "storage_servers"
NFS_EXPORT, NFS_MOUNT, NFS_OPTIONS = "/srv/kiln-nfs", "/nfs", "rw,hard,vers=4.2,timeo=50,retrans=2"
# The VM kind's GlusterFS volume: served by the controller VM, mounted on every compute VM.
GLUSTER_VOLUME, GLUSTER_BRICK, GLUSTER_MOUNT = "kiln", "/srv/gluster/kiln", "/gluster"
# the compute VMs' encrypted local disk (kiln/testbed/vm.py: local.qcow2)
ENCRYPTED_VOLUME = {"name": "local", "device": f"/dev/disk/by-id/virtio-{LOCAL_DISK_SERIAL}", "path": "/local"}
# On VMs, where the controller serves a real GlusterFS volume: vision's project directory on it is held to a
# quota small enough for a test to reach in seconds (tests/vm/test_vm_storage.py); language has none.
GLUSTER_QUOTA = "20MB"
VM_TEAMS = [dict(t, quotas={f"{GLUSTER_MOUNT}/projects": GLUSTER_QUOTA}) if t["name"] == "vision" else t
            for t in TESTBED_TEAMS]


# Settings a person (or a test run) changed in the written testbed.yml that a later `kiln testbed up`
# (which writes the inventory again, e.g. after a node's power loss) keeps: kiln-remediate off stays off.
KEPT_ON_REWRITE = ("kiln_remediation",)


def _kept(path: Path) -> dict:
    try:
        old = yaml.safe_load((path / "group_vars" / "all" / "testbed.yml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}
    return {k: old[k] for k in KEPT_ON_REWRITE if isinstance(old, dict) and k in old}


def write_inventory(path: Path, testbed: "Testbed", nodes: list["Node"]) -> None:
    controller = [n for n in nodes if n.role == "controller"]
    compute = [n for n in nodes if n.role == "compute"] or controller
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "group_vars" / "all").mkdir(parents=True)
    hosts = {
        "all": {"children": {
            "slurm_controller": {"hosts": {n.name: {"ansible_host": n.address} for n in controller}},
            "slurm_dbd": {"hosts": {n.name: None for n in controller}},
            "login": {"hosts": {n.name: None for n in controller}},
            # Prometheus and Alertmanager on the controller; node_exporter on every node
            "monitoring": {"hosts": {n.name: None for n in controller}},
            "compute": {"children": {"testbed_compute": {"hosts": {
                n.name: {"ansible_host": n.address} for n in compute if n not in controller}}}},
        }}
    }
    # the testbed's BMC (kiln/testbed/bmc.py): kiln-remediate power-cycles a node that answers nothing
    from kiln.testbed.bmc import PORT, USER
    fingerprint, _ = testbed.bmc.credentials()
    for n in compute:
        if n not in controller:
            hosts["all"]["children"]["compute"]["children"]["testbed_compute"]["hosts"][n.name]["kiln_bmc"] = {
                "host": testbed.host_address, "port": PORT, "user": USER, "fingerprint": fingerprint,
                "system": f"/redfish/v1/Systems/{n.name}"}
    if compute == controller:
        hosts["all"]["children"]["compute"]["children"]["testbed_compute"]["hosts"] = {
            n.name: None for n in controller}
    network_mounts = []
    if testbed.node_kind == "vm" and compute != controller:
        # Real kernels: the controller VM serves NFS (its kernel's server; containers share the host's
        # kernel, which serves none) and a GlusterFS volume, and every compute VM mounts both
        # (tests/vm/test_vm_storage.py). On VMs, not containers: slurmd requires the network filesystems,
        # and the nspawn tests reboot compute nodes while the controller is away.
        server = controller[0].name
        hosts["all"]["children"][STORAGE_GROUP] = {"hosts": {server: {
            "kiln_storage_nfs_exports": [{"path": NFS_EXPORT, "clients": [f"{testbed.subnet}.0/24"],
                                          "options": "rw,sync,no_subtree_check,no_root_squash", "mode": "1777"}],
            # clients may open files again 15 s after the server returns, not the kernel's 90 s
            "kiln_storage_nfs_lease_seconds": 15,
            # team quotas counted at every write: a test reaches the limit in seconds, not after gluster's 60 s
            "kiln_storage_gluster_volumes": [{"name": GLUSTER_VOLUME, "brick": GLUSTER_BRICK,
                                              "quota_soft_timeout": 0, "quota_hard_timeout": 0}]}}}
        network_mounts = [
            {"path": NFS_MOUNT, "type": "nfs", "source": f"{server}:{NFS_EXPORT}", "options": NFS_OPTIONS},
            {"path": GLUSTER_MOUNT, "type": "glusterfs", "source": f"{server}:/{GLUSTER_VOLUME}", "options": "rw",
             "team_directories": ["projects"]}]
    # Containers: the same host directory in every node (systemd-nspawn --bind) is the shared storage kiln
    # checks. VMs get that directory too (virtio-9p: the apt lock, job inputs), but as the testbed's own
    # plumbing, not a mount kiln checks: QEMU serves 9p from its own loop, which an emulated VM under load
    # can keep past the storage timeout; their shared storage is the real NFS and GlusterFS.
    shared_mounts = network_mounts if testbed.node_kind == "vm" else [
        {"path": "/srv/kiln-shared", "type": "bind", "source": "/srv/kiln-shared", "options": "rw",
         "team_directories": ["projects", "scratch"]}]
    if testbed.node_kind != "vm":
        # the login host (the controller) has the shared directory too, as login nodes have the teams'
        # storage: the isolation suite probes the team directories from there
        for n in controller:
            hosts["all"]["children"]["slurm_controller"]["hosts"][n.name]["kiln_storage_mounts"] = copy.deepcopy(shared_mounts)
    header = f"# Written by `kiln testbed up --name {testbed.name}`; rewritten on every up. Do not edit.\n"
    (tmp / "hosts.yml").write_text(header + yaml.safe_dump(hosts, sort_keys=False))
    cpus = os.cpu_count() or 2
    (tmp / "group_vars" / "all" / "testbed.yml").write_text(header + yaml.safe_dump({
        "kiln_cluster_name": testbed.name,
        "kiln_os": testbed.node_os,
        "ansible_user": "root",
        "ansible_ssh_private_key_file": str(testbed.key),
        "kiln_ssh_known_hosts_file": str(testbed.known_hosts),
        "kiln_ssh_config_file": str(testbed.ssh_config),
        "kiln_slurm_partitions": [{"name": "batch", "groups": ["testbed_compute"], "default": True}],
        "kiln_teams": VM_TEAMS if testbed.node_kind == "vm" else TESTBED_TEAMS,
        "kiln_qos": TESTBED_QOS,
        # alice is an operator: sudo without a password (testbed users log in by key and have none)
        "kiln_operators": {"gid": 2050, "users": ["alice"], "password": False},
        # kiln's host firewall, off: turned on, this host (on the bridge) is the one admin network, and where
        # users log in from (the controller is the login host: SSH from anywhere else, compute nodes too, is shut)
        "kiln_firewall": {"enabled": False, "admin_networks": [f"{testbed.host_address}/32"],
                          "access_networks": [f"{testbed.host_address}/32"]},
        **(VM_SETTINGS if testbed.node_kind == "vm" else NSPAWN_SETTINGS),
        # soft-RoCE under emulation moves 4-10 MB/s and stalls under load: 200 messages of 64 KiB a pair of
        # the bandwidth ring (13 MB; CI saw 1000 run past the 90 s bound)
        **({"kiln_check_ib_bandwidth_iterations": 200} if testbed.node_kind == "vm" else {}),
        # Node checks: the simulated GPUs' kernel messages come from kiln-sim (kiln/testbed/simulators); nodes
        # share the host's clock and its 8 MiB locked-memory limit, so those two are not checked here.
        "kiln_check_kernel_log": "kiln-sim kernel-log --since={since}",
        # Debian's non-free driver; nodes are containers (no kernel modules): user space only.
        "kiln_nvidia_source": "debian",
        "kiln_check_memlock": False,
        "kiln_check_time_sync": False,
        # A node that loses power is DOWN in Slurm within about half a minute (tests wait for it).
        "kiln_slurm_slurmd_timeout": 30,
        # The testbed's stand-in hardware: the simulators' units (kiln/testbed/simulators) are the
        # machine's, not drift from the image.
        "kiln_drift_ignore_units": ["kiln-sim-*", "nvidia-fabricmanager.service"],
        # Monitoring: the GPU simulators' dcgm-exporter stand-in serves :9400; short intervals so tests
        # see an alert fire and resolve within a minute or two (MONITORING_SETTINGS)
        **MONITORING_SETTINGS,
        **(VM_MONITORING_SETTINGS if testbed.node_kind == "vm" else {}),
        # kiln usage: a price per GPU-hour of the testbed's one node type
        "kiln_usage_gpu_hour_prices": {"testbed_compute": 2.5},
        "kiln_usage_currency": "EUR",
        **_kept(path),
    }, sort_keys=False))
    if testbed.node_kind == "vm":
        from kiln.testbed.vm import VM_CPUS
        cpus = VM_CPUS
    (tmp / "group_vars" / "testbed_compute.yml").write_text(header + yaml.safe_dump({
        "kiln_cpus": cpus, "kiln_memory_mb": 1024, "kiln_gpu_count": GPUS_PER_NODE,
        "kiln_gpu_model": SIM_GPU_MODEL, "kiln_nvswitch": True, "kiln_nvidia_kernel_modules": "none",
        "kiln_fabric": VM_FABRIC if testbed.node_kind == "vm" else {
            "type": "infiniband", "hca_count": SIM_HCAS, "rate_gbps": SIM_RATE,
            "hcas": [f"mlx5_{i}" for i in range(SIM_HCAS)], "socket_ifname": "host0"},
        "kiln_storage_mounts": [
            {"path": "/scratch", "type": "tmpfs", "source": "tmpfs", "options": "rw,size=64m"}, *shared_mounts],
        # VMs: each one's blank local disk (kiln/testbed/vm.py) is an encrypted volume, unlocked at boot through
        # tang on the controller (tests/vm/test_vm_storage.py); containers have no block devices of their own
        **({"kiln_encrypted_volumes": [ENCRYPTED_VOLUME]} if network_mounts else {}),
    }, sort_keys=False))
    (tmp / "group_vars" / "all" / "versions.yml").write_text(header + yaml.safe_dump(
        {"kiln_versions": VERSIONS_BY_OS[testbed.node_os]}, sort_keys=False))
    (tmp / ".kiln-testbed").write_text(testbed.name + "\n")
    if path.exists():
        if not (path / ".kiln-testbed").exists():
            raise FileExistsError(f"{path} exists and was not written by the testbed; not replacing it")
        shutil.rmtree(path)
    tmp.rename(path)
