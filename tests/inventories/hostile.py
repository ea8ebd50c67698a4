"""Hostile and malformed values, as an attacker who controls one value of an inventory (a branch, a
group_vars file, a host name) would write them: each must be refused before anything connects.

Each case is the small valid inventory (tests/inventories/small) with files replaced, like
``malformed.py``; ``file``, ``key`` and ``text`` are what the error must name. ``Special`` contents
make a FIFO, a link or a huge file instead of text.
"""

from __future__ import annotations

from dataclasses import dataclass

from malformed import CLUSTER, GPU_A, HOSTS, Case


@dataclass(frozen=True)
class Special:
    kind: str  # "fifo", "link", "size"
    target: str = ""
    size: int = 0


CPU_B = "kiln_cpus: 16\nkiln_memory_mb: 64000\n"
VAULTED_CLUSTER_NAME = """kiln_cluster_name: !vault |
          $ANSIBLE_VAULT;1.1;AES256
          63303232663133336134383464383061363632653963363463393137626261316638363964333332
          6434623130636465356333616636623565616162643561340a326238316162323437323436643735
          66306436613231386634643234363332346337346135306530333631646539343866303432336165
          3730643832346265650a396135643036633431613065656635383634356563373861633732323462
          3532
"""
VAULT_PASSWORD = "kiln-test-vault"  # the password of the value above; never a real one
BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, c in zip("abcdefgh", "bcdefghi"))


def cluster(old: str, new: str) -> dict:
    assert old in CLUSTER, old
    return {"group_vars/all/cluster.yml": CLUSTER.replace(old, new)}


def cpu_b(extra: str) -> dict:
    return {"group_vars/cpu_b.yml": CPU_B + extra}


def gpu_a(old: str, new: str) -> dict:
    assert old in GPU_A, old
    return {"group_vars/gpu_a.yml": GPU_A.replace(old, new)}


def hosts(old: str, new: str) -> dict:
    assert old in HOSTS, old
    return {"hosts.yml": HOSTS.replace(old, new)}


C = "group_vars/all/cluster.yml"
B = "group_vars/cpu_b.yml"
G = "group_vars/gpu_a.yml"
HOSTS_FILE = "hosts.yml"
MOUNT = '  - {path: /home, type: nfs, source: "nfs1:/home", options: "rw,hard"}'

CASES = [
    # --- values that would run as root on nodes ---
    Case("team_name_runs_a_command", cluster("name: alpha", 'name: "vision;id>/tmp/x;#"'),
         C, "kiln_teams[0].name", "not a valid name"),
    Case("user_name_is_an_option", cluster("{name: ann, uid: 3001}", '{name: "-rf", uid: 3001}'),
         C, "kiln_teams[0].users[0].name", "not a valid name"),
    Case("user_name_with_semicolon", cluster("{name: ben, uid: 3002}", '{name: "ben;reboot", uid: 3002}'),
         C, "kiln_teams[1].users[0].name", "not a valid name"),
    Case("version_pin_adds_a_path", {"group_vars/all/versions.yml":
         'kiln_versions:\n  nvidia_driver: "535.261.03"\n  cuda: "11.8.89"\n  nccl: "2.18.5"\n  dcgm: "3.3.9"\n'
         '  slurm: "22.05.8"\n  pyxis: "0.20.0 /"\n'}, "group_vars/all/versions.yml", "kiln_versions.pyxis",
         "not a valid version"),
    Case("version_pin_command_substitution", {"group_vars/all/versions.yml":
         'kiln_versions:\n  nvidia_driver: "535.261.03$(id)"\n  cuda: "11.8.89"\n  nccl: "2.18.5"\n  dcgm: "3.3.9"\n'
         '  slurm: "22.05.8"\n'}, "group_vars/all/versions.yml", "kiln_versions.nvidia_driver", "not a valid version"),
    Case("host_name_runs_a_command", hosts("cpu01: {ansible_host: 10.0.0.31}",
         '"gpu1;touch /tmp/x": {ansible_host: 10.0.0.31}'), HOSTS_FILE, "cpu_b.hosts.gpu1;touch /tmp/x",
         "not a valid host name", line=16),
    Case("host_name_starts_with_dash", hosts("cpu01: {ansible_host: 10.0.0.31}",
         '"-oProxyCommand=x": {ansible_host: 10.0.0.31}'), HOSTS_FILE, "cpu_b.hosts.-oProxyCommand=x",
         "not a valid host name", line=16),
    Case("host_names_differ_only_in_case", hosts("cpu01: {ansible_host: 10.0.0.31}",
         "cpu01: {ansible_host: 10.0.0.31}\n            CPU01: {ansible_host: 10.0.0.32}"), HOSTS_FILE, "CPU01",
         "differ only in case", line=17),
    Case("extra_package_runs_a_command", {"group_vars/all/stack.yml":
         'kiln_nvidia_driver_extra_packages: ["nvidia-utils; rm -rf /"]\n'}, "group_vars/all/stack.yml",
         "kiln_nvidia_driver_extra_packages[0]", "not a valid package name", line=1),
    Case("kernel_log_is_a_shell_script", {"group_vars/all/checks.yml": 'kiln_check_kernel_log: "dmesg; rm -rf /"\n'},
         "group_vars/all/checks.yml", "kiln_check_kernel_log", "no shell syntax", line=1),
    Case("kernel_log_pipes_to_a_shell", {"group_vars/all/checks.yml":
         'kiln_check_kernel_log: "dmesg | sh"\n'}, "group_vars/all/checks.yml", "kiln_check_kernel_log", "no shell"),
    # --- values that would add lines to rendered files ---
    Case("max_time_adds_a_slurm_line", cluster("groups: [cpu_b]}", 'groups: [cpu_b], max_time: "1:00:00\\nNodeName=evil"}'),
         C, "kiln_slurm_partitions[1].max_time", "control character"),
    Case("max_time_not_a_slurm_time", cluster("groups: [cpu_b]}", 'groups: [cpu_b], max_time: "1 day"}'),
         C, "kiln_slurm_partitions[1].max_time", "not a valid Slurm time"),
    Case("partition_name_adds_a_key", cluster("name: cpu,", 'name: "cpu Nodes=ALL",'),
         C, "kiln_slurm_partitions[1].name", "not a valid name"),
    Case("sysctl_value_adds_a_line", cpu_b('kiln_sysctls: {vm.swappiness: "1\\nkernel.core_pattern=|/tmp/x"}\n'),
         B, "kiln_sysctls.vm.swappiness", "control character", line=3),
    Case("sysctl_core_pattern_pipe", cpu_b('kiln_sysctls: {kernel.core_pattern: "|/tmp/evil %p"}\n'),
         B, "kiln_sysctls.kernel.core_pattern", "sysctl value", line=3),
    Case("sysctl_key_with_newline", cpu_b('kiln_sysctls: {"vm.x\\nkernel.y": 1}\n'),
         B, "kiln_sysctls.vm.x\\nkernel.y", "control character"),
    Case("ntp_server_adds_a_line", {"group_vars/all/time.yml": 'kiln_ntp_servers: ["pool.ntp.org\\nallow all"]\n'},
         "group_vars/all/time.yml", "kiln_ntp_servers[0]", "control character", line=1),
    Case("ntp_server_adds_options", {"group_vars/all/time.yml": 'kiln_ntp_servers: ["pool.ntp.org maxpoll 1"]\n'},
         "group_vars/all/time.yml", "kiln_ntp_servers[0]", "neither an IP address nor a host name"),
    Case("socket_ifname_adds_a_line", gpu_a("rate_gbps: 200}", 'rate_gbps: 200, socket_ifname: "eth0\\nNCCL_DEBUG=TRACE"}'),
         G, "kiln_fabric.socket_ifname", "control character"),
    Case("hca_name_adds_a_variable", gpu_a("rate_gbps: 200}", 'rate_gbps: 200, hcas: ["mlx5_0 NCCL_X=1"]}'),
         G, "kiln_fabric.hcas[0]", "not a valid name"),
    Case("gpu_model_adds_a_gres", gpu_a("kiln_gpu_model: a100", 'kiln_gpu_model: "a100 Gres=evil"'),
         G, "kiln_gpu_model", "not a valid name", line=5),
    Case("feature_adds_a_weight", gpu_a("kiln_gpu_model: a100", 'kiln_gpu_model: a100\nkiln_features: ["fast Weight=1"]'),
         G, "kiln_features[0]", "not a valid name", line=6),
    Case("mount_option_adds_an_fstab_line", cluster(MOUNT, '  - {path: /home, type: nfs, source: "nfs1:/home", '
         'options: "rw\\n/dev/sda1 / ext4 defaults 0 0"}'), C, "kiln_storage_mounts[0].options", "control character"),
    Case("mount_option_with_space", cluster(MOUNT, '  - {path: /home, type: nfs, source: "nfs1:/home", '
         'options: "rw,hard 0 0"}'), C, "kiln_storage_mounts[0].options", "not a valid mount options"),
    Case("mount_source_with_space", cluster(MOUNT, '  - {path: /home, type: nfs, source: "nfs1:/home /etc"}'),
         C, "kiln_storage_mounts[0].source", "not a valid mount source"),
    Case("mount_point_is_root", cluster(MOUNT, '  - {path: /, type: nfs, source: "nfs1:/home"}'),
         C, "kiln_storage_mounts[0].path", "system directory"),
    Case("mount_point_in_etc", cluster(MOUNT, '  - {path: /etc/slurm, type: nfs, source: "nfs1:/slurm"}'),
         C, "kiln_storage_mounts[0].path", "system directory"),
    Case("mount_point_not_normalised", cluster(MOUNT, '  - {path: /home/../etc, type: nfs, source: "nfs1:/home"}'),
         C, "kiln_storage_mounts[0].path", "not normalised"),
    Case("cluster_name_adds_a_line", cluster("kiln_cluster_name: small", 'kiln_cluster_name: "small\\nSlurmUser=root"'),
         C, "kiln_cluster_name", "control character", line=1),
    Case("proxy_breaks_out_of_its_quotes", {"group_vars/all/proxy.yml":
         'kiln_package_proxy: "http://10.0.0.1:3142\\"; Acquire::http::Proxy \\"x"\n'},
         "group_vars/all/proxy.yml", "kiln_package_proxy", "not an http(s) URL"),
    Case("url_with_a_quote", {"group_vars/all/proxy.yml": "kiln_nccl_tests_url: \"https://x/a'$(id)'.tgz\"\n"},
         "group_vars/all/proxy.yml", "kiln_nccl_tests_url", "not an http(s) URL"),
    Case("topology_switch_adds_a_key", {"group_vars/all/topo.yml": 'kiln_topology: {"s1 Nodes=ALL": [gpu01]}\n'},
         "group_vars/all/topo.yml", "kiln_topology.s1 Nodes=ALL", "not a valid name"),
    Case("nul_character_in_a_value", cpu_b('kiln_features: ["a\\0b"]\n'), B, "kiln_features[0]", "control character"),
    Case("escape_sequence_in_a_value", cpu_b('kiln_features: ["\\e[2Jfast"]\n'), B, "kiln_features[0]",
         "control character"),
    # --- values that would reach ssh on the operator's machine ---
    Case("ansible_host_adds_proxycommand", hosts("{ansible_host: 10.0.0.31}",
         '{ansible_host: "10.0.0.31\\n  ProxyCommand touch /tmp/x"}'), HOSTS_FILE, "ansible_host",
         "control character", line=16),
    Case("ansible_host_is_an_ssh_option", hosts("{ansible_host: 10.0.0.31}", '{ansible_host: "-oProxyCommand=x"}'),
         HOSTS_FILE, "ansible_host", "neither an IP address nor a host name", line=16),
    Case("ansible_user_adds_an_option", cluster("ansible_user: root", 'ansible_user: "root -oProxyCommand=x"'),
         C, "ansible_user", "not a valid user name", line=2),
    Case("known_hosts_path_with_space", {"group_vars/all/ssh.yml": 'kiln_ssh_known_hosts_file: "/tmp/k h"\n'},
         "group_vars/all/ssh.yml", "kiln_ssh_known_hosts_file", "path"),
    Case("ssh_key_path_is_an_option", cluster("ansible_user: root", 'ansible_user: root\nansible_ssh_private_key_file: "-F/x"'),
         C, "ansible_ssh_private_key_file", "path", line=3),
    # --- numbers out of range ---
    Case("cpus_negative", {B: "kiln_cpus: -64\nkiln_memory_mb: 64000\n"}, B, "kiln_cpus", "greater than or equal to 1",
         line=1),
    Case("memory_zero", {B: "kiln_cpus: 16\nkiln_memory_mb: 0\n"}, B, "kiln_memory_mb", "greater than or equal to 1",
         line=2),
    Case("health_check_interval_negative", {"group_vars/all/hc.yml": "kiln_health_check_interval: -5\n"},
         "group_vars/all/hc.yml", "kiln_health_check_interval", "greater than or equal to 1", line=1),
    Case("gpu_count_absurd", gpu_a("kiln_gpu_count: 4", "kiln_gpu_count: 100000"), G, "kiln_gpu_count",
         "less than or equal to 64"),
    Case("warn_not_below_fail", cluster(MOUNT, '  - {path: /home, type: nfs, source: "nfs1:/home", warn_percent: 95, '
         'fail_percent: 90}'), C, "kiln_storage_mounts[0]", "must be below fail_percent"),
    Case("uid_shared_by_two_users", cluster("{name: ben, uid: 3002}", "{name: ben, uid: 3001}"),
         C, "kiln_teams[1].users[0].uid", "already the uid of user ann"),
    Case("team_gid_is_a_users_uid", cluster("shares: 30", "shares: 30\n    gid: 3001"),
         C, "kiln_teams[1].gid", "is already user ann's"),
    Case("team_takes_a_system_group", cluster("name: alpha", "name: root"), C, "kiln_teams[0].name", "system group"),
    # --- what runs on the operator's machine while validating ---
    Case("lookup_pipe_in_a_kiln_value", cluster("kiln_cluster_name: small",
         "kiln_cluster_name: \"{{ lookup('pipe', 'touch /tmp/kiln-hostile-lookup') }}\""),
         C, "kiln_cluster_name", "a function call is not allowed", line=1),
    Case("lookup_through_another_variable", cluster("kiln_cluster_name: small",
         "kiln_cluster_name: \"{{ site_name }}\"\nsite_name: \"{{ query('pipe', 'touch /tmp/kiln-hostile-lookup') }}\""),
         C, "kiln_cluster_name", "a function call is not allowed"),
    Case("include_reads_a_file", cluster("kiln_cluster_name: small", "kiln_cluster_name: \"{% include '/etc/hostname' %}\""),
         C, "kiln_cluster_name", "{% include %} is not allowed", line=1),
    Case("include_through_another_variable", cluster("kiln_cluster_name: small",
         "kiln_cluster_name: \"{{ site_name }}\"\nsite_name: \"{% include '/etc/passwd' %}\""),
         C, "kiln_cluster_name", "{% include %} is not allowed"),
    Case("import_reads_a_file", cluster("kiln_cluster_name: small",
         "kiln_cluster_name: \"{% import '/etc/passwd' as p %}x\""), C, "kiln_cluster_name", "{% import %} is not allowed"),
    Case("file_test_looks_at_the_disk", cluster("kiln_cluster_name: small",
         "kiln_cluster_name: \"{{ 'a' if '/root/.ssh/id_rsa' is file else 'b' }}\""),
         C, "kiln_cluster_name", "the test 'file' is not allowed"),
    Case("exists_test_looks_at_the_disk", cluster("kiln_cluster_name: small",
         "kiln_cluster_name: \"{{ 'a' if '/etc/shadow' is exists else 'b' }}\""),
         C, "kiln_cluster_name", "the test 'exists' is not allowed"),
    Case("string_to_a_huge_power", cluster("kiln_cluster_name: small", "kiln_cluster_name: \"{{ 'x' * 2**31 }}\""),
         C, "kiln_cluster_name", "is not allowed in values kiln reads"),
    Case("string_times_a_huge_number", cluster("kiln_cluster_name: small",
         "kiln_cluster_name: \"{{ 'x' * 3000000000 }}\""), C, "kiln_cluster_name", "'*' with a string"),
    Case("string_times_a_huge_variable", cluster("kiln_cluster_name: small",
         "kiln_cluster_name: \"{{ site_name * site_count }}\"\nsite_name: abcdefgh\nsite_count: 1000000000"),
         C, "kiln_cluster_name", "needed more than 256 MiB"),
    Case("percent_format_pads_a_gigabyte", cluster("kiln_cluster_name: small",
         "kiln_cluster_name: \"{{ '%01000000000d' % 1 }}\""), C, "kiln_cluster_name", "'%' is not allowed"),
    Case("backtracking_regex", cluster("kiln_cluster_name: small",
         "kiln_cluster_name: \"{{ 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!' | regex_search('(a+)+$') }}\""),
         C, "kiln_cluster_name", "the filter 'regex_search' is not allowed"),
    Case("range_of_a_billion", cluster("kiln_cluster_name: small", "kiln_cluster_name: \"{{ range(10**9) | length }}\""),
         C, "kiln_cluster_name", "is not allowed"),
    Case("method_call_pads_a_string", cluster("kiln_cluster_name: small",
         "kiln_cluster_name: \"{{ 'x'.ljust(3000000000) }}\""), C, "kiln_cluster_name", "a function call is not allowed"),
    Case("dunder_attribute", cluster("kiln_cluster_name: small",
         "kiln_cluster_name: \"{{ ''.__class__ }}\""), C, "kiln_cluster_name", "the attribute '__class__' is not allowed"),
    Case("loop_in_a_value", cluster("kiln_cluster_name: small",
         "kiln_cluster_name: \"{% for i in site_list %}{% for j in site_list %}x{% endfor %}{% endfor %}\"\nsite_list: [1, 2]"),
         C, "kiln_cluster_name", "{% for %} is not allowed"),
    Case("vault_value_without_its_password", cluster("kiln_cluster_name: small\n", VAULTED_CLUSTER_NAME),
         C, "kiln_cluster_name", "encrypted with Ansible Vault"),
    # --- values that look right but mean something else ---
    Case("yaml_octal_uid", cluster("{name: ann, uid: 3001}", "{name: ann, uid: 03001}"), C,
         "kiln_teams[0].users[0].uid", "leading 0 as octal (03001 is 1537)", line=10),
    Case("yaml_sexagesimal_limit", cluster("gpu_limit: 4", "gpu_limit: 1:30"), C, "kiln_teams[0].gpu_limit",
         "base 60 (1:30 is 90)", line=9),
    Case("yaml_hex_port", cpu_b("ansible_port: 0x16\n"), B, "ansible_port", "hexadecimal", line=3),
    Case("duplicate_kiln_key", cluster("kiln_cluster_name: small", "kiln_cluster_name: small\nkiln_cluster_name: big"),
         C, "kiln_cluster_name", "given twice in one mapping (also on line 1)", line=2),
    Case("duplicate_key_inside_a_team", cluster("    shares: 70", "    shares: 70\n    shares: 7"), C,
         "kiln_teams[0].shares", "given twice in one mapping (also on line 8)", line=9),
    Case("duplicate_host_in_a_group", hosts("cpu01: {ansible_host: 10.0.0.31}",
         "cpu01: {ansible_host: 10.0.0.31}\n            cpu01: {ansible_host: 10.0.0.32}"), HOSTS_FILE,
         "all.children.compute.children.cpu_b.hosts.cpu01", "given twice", line=17),
    Case("address_with_leading_zeros", hosts("ctl1: {ansible_host: 10.0.0.1}", "ctl1: {ansible_host: 010.0.0.1}"),
         HOSTS_FILE, "ansible_host", "the system resolver would read it as another address"),
    Case("address_of_two_parts", hosts("ctl1: {ansible_host: 10.0.0.1}", "ctl1: {ansible_host: \"10.1\"}"),
         HOSTS_FILE, "ansible_host", "not an IP address as written"),
    Case("node_on_loopback", hosts("ctl1: {ansible_host: 10.0.0.1}", "ctl1: {ansible_host: 127.0.0.1}"),
         HOSTS_FILE, "ansible_host", "is this machine (loopback)"),
    Case("node_on_mapped_loopback", hosts("ctl1: {ansible_host: 10.0.0.1}", "ctl1: {ansible_host: \"::ffff:127.0.0.2\"}"),
         HOSTS_FILE, "ansible_host", "is this machine (loopback)"),
    Case("node_named_localhost", hosts("ctl1: {ansible_host: 10.0.0.1}", "ctl1: {ansible_host: localhost}"),
         HOSTS_FILE, "ansible_host", "is this machine (loopback)"),
    Case("port_of_superscript_digits", cpu_b('ansible_port: "\u00b2\u00b2"\n'), B, "ansible_port",
         "must be a TCP port number"),
    Case("time_in_arabic_indic_digits", cluster("{name: cpu, groups: [cpu_b]}",
         '{name: cpu, groups: [cpu_b], max_time: "\u0661\u0660:\u0660\u0660"}'), C, "kiln_slurm_partitions[1].max_time",
         "is not a valid"),
    Case("bidi_override_in_a_group_name", hosts("        cpu_b:", "        cpu_b\u202egnp:"), HOSTS_FILE,
         "cpu_b\\u202egnp", "reorders how the name reads", line=14),
    Case("zero_width_space_in_a_value", cluster("kiln_cluster_name: small", "kiln_cluster_name: sma\u200bll"), C,
         "kiln_cluster_name", "control character '\\u200b'", line=1),
    Case("secrets_dir_climbs_out", {"group_vars/all/secrets.yml": "kiln_secrets_dir: ../../other-team/secrets\n"},
         "group_vars/all/secrets.yml", "kiln_secrets_dir", "leaves", line=1),
    Case("secrets_dir_in_a_world_writable_place", {"group_vars/all/secrets.yml": "kiln_secrets_dir: /tmp/kiln-secrets\n"},
         "group_vars/all/secrets.yml", "kiln_secrets_dir", "that no one else may write", line=1),
    # --- what an inventory's ssh_config could run on the operator's machine ---
    Case("ssh_config_with_proxycommand", {**cpu_b("kiln_ssh_config_file: ../ssh_config\n"),
         "../ssh_config": "Host *\n  User root\n  ProxyCommand sh -c 'touch /tmp/kiln-hostile-lookup; nc %h %p'\n"},
         B, "kiln_ssh_config_file", "ProxyCommand (line 3)", line=3),
    Case("ssh_config_with_match_exec", {**cpu_b("kiln_ssh_config_file: ../ssh_config\n"),
         "../ssh_config": "Match exec \"touch /tmp/kiln-hostile-lookup\"\n  User root\n"},
         B, "kiln_ssh_config_file", "Match (line 1)", line=3),
    Case("ssh_config_with_include", {**cpu_b("kiln_ssh_config_file: ../ssh_config\n"),
         "../ssh_config": "Include /etc/ssh/ssh_config.d/*.conf\nHost *\n  User root\n"},
         B, "kiln_ssh_config_file", "Include (line 1)", line=3),
    Case("ssh_config_with_pkcs11_library", {**cpu_b("kiln_ssh_config_file: ../ssh_config\n"),
         "../ssh_config": "Host *\n  PKCS11Provider /tmp/evil.so\n"},
         B, "kiln_ssh_config_file", "PKCS11Provider (line 2)", line=3),
    # --- inputs that would cost minutes, gigabytes or hang ---
    Case("host_range_of_900000", hosts("gpu[01:04]", "gpu[000001:900000]"), HOSTS_FILE,
         "gpu_a.hosts.gpu[000001:900000]", "over 100000 hosts", line=13),
    Case("host_ranges_that_multiply", hosts("gpu[01:04]", "r[0001:9999]n[001:999]"), HOSTS_FILE,
         "gpu_a.hosts.r[0001:9999]n[001:999]", "over 100000 hosts", line=13),
    Case("yaml_alias_bomb", {"group_vars/all/bomb.yml": BILLION_LAUGHS}, "group_vars/all/bomb.yml", "-",
         "aliases expand to more than"),
    Case("vars_file_links_to_dev_zero", {"group_vars/all/zero.yml": Special("link", "/dev/zero")},
         "group_vars/all/zero.yml", "-", "links to /dev/zero, outside the inventory"),
    Case("vars_file_is_a_fifo", {"group_vars/all/pipe.yml": Special("fifo")}, "group_vars/all/pipe.yml", "-",
         "is a FIFO"),
    Case("hosts_file_is_a_fifo", {"extra.yml": Special("fifo")}, "extra.yml", "-", "is a FIFO"),
    Case("boolean_for_a_number_names_its_vars_file", {"group_vars/all/svc.yml": "kiln_service_start_timeout: true\n"},
         "group_vars/all/svc.yml", "kiln_service_start_timeout", "valid integer", line=1),
    Case("team_gpu_limit_without_bound", cluster("gpu_limit: 4", "gpu_limit: 1000000000000000000000000000000"), C,
         "kiln_teams[0].gpu_limit", "less than or equal to 1000000"),
    Case("bridged_nvlink_without_a_count", gpu_a("kiln_gpu_count: 4", "kiln_gpu_count: 4\nkiln_gpu_nvlink_layout: bridged"),
         G, "kiln_gpu_nvlink_layout", "needs kiln_gpu_nvlinks", line=5),
    Case("group_contains_itself", hosts("            cpu01: {ansible_host: 10.0.0.31}",
         "            cpu01: {ansible_host: 10.0.0.31}\n          children:\n            compute:"), HOSTS_FILE,
         "cpu_b.children.compute", "a loop (compute -> cpu_b -> compute)", line=14),
    # --- the same limits at every depth, and nothing read through a link out of the inventory ---
    Case("hosts_file_in_a_subfolder_is_a_fifo", {"more/extra.yml": Special("fifo")}, "more/extra.yml", "-", "is a FIFO"),
    Case("hosts_file_in_a_subfolder_of_9_megabytes", {"more/big.yml": Special("size", size=9 * 1024 * 1024)},
         "more/big.yml", "-", "over kiln's limit"),
    Case("host_range_in_a_subfolder", {"more/extra.yml": "all:\n  children:\n    cpu_b:\n      hosts:\n"
                                       "        n[000001:900000]:\n"},
         "more/extra.yml", "cpu_b.hosts.n[000001:900000]", "over 100000 hosts", line=5),
    Case("value_in_a_subfolder_hosts_file", {"more/extra.yml": "all:\n  children:\n    cpu_b:\n      hosts:\n"
                                             "        cpu09: {ansible_host: 10.0.0.39, ansible_port: 70000}\n"},
         "more/extra.yml", "ansible_port", "must be a TCP port number"),
    Case("vars_directory_links_out_of_the_inventory", {"group_vars/all/linked": Special("link", "/etc")},
         "group_vars/all/linked", "-", "links to /etc, outside the inventory"),
    Case("hosts_folder_links_out_of_the_inventory", {"more": Special("link", "/etc")}, "more", "-",
         "links to /etc, outside the inventory"),
    # --- addresses written into SSH files (authorized_keys from=, known_hosts): one canonical form ---
    Case("zone_carries_ssh_options", hosts("ctl1: {ansible_host: 10.0.0.1}",
         'ctl1: {ansible_host: "fe80::1%eth0\\",permitopen=\\"*"}'), HOSTS_FILE, "ansible_host", "IPv6 zone"),
    Case("zone_is_a_host_pattern_list", hosts("ctl1: {ansible_host: 10.0.0.1}",
         'ctl1: {ansible_host: "fe80::1%eth0,*"}'), HOSTS_FILE, "ansible_host", "IPv6 zone"),
    Case("plain_ipv6_zone", hosts("ctl1: {ansible_host: 10.0.0.1}", 'ctl1: {ansible_host: "fe80::1%eth0"}'),
         HOSTS_FILE, "ansible_host", "IPv6 zone"),
    Case("address_is_a_wildcard", hosts("ctl1: {ansible_host: 10.0.0.1}", 'ctl1: {ansible_host: "*"}'),
         HOSTS_FILE, "ansible_host", "neither an IP address nor a host name"),
    Case("address_is_a_network", hosts("ctl1: {ansible_host: 10.0.0.1}", 'ctl1: {ansible_host: "10.0.0.0/8"}'),
         HOSTS_FILE, "ansible_host", "neither an IP address nor a host name"),
    # --- names that mean something to sacctmgr or to Slurm once it folds case ---
    Case("qos_named_like_a_sacctmgr_keyword", {"group_vars/all/qos.yml": "kiln_qos:\n  - {name: where}\n"},
         "group_vars/all/qos.yml", "kiln_qos[0].name", "sacctmgr's word 'where'"),
    Case("team_named_like_a_sacctmgr_keyword", cluster("name: alpha", "name: set"), C, "kiln_teams[0].name",
         "sacctmgr's word 'set'"),
    Case("user_named_like_a_sacctmgr_option", cluster("{name: ben, uid: 3002}", "{name: withdeleted, uid: 3002}"),
         C, "kiln_teams[1].users[0].name", "sacctmgr's word 'withdeleted'"),
    Case("cluster_named_like_a_sacctmgr_keyword", cluster("kiln_cluster_name: small", "kiln_cluster_name: where"),
         C, "kiln_cluster_name", "sacctmgr's word 'where'"),
    Case("teams_differ_only_in_case", cluster("name: beta", "name: Alpha"), C, "kiln_teams[1].name",
         "differ only in case"),
    Case("team_in_upper_case", cluster("name: beta", "name: Beta"), C, "kiln_teams[1].name", "upper-case"),
    Case("user_in_upper_case", cluster("{name: ben, uid: 3002}", "{name: Ben, uid: 3002}"), C,
         "kiln_teams[1].users[0].name", "upper-case"),
    Case("team_takes_slurms_root_account", cluster("name: alpha", "name: ROOT"), C, "kiln_teams[0].name",
         "Slurm's own root account"),
    Case("user_takes_the_monitoring_daemon", cluster("{name: ben, uid: 3002}", "{name: prometheus, uid: 3002}"),
         C, "kiln_teams[1].users[0].name", "a daemon kiln's roles install"),
    Case("user_takes_the_database_daemon", cluster("{name: ben, uid: 3002}", "{name: mysql, uid: 3002}"),
         C, "kiln_teams[1].users[0].name", "mysql"),
    Case("vars_file_of_9_megabytes", {"group_vars/all/big.yml": Special("size", size=9 * 1024 * 1024)},
         "group_vars/all/big.yml", "-", "over kiln's limit"),
]
