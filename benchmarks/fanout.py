"""Fan-out: kiln's own cost per node at 100, 300 and 1,000 nodes, with every node one real sshd.

One sshd of its own on this machine's loopback (a port of its own, its own host key, keys-only root
login) is reached under N host names (fan0001..), so the commands run here and what grows with N is
kiln's own work per node: connections (strict host keys: one known_hosts entry lists every name),
the OS check, the one-round-trip state read, the summary. Two commands at each size:

- ``kiln deploy --roles storage``: the hosts have no storage mounts, so no operation is prepared:
  connect, read the OS, snapshot the node, report ``no change``; nothing on this machine is touched;
- ``kiln deploy --dry-run --roles base,slurm``: every operation of a real node's roles prepared and
  compared with what the node has (its snapshot names each package, account, file and unit they
  manage); nothing changes, and the plan's differences and file diffs are reported (exit 3);
- ``kiln check --suite system``: the system suite's commands over SSH (read only), the verdict table.

Reported per size: wall time, the kiln process's CPU seconds (user+system, its children included:
ssh clients for check), its peak memory, CPU per node and peak memory per node in flight.

Targets (issue 19): CPU per node <= 20 ms (deploy) and <= 15 ms (check) at 1,000 nodes; peak memory
<= 2 MB per node in flight.

    sudo .venv/bin/python benchmarks/fanout.py [--sizes 100,300,1000] [--forks 256]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def start_sshd(work: Path, port: int) -> subprocess.Popen:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(work / "host_key")], check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(work / "id")], check=True)
    keys = work / "authorized_keys"
    keys.write_text((work / "id.pub").read_text())
    keys.chmod(0o600)
    config = work / "sshd_config"
    # every fan host has its own 127.x address; only loopback peers may log in (AllowUsers)
    config.write_text(f"Port {port}\nListenAddress 0.0.0.0\nAllowUsers root@127.0.0.0/8\nHostKey {work}/host_key\nPidFile {work}/sshd.pid\n"
                      f"AuthorizedKeysFile {keys}\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                      "KbdInteractiveAuthentication no\nUsePAM no\nMaxStartups 2000:30:4000\nMaxSessions 100\n"
                      "StrictModes no\nLogLevel ERROR\nSubsystem sftp internal-sftp\n")  # keys in a temporary dir under /tmp
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory (made at boot)
    proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(config)], stderr=open(work / "sshd.log", "w"))
    time.sleep(0.5)
    if proc.poll() is not None:
        raise SystemExit(f"sshd did not start: {(work / 'sshd.log').read_text()}")
    return proc


def address(i: int) -> str:
    """fan<i>'s own loopback address (every 127.x.y.z reaches this machine)."""
    return f"127.1.{i // 250}.{i % 250 + 1}"


def write_inventory(work: Path, size: int, port: int) -> Path:
    import yaml

    from kiln.testbed.inventory import TESTBED_VERSIONS
    inv = work / f"inventory-{size}"
    (inv / "group_vars" / "all").mkdir(parents=True)
    names = {f"fan{i:04d}": {"ansible_host": address(i)} for i in range(1, size + 1)}
    first = next(iter(names))
    (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {
        "slurm_controller": {"hosts": {first: names[first]}},
        "compute": {"hosts": {n: a for n, a in names.items() if n != first}}}}}))
    (inv / "group_vars" / "all" / "fanout.yml").write_text(yaml.safe_dump({
        "kiln_cluster_name": "fanout", "kiln_local_nodes": True, "kiln_os": "debian12", "ansible_port": port, "ansible_user": "root",
        "ansible_ssh_private_key_file": f"{work}/id", "kiln_ssh_known_hosts_file": f"{work}/known_hosts",
        "kiln_check_time_sync": False, "kiln_check_memlock": False, "kiln_versions": TESTBED_VERSIONS,
        "kiln_slurm_partitions": [{"name": "batch", "groups": ["compute"], "default": True}]}))
    (inv / "group_vars" / "compute.yml").write_text("kiln_cpus: 2\nkiln_memory_mb: 1024\n")
    return inv


def known_hosts(work: Path, size: int, port: int) -> None:
    """One line: the loopback sshd's key under every name and address kiln may look it up by."""
    key = (work / "host_key.pub").read_text().split()[:2]
    names = [f"[{address(i)}]:{port},[fan{i:04d}]:{port}" for i in range(1, size + 1)]
    (work / "known_hosts").write_text(f"{','.join(names)} {' '.join(key)}\n")


def measure(args: list[str]) -> dict:
    """Wall time, CPU (user+system, children included) and peak RSS of one kiln command."""
    out = subprocess.run(["/usr/bin/time", "-f", "%e %U %S %M", sys.executable, "-m", "kiln", *args],
                         capture_output=True, text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
                         timeout=3600)
    wall, user, system, rss_kb = out.stderr.strip().splitlines()[-1].split()
    tail = (out.stdout.strip().splitlines() + out.stderr.strip().splitlines()[:-1])[-12:]
    return {"rc": out.returncode, "wall": float(wall), "cpu": float(user) + float(system),
            "rss_mb": int(rss_kb) / 1024, "tail": tail}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,300,1000")
    parser.add_argument("--forks", type=int, default=256)
    parser.add_argument("--port", type=int, default=22022)
    parser.add_argument("--commands", default="deploy,check", help="of deploy, dry-run (base+slurm on nodes that are not converged: each differing file is read back for its diff), check")
    opts = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the loopback sshd logs in as root (keys only) to run read-only commands")
    if shutil.which("/usr/bin/time") is None and not Path("/usr/bin/time").exists():
        raise SystemExit("needs GNU time (apt-get install time)")
    work = Path(tempfile.mkdtemp(prefix="kiln-fanout-"))
    sshd = start_sshd(work, opts.port)
    rows = []
    try:
        for size in [int(s) for s in opts.sizes.split(",")]:
            known_hosts(work, size, opts.port)
            inv = write_inventory(work, size, opts.port)
            in_flight = min(size, opts.forks)
            commands = {
                "deploy": ("deploy (no-op)", ["deploy", "-i", str(inv), "--roles", "storage"], (0,)),
                "dry-run": ("deploy --dry-run", ["deploy", "-i", str(inv), "--roles", "base,slurm", "--dry-run"], (0, 3)),
                "check": ("check --suite system", ["check", "-i", str(inv), "--suite", "system"], None)}
            for what, args, ok in (commands[c] for c in opts.commands.split(",")):
                m = measure([*args, "--forks", str(opts.forks)])
                if ok and m["rc"] not in ok:
                    raise SystemExit(f"kiln {' '.join(args)} failed ({m['rc']}): {m['tail']}")
                rows.append((size, what, m, in_flight))
                print(f"  {size} nodes, {what}: {m['wall']:.1f} s, exit {m['rc']}, {m['tail'][-2:]}", flush=True)
    finally:
        sshd.terminate()
        sshd.wait()
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nkiln fan-out: one loopback sshd under N host names, --forks {opts.forks}\n")
    print(f"{'nodes':>5}  {'command':<22} {'exit':>4} {'wall s':>7} {'kiln CPU s':>10} {'CPU ms/node':>11} {'peak MB':>8} "
          f"{'MB/node in flight':>17}")
    for size, what, m, in_flight in rows:
        print(f"{size:>5}  {what:<22} {m['rc']:>4} {m['wall']:>7.1f} {m['cpu']:>10.1f} {1000 * m['cpu'] / size:>11.1f} "
              f"{m['rss_mb']:>8.0f} {m['rss_mb'] / in_flight:>17.2f}")
    print("\ntargets at 1,000 nodes: deploy <= 20 ms and check <= 15 ms of CPU per node; <= 2 MB per node in flight")


if __name__ == "__main__":
    main()
