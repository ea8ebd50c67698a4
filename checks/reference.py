"""Every verdict id kiln's checks give: its suite, its severity when it is not ok (fail drains the node,
warn reports), what it means, what the operator should do, and the inventory setting that sets its
expectation or threshold. docs/checks.md is generated from this table (``markdown()``), and a test
keeps the table equal to the ids the code can give. Pure data: ships to nodes with the checks.
"""

from __future__ import annotations

# id -> (suite, severity, meaning, what to do, inventory setting)
CHECKS: dict[str, tuple[str, str, str, str, str]] = {
    # --- gpu ---
    "GPU_NVIDIA_SMI": ("gpu", "fail", "nvidia-smi failed (no driver loaded, driver/library mismatch, GPU lost)",
                       "read the exit code's meaning in the message; reload the driver or reboot", "kiln_gpu_count"),
    "GPU_NVIDIA_SMI_UNREADABLE": ("gpu", "fail", "nvidia-smi printed something kiln cannot read",
                                  "run the command on the node and compare with the driver's release notes", ""),
    "GPU_COUNT": ("gpu", "fail", "fewer (or more) GPUs visible than the inventory says",
                  "a GPU is missing or fell off the bus: check the kernel log, reseat or service", "kiln_gpu_count"),
    "GPU_LOST": ("gpu", "fail", "a GPU reports itself lost or in need of a reset (nvidia-smi exit 15, "
                 "[GPU is lost], [GPU requires reset])", "reset the GPU or reboot; if it recurs, service it", ""),
    "GPU_FIELD_UNREADABLE": ("gpu", "warn", "nvidia-smi could not read a field of a GPU ([Unknown Error], "
                             "[Timeout]): that field's check could not run", "if the board does not always read "
                             "so, reset the GPU or reboot", ""),
    "GPU_MODEL": ("gpu", "fail", "a GPU's name lacks the inventory's model", "fix kiln_gpu_model or the node",
                  "kiln_gpu_model"),
    "GPU_DRIVER_VERSION": ("gpu", "fail", "the loaded driver is not the pinned one",
                           "reboot into the pinned driver, or roll it out with kiln patch", "kiln_versions.nvidia_driver"),
    "GPU_PERSISTENCE": ("gpu", "fail", "persistence mode is off", "start nvidia-persistenced", ""),
    "GPU_ECC_MODE": ("gpu", "fail", "ECC is disabled", "nvidia-smi -e 1, then reset the GPU", ""),
    "GPU_ECC_MODE_PENDING": ("gpu", "warn", "the ECC mode changes at the next reset or reboot (nvidia-smi -q: "
                             "Pending differs from Current)", "make sure that is wanted; nvidia-smi -e 1 keeps ECC on", ""),
    "GPU_FABRIC": ("gpu", "fail", "a GPU's NVLink fabric registration is not Completed/Success, or its fabric health "
                   "is not Healthy (nvidia-smi -q: Fabric; NVSwitch systems and NVLink domains such as GB200)",
                   "check nvidia-fabricmanager and its log; in an NVLink domain the switch trays and IMEX; then "
                   "reset the GPUs", ""),
    "GPU_ECC_UNCORRECTED": ("gpu", "fail", "uncorrected volatile ECC errors", "drain, reset the GPU; if they recur, "
                            "service it", ""),
    "GPU_RETIRED_PAGES_PENDING": ("gpu", "fail", "retired pages wait for a reset (older GPUs)",
                                  "reset the GPU or reboot", ""),
    "GPU_PCIE_WIDTH": ("gpu", "fail", "the PCIe link is narrower than the GPU supports", "reseat or service", ""),
    "GPU_PCIE_GEN": ("gpu", "warn", "the PCIe link runs below its generation (normal while idle)",
                     "look again under load", ""),
    "GPU_THROTTLE": ("gpu", "warn", "clocks slowed for power or heat", "check cooling and power", ""),
    "GPU_REMAPPED_ROWS": ("gpu", "fail", "nvidia-smi --query-remapped-rows failed", "run it on the node", ""),
    "GPU_REMAPPED_ROWS_UNREADABLE": ("gpu", "fail", "the remapped-rows output is not understood",
                                     "run the command on the node", ""),
    "GPU_REMAP_PENDING": ("gpu", "fail", "a row remapping waits for a reset", "reset the GPU or reboot", ""),
    "GPU_REMAP_FAILURE": ("gpu", "fail", "row remapping failed", "service the GPU (RMA)", ""),
    "GPU_NVLINK": ("gpu", "fail", "nvidia-smi nvlink -s failed", "run it on the node", ""),
    "GPU_NVLINK_UNREADABLE": ("gpu", "fail", "the NVLink status is not understood", "run it on the node", ""),
    "GPU_NVLINK_INACTIVE": ("gpu", "fail", "an NVLink (or all of a GPU's) is inactive",
                            "check the fabric manager, reset the GPUs", "kiln_nvswitch"),
    "GPU_NVLINK_COUNT": ("gpu", "fail", "a GPU lists another number of NVLinks than its model has (NVSwitch nodes) "
                         "or kiln_gpu_nvlinks says",
                         "reset the GPUs; if a link stays missing, service the baseboard", "kiln_gpu_nvlinks"),
    "GPU_FABRIC_MANAGER": ("gpu", "fail", "nvidia-fabricmanager is not active on an NVSwitch node",
                           "start it; GPUs cannot talk over NVSwitch without it", "kiln_nvswitch"),
    "GPU_XID": ("gpu", "warn", "an Xid kiln's catalog does not know, or an SXid without its event line (ok: only "
                "application Xids)", "look the code up in NVIDIA's Xid catalog", ""),
    "GPU_XID_<code>": ("gpu", "fail", "a fatal Xid or SXid in the last 2 hours (one per event however many lines)",
                       "the message says what (reset, reboot, NVLink, service) from checks/parsers/xid_catalog.py",
                       "kiln_check_kernel_log"),
    "GPU_PEERMEM": ("gpu", "warn", "nvidia_peermem is not loaded on an RDMA node: GPUDirect RDMA is off",
                    "modprobe nvidia_peermem (kiln deploy loads it at boot)", "kiln_fabric"),
    "GPU_DCGM_DIAG": ("gpu", "fail", "a dcgmi diag test failed", "read the failing test and GPU in the message",
                      "kiln_check_dcgm_level"),
    "GPU_BURN": ("gpu", "fail", "a GPU's bf16 GEMM rate is below its share of the expected rate (warn: no PyTorch)",
                 "check clocks, power and cooling; service a GPU that stays slow",
                 "kiln_check_gpu_burn_seconds, kiln_gpu_bf16_tflops, kiln_check_gpu_burn_min_percent"),
    "GPU_NCCL_ALLREDUCE": ("gpu", "fail", "single-node all_reduce_perf is below its bus bandwidth or wrong",
                           "check NVLink and the fabric manager", "kiln_check_nccl_busbw_gbps"),
    # --- fabric ---
    "FABRIC_IBSTAT": ("fabric", "fail", "ibstat failed", "load the HCA driver (mlx5_ib); check rdma-core", "kiln_fabric"),
    "FABRIC_IBSTAT_UNREADABLE": ("fabric", "fail", "ibstat output is not understood", "run it on the node", ""),
    "FABRIC_HCA_COUNT": ("fabric", "fail", "fewer HCAs than the inventory says", "reseat or service the HCA",
                         "kiln_fabric.hca_count"),
    "FABRIC_PORT_DOWN": ("fabric", "fail", "an HCA port is not Active", "check the cable and the switch port",
                         "kiln_fabric"),
    "FABRIC_PORT_LINK": ("fabric", "fail", "an HCA port's physical state is not LinkUp", "check the cable", ""),
    "FABRIC_LINK_LAYER": ("fabric", "fail", "a port's link layer is not the fabric's (InfiniBand/Ethernet)",
                          "set the port type (mlxconfig LINK_TYPE) or fix kiln_fabric.type", "kiln_fabric.type"),
    "FABRIC_RATE": ("fabric", "fail", "a port runs below the expected rate", "check the cable and the switch port",
                    "kiln_fabric.rate_gbps"),
    "FABRIC_LINK_FLAPS": ("fabric", "warn", "network links went down and up in the last 24 hours",
                          "check the cables and transceivers", ""),
    "FABRIC_BANDWIDTH": ("fabric", "fail", "ib_write_bw between two nodes is below the threshold",
                         "check both nodes' ports and the path between them", "kiln_check_ib_bandwidth_gbps"),
    # --- workload (opt-in) ---
    "WORKLOAD_STEP": ("workload", "fail", "a node's training step (PyTorch) takes longer than slow_factor times "
                      "the cluster's median, or could not run", "look for throttled clocks, a power cap, a stray "
                      "process or a failing part; where it could not run, PyTorch on the node",
                      "kiln_check_workload"),
    "WORKLOAD_ALLREDUCE": ("workload", "fail", "an all-reduce between two nodes is slow_factor times below the "
                           "median of the ring's pairs, blamed on a slow node or, when neither end is, the link",
                           "check the node's NIC, cable and switch port, and its CPU or GPU", "kiln_check_workload"),
    # --- storage ---
    "STORAGE_FINDMNT_UNREADABLE": ("storage", "fail", "findmnt failed or printed no JSON", "run it on the node", ""),
    "STORAGE_FSTAB_UNREADABLE": ("storage", "fail", "/etc/fstab cannot be read", "check the file", ""),
    "STORAGE_PROBE_UNREADABLE": ("storage", "fail", "the mount probe printed nothing kiln understands",
                                 "run kiln check again; read the node's log", ""),
    "STORAGE_MOUNTED": ("storage", "fail", "a filesystem the node must have is not mounted",
                        "mount it (kiln deploy writes its fstab line)", "kiln_storage_mounts"),
    "STORAGE_LOCKED": ("storage", "fail", "an encrypted volume of the node is locked: clevis got no answer from any "
                       "tang server (at boot, or since), so its filesystem is not mounted",
                       "start tang on a controller (systemctl status tangd.socket) and check the network to it: the "
                       "volume unlocks and mounts by itself once one answers; by hand, cryptsetup open with the "
                       "volume's recovery passphrase (kiln's secrets, luks/HOST.NAME)", "kiln_encrypted_volumes"),
    "STORAGE_GLUSTER_TLS": ("storage", "fail", "GlusterFS TLS is not as kiln set it: /var/lib/glusterd/secure-access "
                            "missing (clear text management path), or a volume kiln serves with client.ssl or "
                            "server.ssl off (file contents readable on the network) or auth.ssl-allow other than the "
                            "hosts that mount it", "kiln deploy (it sets them, and starts a volume that ran in clear "
                            "text again)", "kiln_storage_gluster_tls"),
    "STORAGE_TYPE": ("storage", "fail", "a mount has another filesystem type", "fix the mount or the inventory",
                     "kiln_storage_mounts[].type"),
    "STORAGE_SOURCE": ("storage", "fail", "a mount comes from another source", "fix the mount or the inventory",
                       "kiln_storage_mounts[].source"),
    "STORAGE_OPTIONS": ("storage", "fail", "a mount lacks an option the inventory asks for", "remount it",
                        "kiln_storage_mounts[].options"),
    "STORAGE_FSTAB": ("storage", "warn", "a mount has no /etc/fstab entry: it will not come back after a reboot",
                      "kiln deploy writes it", "kiln_storage_mounts"),
    "STORAGE_RESPONDING": ("storage", "fail", "a mount did not answer in time (dead server or network: processes "
                           "touching it hang) or df failed on it (stale mount)",
                           "check the server and the network to it; remount a stale mount", "kiln_check_storage_timeout"),
    "STORAGE_WRITABLE": ("storage", "fail", "root cannot write to a mount", "check the server's export and the mount",
                         ""),
    "STORAGE_FULL": ("storage", "fail", "a filesystem (or its inodes) is above fail_percent (warn above warn_percent)",
                     "free space", "kiln_storage_mounts[].warn_percent, fail_percent"),
    "STORAGE_THROUGHPUT": ("storage", "fail", "opt-in: writing or reading a test file on a mount is slower than its "
                           "floor (a figure per node either way)", "check the network path to the server and its load",
                           "kiln_storage_mounts[].min_throughput_mbps, kiln_check_storage_throughput_mib"),
    "STORAGE_SHARED": ("storage", "fail", "nodes mounting one shared filesystem do not see the same data",
                       "check that the node mounts the right source", "kiln_storage_mounts"),
    # --- monitoring ---
    "MONITORING_PROMETHEUS": ("monitoring", "fail", "Prometheus does not answer its API on a monitoring host",
                              "systemctl status prometheus; journalctl -u prometheus", ""),
    "MONITORING_TARGETS": ("monitoring", "fail", "a scrape target (node_exporter, dcgm-exporter, Prometheus, "
                           "Alertmanager) is down", "the message names each target and its last error: start the "
                           "exporter on that node, or check the node", "kiln_monitoring_dcgm_exporter_external"),
    "MONITORING_RULES": ("monitoring", "fail", "kiln's alert rules are not all loaded, or one fails to evaluate",
                         "read /etc/prometheus/kiln-rules.yml and Prometheus' log", "kiln_alert_thresholds"),
    "MONITORING_SERIES": ("monitoring", "fail", "a series kiln's alert rules read is served by no target: the rule "
                          "can never fire (a site's dcgm-exporter with its stock counters file, a collector off)",
                          "serve it as the message says (for dcgm-exporter: kiln's counters file, "
                          "templates/monitoring/dcgm-counters.csv); KilnMetricMissing names the nodes",
                          "kiln_monitoring_dcgm_exporter_external"),
    "MONITORING_TLS": ("monitoring", "fail", "a monitoring listener of this host answers plain HTTP, or shows no "
                       "certificate of the cluster CA for the host's address", "kiln deploy writes each listener's "
                       "certificate and web config and restarts it; the message names the listener and the TLS error",
                       "kiln_monitoring_tls"),
    # --- logs (every host's journal on the log host) ---
    "LOG_SHIPPING": ("logs", "fail", "this host's journal is not reaching the log host: the uploader stopped, or "
                     "entries older than the allowed lag are still unsent (the log host down, its port shut, its "
                     "certificate refused)", "journalctl -u systemd-journal-upload says why; on the log host, "
                     "systemctl status systemd-journal-remote; then kiln deploy", "kiln_log_shipping"),
    "AUDIT_RULES": ("logs", "fail", "auditd does not run, or the kernel holds no rule under one of kiln's audit "
                    "keys (rules deleted, auditd stopped)", "augenrules --load (kiln's rules: /etc/audit/rules.d/"
                    "kiln.rules), systemctl start auditd, or kiln deploy", "kiln_audit"),
    # --- slurm ---
    "SLURM_MUNGE": ("slurm", "fail", "munge is not active", "start munge; check /etc/munge/munge.key", ""),
    "SLURM_SLURMD": ("slurm", "fail", "slurmd is not active on a compute node", "start slurmd; read its log", ""),
    "SLURM_REGISTERED": ("slurm", "fail", "the controller does not know the node, or has it down",
                         "check slurm.conf and the node's slurmd log", ""),
    "SLURM_GRES": ("slurm", "fail", "Slurm's GPU count for the node differs from the inventory, or slurmd "
                   "registered fewer GPUs than configured (Slurm drained it: INVALID_REG)",
                   "redeploy (gres.conf) and restart slurmd", "kiln_gpu_count"),
    "SLURM_JOB_TMP": ("slurm", "fail", "slurmd runs without job_container/tmpfs loaded (started before "
                      "kiln_slurm_job_tmp, or from a slurm.conf without it): jobs of different users share /tmp and "
                      "/dev/shm",
                      "kiln deploy (slurm.conf's JobContainerType, job_container.conf), restart slurmd with the node "
                      "drained", "kiln_slurm_job_tmp"),
    "SLURM_DRAINED_BY_PERSON": ("slurm", "warn", "the node is drained by a person (not kiln)",
                                "kiln leaves it drained; resume it when its reason is dealt with", ""),
    # --- system ---
    "SYSTEM_KERNEL": ("system", "fail", "the running kernel is not the pinned one", "reboot into the pinned kernel",
                      "kiln_versions.kernel"),
    "SYSTEM_KERNEL_SAME": ("system", "fail", "the node runs another kernel than most nodes", "reboot into the common "
                           "kernel, or roll the new one out with kiln patch", ""),
    "SYSTEM_MEMLOCK": ("system", "fail", "jobs cannot lock unlimited memory (RDMA and NCCL need it)",
                       "kiln deploy sets the limits; restart slurmd", "kiln_check_memlock"),
    "SYSTEM_SWAP": ("system", "fail", "swap is on", "swapoff -a and remove it from /etc/fstab", ""),
    "SYSTEM_TIME_SYNC": ("system", "warn", "the clock is not synchronised", "check chrony and its servers",
                         "kiln_check_time_sync, kiln_ntp_servers"),
    "SYSTEM_KILN_PROGRAMS": ("system", "warn", "kiln's host programs on the node are another version than the "
                             "operator's kiln", "kiln deploy (the health role installs them)", ""),
    "SYSTEM_FIREWALL": ("system", "fail", "kiln's confirmed firewall is not loaded or lets in what no rule allows "
                        "(a warn: none confirmed here yet)", "systemctl restart kiln-firewall, or kiln deploy",
                        "kiln_firewall"),
    "SYSTEM_LOGIN_ACCESS": ("system", "fail", "sshd's PAM stack lets in a team's user that kiln's rules keep out "
                            "of the host, or refuses one they admit; on compute nodes, lets in a team's probe "
                            "account, which has no job there (pam_slurm_adopt)",
                            "kiln deploy (roles/login_access.py; pam_slurm_adopt: the slurm role)", "kiln_teams"),
    "SYSTEM_DIRECTORY": ("system", "fail", "sssd is not running, a local account or group hides a directory one, or "
                         "NSS does not ask SSSD (a warn: the directory lacks a user or group the inventory names)",
                         "systemctl start sssd, userdel the local account, or kiln deploy (roles/directory.py)",
                         "kiln_directory, kiln_teams"),
    "SYSTEM_DATABASE_SOCKET": ("system", "fail", "MariaDB (the accounting database, on the slurmdbd host) listens on "
                               "TCP, or cannot be asked", "kiln deploy --roles slurm (skip-networking, "
                               "roles/slurm.py)", ""),
    # --- zones (kiln's firewall, proven by connections from each node; kiln check only) ---
    "ZONES_FIREWALL": ("zones", "fail", "a port kiln's firewall rules shut answers this node, or one they open does "
                       "not", "compare nft list table inet kiln with roles/firewall_rules.py; kiln deploy", "kiln_firewall"),
    # --- drift (against the image the node was booted from) ---
    "DRIFT_IMAGE": ("drift", "ok", "which image the node was booted from (or none: nothing to compare)", "", ""),
    "DRIFT_MANIFEST_UNREADABLE": ("drift", "warn", "/etc/kiln/image-manifest.json is not JSON",
                                  "rebuild the image, or remove the file", ""),
    "DRIFT_PACKAGES": ("drift", "warn", "packages added, removed or at another version than in the image",
                       "install or remove them to match, or rebuild the image with them", "kiln_versions"),
    "DRIFT_HOLDS": ("drift", "warn", "a package held in the image is not held on the node",
                    "kiln deploy holds it again", "kiln_versions"),
    "DRIFT_FILES": ("drift", "warn", "a file the image's roles manage was changed on the node",
                    "kiln drift shows the diff; kiln deploy writes it back", ""),
    "DRIFT_UNITS": ("drift", "warn", "units enabled or disabled unlike the image",
                    "enable or disable them to match, or rebuild the image", ""),
    # --- isolation (login hosts, as each team's probe account) ---
    "ISOLATION_PROBE_ACCOUNT": ("isolation", "fail", "a team's probe account (kiln-probe-<team>) is missing: "
                                "the probes could not run as it", "kiln deploy creates it", "kiln_teams"),
    "ISOLATION_JOBS": ("isolation", "fail", "a team's user sees jobs of other users in the queue",
                       "set PrivateData=jobs (kiln_slurm_private_data) and kiln deploy", "kiln_slurm_private_data"),
    "ISOLATION_USAGE": ("isolation", "fail", "a team's user sees another user's usage and shares (sshare)",
                        "set PrivateData=usage (kiln_slurm_private_data) and kiln deploy", "kiln_slurm_private_data"),
    "ISOLATION_ACCOUNTING": ("isolation", "fail", "slurmdbd shows a team's user another user's associations "
                             "(sacctmgr): who is in which account", "set PrivateData=users in slurmdbd.conf "
                             "(kiln_slurm_private_data) and kiln deploy", "kiln_slurm_private_data"),
    "ISOLATION_SECRETS": ("isolation", "fail", "a team's user can read a secret kiln placed on the host (munge "
                          "key, slurmdbd.conf, the monitoring password, kiln-remediate's key, a filesystem key)",
                          "kiln deploy restores owner and mode; rotate what was readable", ""),
    "ISOLATION_SSH_PASSWORD": ("isolation", "fail", "the host's sshd takes passwords or keyboard-interactive "
                               "login from a team's user", "kiln deploy writes keys only (unless "
                               "kiln_ssh_password_login); find who changed sshd's drop-ins", "kiln_ssh_password_login"),
    "ISOLATION_FILES": ("isolation", "fail", "a team's user lists or writes another team's directory, writes "
                        "beside the team directories, or cannot write its own team's directory",
                        "kiln deploy restores the team directories (root, the team's group, 2770); look for "
                        "what was written or read there", "kiln_storage_mounts"),
    "ISOLATION_HOMES": ("isolation", "fail", "a team's user lists or writes another user's home directory",
                        "chmod o-rwx the home (kiln deploy closes the homes it created); look for what was read or "
                        "written there", "kiln_teams"),
    "ISOLATION_WRITES": ("isolation", "fail", "a team's user may write a directory or file outside its own space "
                         "(its own walk of the host's local filesystems and the top of its shared ones; sticky "
                         "directories like /tmp, homes and team directories aside)",
                         "chmod g-w,o-w the path (or chgrp it away from the team); look for what was written there",
                         ""),
    "ISOLATION_MONITORING": ("isolation", "fail", "a monitoring listener (node_exporter, Prometheus, "
                             "Alertmanager) answers a team's user without credentials",
                             "kiln deploy writes the listeners' basic auth; find what replaced it", ""),
    "ISOLATION_SUDO": ("isolation", "fail", "sudo has a rule for a team's user (it lists commands it may run, "
                       "or asks for a password)", "find the rule in /etc/sudoers or /etc/sudoers.d; kiln grants "
                       "sudo to kiln_operators only", "kiln_operators"),
    "ISOLATION_SLURM_ADMIN": ("isolation", "fail", "Slurm takes an operator's change from a team's user (a "
                              "reservation from slurmctld, a new account from slurmdbd): it is an operator or "
                              "administrator", "sacctmgr modify user NAME set adminlevel=none", ""),
    "ISOLATION_AUDIT_TRAIL": ("isolation", "fail", "the sudo refused to a team's user on a login host did not "
                              "reach the log host within a minute (read back from that host's own files there)",
                              "kiln check --suite logs on the host (its uploader), then on the log host (its "
                              "receiver); kiln deploy starts both", "kiln_log_shipping"),
    # --- across nodes, opt-in ---
    "NCCL_CLUSTER_BUSBW": ("nccl-cluster", "fail", "all_reduce_perf over the nodes is below its floor (or failed); the "
                           "message names the slow pair found by halving", "check those nodes' HCAs, cables and NVLink",
                           "kiln_check_nccl_cluster_busbw_gbps, kiln_slurm_mpi, kiln_check_nccl_cluster_program"),
    # --- any suite ---
    "NODE_UNREACHABLE": ("ssh", "fail", "kiln check could not reach the node over ssh",
                         "check the node is up and its host key is in the inventory's known_hosts", "ansible_host"),
    "<SUITE>_CHECK_CRASHED": ("any", "fail", "a suite crashed on this node (a bug or an unexpected tool state)",
                              "report it with the message; the other suites still ran", ""),
}


def markdown() -> str:
    lines = ["# kiln's checks", "",
             "Generated from `checks/reference.py` by `kiln check --reference`; a test keeps this table equal to the "
             "ids the checks can give. Severity is the verdict's when the check does not pass: `fail` drains the "
             "node (node-local checks) and fails `kiln check`; `warn` reports.", "",
             "| id | suite | severity | means | what to do | set by |", "|---|---|---|---|---|---|"]
    for check_id, (suite, severity, meaning, action, setting) in CHECKS.items():
        lines.append(f"| `{check_id}` | {suite} | {severity} | {meaning} | {action} | "
                     f"{', '.join(f'`{s.strip()}`' for s in setting.split(',')) if setting else ''} |")
    return "\n".join(lines) + "\n"
