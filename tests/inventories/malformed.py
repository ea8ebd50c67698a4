"""Malformed inventories: each case is the small valid inventory (tests/inventories/small) with some
files replaced, plus the file and key its error must name.

``files`` maps a path relative to the inventory to its new content (``None`` deletes the file,
``bytes`` are written raw). ``file`` and ``key`` are what the error must name; ``text`` is a fragment
the message must contain.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GPU_A = """ansible_host: "10.0.0.{{ 10 + inventory_hostname[3:] | int }}"
kiln_cpus: 32
kiln_memory_mb: 128000
kiln_gpu_count: 4
kiln_gpu_model: a100
kiln_fabric: {type: infiniband, hca_count: 4, rate_gbps: 200}
"""

CLUSTER = """kiln_cluster_name: small
ansible_user: root
kiln_slurm_partitions:
  - {name: gpu, groups: [gpu_a], default: true}
  - {name: cpu, groups: [cpu_b]}
kiln_teams:
  - name: alpha
    shares: 70
    gpu_limit: 4
    users: [{name: ann, uid: 3001}]
  - name: beta
    shares: 30
    users: [{name: ben, uid: 3002}]
kiln_storage_mounts:
  - {path: /home, type: nfs, source: "nfs1:/home", options: "rw,hard"}
"""

HOSTS = """all:
  children:
    slurm_controller:
      hosts:
        ctl1: {ansible_host: 10.0.0.1}
    login:
      hosts:
        ctl1:
    compute:
      children:
        gpu_a:
          hosts:
            gpu[01:04]:
        cpu_b:
          hosts:
            cpu01: {ansible_host: 10.0.0.31}
"""


@dataclass
class Case:
    name: str
    files: dict[str, str | bytes | None]
    file: str
    key: str
    text: str
    line: int | None = None
    extra: dict = field(default_factory=dict)


def _mount(line: str) -> str:
    return CLUSTER.replace('  - {path: /home, type: nfs, source: "nfs1:/home", options: "rw,hard"}', line)


CASES = [
    Case("yaml_syntax_error", {"group_vars/gpu_a.yml": GPU_A + "kiln_features: [a, b\nkiln_x: 1\n"},
         "group_vars/gpu_a.yml", "-", "YAML syntax error", line=8),
    Case("yaml_bad_indent_hosts", {"hosts.yml": HOSTS.replace("    login:", "   login:")},
         "hosts.yml", "-", "YAML syntax error"),
    Case("misspelt_kiln_setting", {"group_vars/gpu_a.yml": GPU_A.replace("kiln_gpu_model", "kiln_gpu_modle")},
         "group_vars/gpu_a.yml", "kiln_gpu_modle", "did you mean 'kiln_gpu_model'"),
    Case("misspelt_version_pin", {"group_vars/all/versions.yml":
         'kiln_versions:\n  nvidia_drvier: "535.261.03"\n  nvidia_driver: "535.261.03"\n  cuda: "11.8.89"\n'
         '  nccl: "2.18.5"\n  dcgm: "3.3.9"\n  slurm: "22.05.8"\n'},
         "group_vars/all/versions.yml", "kiln_versions.nvidia_drvier", "did you mean 'nvidia_driver'"),
    Case("misspelt_key_inside_fabric", {"group_vars/gpu_a.yml": GPU_A.replace("hca_count", "hca_cont")},
         "group_vars/gpu_a.yml", "kiln_fabric.hca_cont", "did you mean 'hca_count'"),
    Case("wrong_type_cpus", {"group_vars/cpu_b.yml": "kiln_cpus: lots\nkiln_memory_mb: 64000\n"},
         "group_vars/cpu_b.yml", "kiln_cpus", "valid integer", line=1),
    Case("non_integer_gpu_count", {"group_vars/gpu_a.yml": GPU_A.replace("kiln_gpu_count: 4", "kiln_gpu_count: 4.5")},
         "group_vars/gpu_a.yml", "kiln_gpu_count", "integer"),
    Case("gpu_count_as_string", {"group_vars/gpu_a.yml": GPU_A.replace("kiln_gpu_count: 4", 'kiln_gpu_count: "8"')},
         "group_vars/gpu_a.yml", "kiln_gpu_count", "integer"),
    Case("negative_gpu_count", {"group_vars/gpu_a.yml": GPU_A.replace("kiln_gpu_count: 4", "kiln_gpu_count: -2")},
         "group_vars/gpu_a.yml", "kiln_gpu_count", "greater than or equal to 0"),
    Case("gpu_count_without_model", {"group_vars/gpu_a.yml": GPU_A.replace("kiln_gpu_model: a100\n", "")},
         "group_vars/gpu_a.yml", "kiln_gpu_model", "no GPU model"),
    Case("duplicate_host_address", {"hosts.yml": HOSTS.replace("10.0.0.31", "10.0.0.1")},
         "hosts.yml", "ansible_host", "10.0.0.1 is used by 2 hosts"),
    Case("host_in_two_node_types_conflicting",
         {"hosts.yml": HOSTS.replace("            cpu01: {ansible_host: 10.0.0.31}",
                                     "            cpu01: {ansible_host: 10.0.0.31}\n            gpu02:")},
         "hosts.yml", "gpu02.kiln_cpus", "conflict"),
    Case("compute_without_cpus", {"group_vars/cpu_b.yml": "kiln_memory_mb: 64000\n"},
         "group_vars/cpu_b.yml", "kiln_cpus", "no CPU count"),
    Case("compute_without_memory", {"group_vars/cpu_b.yml": "kiln_cpus: 16\n"},
         "group_vars/cpu_b.yml", "kiln_memory_mb", "no memory"),
    Case("unsupported_os", {"group_vars/cpu_b.yml": "kiln_cpus: 16\nkiln_memory_mb: 64000\nkiln_os: centos7\n"},
         "group_vars/cpu_b.yml", "kiln_os", "unsupported OS 'centos7'", line=3),
    # one Slurm pin for the cluster: a release's package version names that release's package, and a
    # Debian 13 slurmd (24.11) beside a Debian 12 slurmctld (22.05) is one Slurm never runs
    Case("debian13_compute_beside_debian12_controller",
         {"group_vars/cpu_b.yml": "kiln_cpus: 16\nkiln_memory_mb: 64000\nkiln_os: debian13\n"},
         "group_vars/cpu_b.yml", "kiln_os", "runs debian13 but", line=3),
    Case("storage_mount_without_type", {"group_vars/all/cluster.yml": _mount('  - {path: /home, source: "nfs1:/home"}')},
         "group_vars/all/cluster.yml", "kiln_storage_mounts[0].type", "required"),
    Case("storage_mount_relative_path", {"group_vars/all/cluster.yml": _mount('  - {path: home, type: nfs, source: "nfs1:/home"}')},
         "group_vars/all/cluster.yml", "kiln_storage_mounts[0].path", "relative"),
    Case("unknown_storage_type", {"group_vars/all/cluster.yml": _mount('  - {path: /home, type: zfs, source: "tank/home"}')},
         "group_vars/all/cluster.yml", "kiln_storage_mounts[0].type", "unknown storage type 'zfs'"),
    Case("duplicate_mount_point", {"group_vars/all/cluster.yml": _mount(
         '  - {path: /home, type: nfs, source: "nfs1:/home"}\n  - {path: /home, type: nfs, source: "nfs2:/home"}')},
         "group_vars/all/cluster.yml", "kiln_storage_mounts", "listed twice"),
    Case("nfs_soft_mount", {"group_vars/all/cluster.yml": _mount('  - {path: /home, type: nfs, source: "nfs1:/home", options: "rw,soft"}')},
         "group_vars/all/cluster.yml", "kiln_storage_mounts[0]", "soft NFS mounts return I/O errors"),
    Case("nfs_unknown_version", {"group_vars/all/cluster.yml": _mount('  - {path: /home, type: nfs, source: "nfs1:/home", options: "vers=5"}')},
         "group_vars/all/cluster.yml", "kiln_storage_mounts[0]", "vers=5 is not an NFS version"),
    Case("nfs_timeo_not_a_number", {"group_vars/all/cluster.yml": _mount('  - {path: /home, type: nfs, source: "nfs1:/home", options: "timeo=1m"}')},
         "group_vars/all/cluster.yml", "kiln_storage_mounts[0]", "timeo=1m must be a whole number"),
    Case("backup_servers_on_nfs", {"group_vars/all/cluster.yml": _mount('  - {path: /home, type: nfs, source: "nfs1:/home", backup_servers: [nfs2]}')},
         "group_vars/all/cluster.yml", "kiln_storage_mounts[0]", "backup_servers is for glusterfs"),
    Case("team_directories_for_a_team_without_gid", {"group_vars/all/cluster.yml": _mount(
         '  - {path: /home, type: nfs, source: "nfs1:/home", team_directories: [projects]}')},
         "group_vars/all/cluster.yml", "kiln_teams[0].gid", "team 'alpha' has no gid"),
    Case("team_directories_on_tmpfs", {"group_vars/all/cluster.yml": _mount(
         '  - {path: /scratch, type: tmpfs, source: tmpfs, team_directories: [projects]}')},
         "group_vars/all/cluster.yml", "kiln_storage_mounts[0]", "lost at every boot"),
    Case("team_directory_climbing_out", {"group_vars/all/cluster.yml": _mount(
         '  - {path: /home, type: nfs, source: "nfs1:/home", team_directories: [../etc]}')},
         "group_vars/all/cluster.yml", "kiln_storage_mounts[0].team_directories[0]", "team directory"),
    Case("team_directory_twice", {"group_vars/all/cluster.yml": _mount(
         '  - {path: /home, type: nfs, source: "nfs1:/home", team_directories: [projects, projects]}')},
         "group_vars/all/cluster.yml", "kiln_storage_mounts[0]", "lists a directory twice"),
    # a compute node's BMC (kiln_bmc): trusted one way, on compute nodes only, each its own system
    Case("bmc_without_trust", {"hosts.yml": HOSTS.replace("cpu01: {ansible_host: 10.0.0.31}",
         "cpu01: {ansible_host: 10.0.0.31, kiln_bmc: {host: 10.9.0.31, user: admin}}")},
         "hosts.yml", "kiln_bmc", "fingerprint or its ca_file"),
    Case("bmc_fingerprint_not_sha256", {"hosts.yml": HOSTS.replace("cpu01: {ansible_host: 10.0.0.31}",
         "cpu01: {ansible_host: 10.0.0.31, kiln_bmc: {host: 10.9.0.31, user: admin, fingerprint: 'ab:cd'}}")},
         "hosts.yml", "kiln_bmc.fingerprint", "pattern"),
    Case("bmc_address_with_shell", {"hosts.yml": HOSTS.replace("cpu01: {ansible_host: 10.0.0.31}",
         "cpu01: {ansible_host: 10.0.0.31, kiln_bmc: {host: '10.9.0.31;reboot', user: admin, fingerprint: 'ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab'}}")},
         "hosts.yml", "kiln_bmc.host", "10.9.0.31;reboot"),
    Case("bmc_on_the_controller", {"hosts.yml": HOSTS.replace("ctl1: {ansible_host: 10.0.0.1}",
         "ctl1: {ansible_host: 10.0.0.1, kiln_bmc: {host: 10.9.0.1, user: admin, fingerprint: 'ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab'}}")},
         "hosts.yml", "kiln_bmc", "is no compute node"),
    Case("bmc_ca_file_missing", {"hosts.yml": HOSTS.replace("cpu01: {ansible_host: 10.0.0.31}",
         "cpu01: {ansible_host: 10.0.0.31, kiln_bmc: {host: 10.9.0.31, user: admin, ca_file: bmc-ca.pem}}")},
         "hosts.yml", "kiln_bmc.ca_file", "cannot read"),
    Case("bmc_ca_file_not_a_certificate", {"../bmc-ca.pem": "not a certificate\n", "hosts.yml": HOSTS.replace(
         "cpu01: {ansible_host: 10.0.0.31}",
         "cpu01: {ansible_host: 10.0.0.31, kiln_bmc: {host: 10.9.0.31, user: admin, ca_file: ../bmc-ca.pem}}")},
         "hosts.yml", "kiln_bmc.ca_file", "holds no PEM certificate"),
    Case("bmc_system_shared", {"host_vars/gpu01.yml": "kiln_bmc: {host: 10.9.0.9, user: admin, fingerprint: 'ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab'}\n",
                               "host_vars/gpu02.yml": "kiln_bmc: {host: 10.9.0.9, user: admin, fingerprint: 'ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab'}\n"},
         "host_vars/gpu02.yml", "kiln_bmc", "names the BMC system of gpu01"),
    Case("nfs_export_on_a_compute_node", {"group_vars/cpu_b.yml": "kiln_cpus: 16\nkiln_memory_mb: 64000\n"
                                          "kiln_storage_nfs_exports: [{path: /srv/nfs, clients: [10.0.0.0/24]}]\n"},
         "group_vars/cpu_b.yml", "kiln_storage_nfs_exports", "not in the storage_servers group"),
    Case("nfs_export_client_with_options", {"hosts.yml": HOSTS.replace("    login:", "    storage_servers:\n      hosts:\n"
         "        nfs1: {ansible_host: 10.0.0.40, kiln_storage_nfs_exports: [{path: /home, clients: ['*(rw,no_root_squash)']}]}\n    login:")},
         "hosts.yml", "kiln_storage_nfs_exports[0].clients[0]", "not a valid NFS export client"),
    Case("gluster_server_on_rocky", {"hosts.yml": HOSTS.replace("    login:", "    storage_servers:\n      hosts:\n"
         "        nas1: {ansible_host: 10.0.0.40, kiln_os: rocky9, kiln_storage_gluster_volumes: [{name: scratch, brick: /srv/gluster/scratch}]}\n    login:")},
         "hosts.yml", "kiln_storage_gluster_volumes", "no glusterfs-server"),
    Case("gluster_brick_in_a_first_level_directory", {"hosts.yml": HOSTS.replace("    login:", "    storage_servers:\n      hosts:\n"
         "        nas1: {ansible_host: 10.0.0.40, kiln_storage_gluster_volumes: [{name: scratch, brick: /data/scratch}]}\n    login:")},
         "hosts.yml", "kiln_storage_gluster_volumes[0].brick", "put the brick in a directory of its own"),
    Case("gluster_brick_beside_an_nfs_export", {"hosts.yml": HOSTS.replace("    login:", "    storage_servers:\n      hosts:\n"
         "        nas1: {ansible_host: 10.0.0.40, kiln_storage_nfs_exports: [{path: /srv/share/nfs, clients: [10.0.0.0/24]}], "
         "kiln_storage_gluster_volumes: [{name: scratch, brick: /srv/share/scratch}]}\n    login:")},
         "hosts.yml", "kiln_storage_gluster_volumes", "brick /srv/share/scratch and NFS export /srv/share/nfs overlap"),
    Case("mount_of_a_path_the_server_does_not_export", {"hosts.yml": HOSTS.replace("    login:", "    storage_servers:\n      hosts:\n"
         "        nfs1: {ansible_host: 10.0.0.40, kiln_storage_nfs_exports: [{path: /export/home, clients: [10.0.0.0/24]}]}\n    login:")},
         "group_vars/all/cluster.yml", "kiln_storage_mounts[0].source", "nfs1 exports /export/home"),
    Case("lustre_mount_without_client", {"group_vars/all/cluster.yml": _mount('  - {path: /lustre, type: lustre, source: "mgs@o2ib:/lfs"}')},
         "group_vars/all/", "kiln_lustre", "mount lustre, which needs kiln_lustre"),
    Case("lustre_mount_without_pin", {"group_vars/all/cluster.yml": _mount('  - {path: /lustre, type: lustre, source: "mgs@o2ib:/lfs"}')
                                      + "kiln_lustre: {lnet_networks: [o2ib0(ib0)]}\n"},
         "group_vars/all/versions.yml", "kiln_versions.lustre", "pin its client packages"),
    Case("lnet_network_with_shell", {"group_vars/all/cluster.yml": CLUSTER + "kiln_lustre: {lnet_networks: ['o2ib0(ib0) $(reboot)']}\n"},
         "group_vars/all/cluster.yml", "kiln_lustre.lnet_networks[0]", "not a valid LNet network"),
    Case("beegfs_mount_without_management_host", {"group_vars/all/cluster.yml": _mount('  - {path: /beegfs, type: beegfs, source: beegfs_nodev}')
                                                   + "kiln_beegfs: {connauth: true}\n"},
         "group_vars/all/cluster.yml", "kiln_beegfs.management_host", "required"),
    Case("ceph_without_monitors", {"group_vars/all/cluster.yml": CLUSTER + "kiln_ceph: {monitors: []}\n"},
         "group_vars/all/cluster.yml", "kiln_ceph.monitors", "at least 1"),
    Case("repository_not_https", {"group_vars/all/cluster.yml": CLUSTER + "kiln_lustre: {lnet_networks: [tcp0(eth0)], "
                                  "repository: {url: 'ftp://mirror/lustre'}}\n"},
         "group_vars/all/cluster.yml", "kiln_lustre.repository.url", "not an http(s) URL"),
    Case("ipoib_without_node_address", {"group_vars/gpu_a.yml": GPU_A.replace(
         "kiln_fabric: {type: infiniband, hca_count: 4, rate_gbps: 200}",
         "kiln_fabric: {type: infiniband, hca_count: 4, rate_gbps: 200, ipoib: {subnet: 10.20.0.0/16}}")},
         "group_vars/gpu_a.yml", "kiln_ipoib_address", "has no kiln_ipoib_address"),
    Case("ipoib_address_outside_its_subnet", {"group_vars/gpu_a.yml": GPU_A.replace(
         "kiln_fabric: {type: infiniband, hca_count: 4, rate_gbps: 200}",
         "kiln_fabric: {type: infiniband, hca_count: 4, rate_gbps: 200, ipoib: {subnet: 10.20.0.0/16}}")
         + 'kiln_ipoib_address: "10.30.0.{{ inventory_hostname[3:] | int }}"\n'},
         "group_vars/gpu_a.yml", "kiln_ipoib_address", "is not in the IPoIB subnet 10.20.0.0/16"),
    Case("ipoib_address_twice", {"group_vars/gpu_a.yml": GPU_A.replace(
         "kiln_fabric: {type: infiniband, hca_count: 4, rate_gbps: 200}",
         "kiln_fabric: {type: infiniband, hca_count: 4, rate_gbps: 200, ipoib: {subnet: 10.20.0.0/16}}")
         + "kiln_ipoib_address: 10.20.0.5\n"},
         "group_vars/gpu_a.yml", "kiln_ipoib_address", "10.20.0.5 is used by 4 hosts"),
    Case("ipoib_datagram_mtu_too_big", {"group_vars/gpu_a.yml": GPU_A.replace(
         "kiln_fabric: {type: infiniband, hca_count: 4, rate_gbps: 200}",
         "kiln_fabric: {type: infiniband, hca_count: 4, rate_gbps: 200, ipoib: {subnet: 10.20.0.0/16, mtu: 65520}}")},
         "group_vars/gpu_a.yml", "kiln_fabric.ipoib", "above datagram mode's 4092"),
    Case("lossless_roce_on_inbox_stack", {"group_vars/gpu_a.yml": GPU_A.replace(
         "kiln_fabric: {type: infiniband, hca_count: 4, rate_gbps: 200}",
         "kiln_fabric: {type: roce, hca_count: 4, rate_gbps: 200, roce: {interfaces: [eth2], pfc_priority: 3}}")},
         "group_vars/gpu_a.yml", "kiln_fabric.roce", "comes with NVIDIA's stack"),
    Case("rxe_without_netdev", {"group_vars/gpu_a.yml": GPU_A.replace(
         "kiln_fabric: {type: infiniband, hca_count: 4, rate_gbps: 200}", "kiln_fabric: {type: rxe, hca_count: 1}")},
         "group_vars/gpu_a.yml", "kiln_fabric", "needs rxe_netdev"),
    Case("gid_index_on_infiniband", {"group_vars/gpu_a.yml": GPU_A.replace(
         "kiln_fabric: {type: infiniband, hca_count: 4, rate_gbps: 200}",
         "kiln_fabric: {type: infiniband, hca_count: 4, rate_gbps: 200, gid_index: 3}")},
         "group_vars/gpu_a.yml", "kiln_fabric", "gid_index is for RoCE"),
    Case("ofed_stack_without_pin", {"group_vars/gpu_a.yml": GPU_A.replace(
         "kiln_fabric: {type: infiniband, hca_count: 4, rate_gbps: 200}",
         "kiln_fabric: {type: infiniband, stack: doca, hca_count: 4, rate_gbps: 200}")},
         "group_vars/all/versions.yml", "kiln_versions.ofed", "pin it"),
    Case("opensm_on_a_cpu_node", {"hosts.yml": HOSTS.replace("cpu01: {ansible_host: 10.0.0.31}",
                                                             "cpu01: {ansible_host: 10.0.0.31, kiln_opensm: true}")},
         "hosts.yml", "kiln_opensm", "cpu01 runs a subnet manager but its fabric is none"),
    Case("partition_names_missing_group", {"group_vars/all/cluster.yml": CLUSTER.replace("groups: [cpu_b]", "groups: [cpu_c]")},
         "group_vars/all/cluster.yml", "kiln_slurm_partitions[1].groups", "'cpu_c', which is not in the inventory"),
    Case("two_default_partitions", {"group_vars/all/cluster.yml": CLUSTER.replace("groups: [cpu_b]}", "groups: [cpu_b], default: true}")},
         "group_vars/all/cluster.yml", "kiln_slurm_partitions", "more than one partition"),
    Case("team_negative_shares", {"group_vars/all/cluster.yml": CLUSTER.replace("shares: 30", "shares: -5")},
         "group_vars/all/cluster.yml", "kiln_teams[1].shares", "greater than or equal to 1"),
    Case("login_limits_without_tasks", {"group_vars/all/cluster.yml": CLUSTER + "kiln_login_user_limits: {tasks: 0}\n"},
         "group_vars/all/cluster.yml", "kiln_login_user_limits.tasks", "greater than or equal to 16"),
    Case("login_limits_in_a_shell_word", {"group_vars/all/cluster.yml": CLUSTER + "kiln_login_user_limits: {memory_percent: '20%;x'}\n"},
         "group_vars/all/cluster.yml", "kiln_login_user_limits.memory_percent", "integer"),
    Case("operator_not_a_team_user", {"group_vars/all/cluster.yml": CLUSTER + "kiln_operators: {gid: 3900, users: [ann, mallory]}\n"},
         "group_vars/all/cluster.yml", "kiln_operators.users[1]", "'mallory' is not a user of kiln_teams"),
    Case("operators_gid_of_a_user", {"group_vars/all/cluster.yml": CLUSTER + "kiln_operators: {gid: 3001, users: [ann]}\n"},
         "group_vars/all/cluster.yml", "kiln_operators.gid", "gid 3001 is already"),
    Case("operators_group_named_sudo", {"group_vars/all/cluster.yml": CLUSTER + "kiln_operators: {group: sudo, gid: 3900, users: [ann]}\n"},
         "group_vars/all/cluster.yml", "kiln_operators.group", "a system group"),
    Case("team_user_two_uids", {"group_vars/all/cluster.yml": CLUSTER.replace("{name: ben, uid: 3002}", "{name: ann, uid: 3009}")},
         "group_vars/all/cluster.yml", "kiln_teams[1].users[0].uid", "uid 3009"),
    Case("missing_version_pin", {"group_vars/all/versions.yml":
         'kiln_versions:\n  cuda: "11.8.89"\n  nccl: "2.18.5"\n  dcgm: "3.3.9"\n  slurm: "22.05.8"\n'},
         "group_vars/all/versions.yml", "kiln_versions.nvidia_driver", "role nvidia_driver needs"),
    Case("version_pin_not_quoted", {"group_vars/all/versions.yml":
         'kiln_versions:\n  nvidia_driver: "535.261.03"\n  cuda: 12.10\n  nccl: "2.18.5"\n  dcgm: "3.3.9"\n  slurm: "22.05.8"\n'},
         "group_vars/all/versions.yml", "kiln_versions.cuda", "quote it"),
    Case("invalid_host_range", {"hosts.yml": HOSTS.replace("gpu[01:04]", "gpu[01:0x]")},
         "hosts.yml", "gpu_a.hosts.gpu[01:0x]", "invalid host range"),
    Case("empty_host_range", {"hosts.yml": HOSTS.replace("gpu[01:04]", "gpu[09:04]")},
         "hosts.yml", "gpu_a.hosts.gpu[09:04]", "expands to no hosts"),
    Case("controller_group_empty", {"hosts.yml": HOSTS.replace("        ctl1: {ansible_host: 10.0.0.1}\n    login:",
                                                              "    login:").replace("        ctl1:\n", "        ctl1: {ansible_host: 10.0.0.1}\n")},
         "hosts.yml", "slurm_controller", "missing or empty"),
    Case("two_controllers_without_ha", {"hosts.yml": HOSTS.replace("        ctl1: {ansible_host: 10.0.0.1}",
                                                                  "        ctl1: {ansible_host: 10.0.0.1}\n        ctl2: {ansible_host: 10.0.0.2}")},
         "hosts.yml", "slurm_controller", "kiln_slurm_ha is not true"),
    Case("unreadable_group_vars_file", {"group_vars/cpu_b.yml": b"kiln_cpus: 16\nkiln_memory_mb: \xff\xfe64000\n"},
         "group_vars/cpu_b.yml", "-", "not UTF-8"),
    Case("group_vars_not_a_mapping", {"group_vars/cpu_b.yml": "- kiln_cpus: 16\n"},
         "group_vars/cpu_b.yml", "-", "must hold a mapping"),
    Case("cluster_setting_differs_by_group", {"group_vars/cpu_b.yml": "kiln_cpus: 16\nkiln_memory_mb: 64000\nkiln_cluster_name: other\n"},
         "group_vars/cpu_b.yml", "kiln_cluster_name", "set it once in group_vars/all/"),
    Case("bad_ssh_port", {"hosts.yml": HOSTS.replace("{ansible_host: 10.0.0.31}", "{ansible_host: 10.0.0.31, ansible_port: ssh}")},
         "hosts.yml", "ansible_port", "TCP port"),
    Case("rdma_fabric_without_hcas", {"group_vars/gpu_a.yml": GPU_A.replace("hca_count: 4", "hca_count: 0")},
         "group_vars/gpu_a.yml", "kiln_fabric.hca_count", "needs hca_count > 0"),
    Case("bad_cluster_name", {"group_vars/all/cluster.yml": CLUSTER.replace("kiln_cluster_name: small", "kiln_cluster_name: My_Cluster")},
         "group_vars/all/cluster.yml", "kiln_cluster_name", "lower case"),
    Case("no_hosts_file", {"hosts.yml": None}, ".", "-", "no hosts file"),
]
