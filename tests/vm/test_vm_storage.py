"""NFS and GlusterFS for real on the VM tier: the controller VM serves /srv/kiln-nfs (the storage_server role,
its kernel's NFS server) and the GlusterFS volume ``kiln`` (glusterd, one brick), and every compute VM
mounts them at /nfs (hard, NFS 4.2) and /gluster (the FUSE client), through /etc/fstab (the storage role).

Shown here: data written on one client is read on the other and by a job on both, on each filesystem; a
team's user on the server cannot write into the GlusterFS brick (its parent is root's only);
kiln check's storage suite passes, its shared-data check included; with the server stopped, kiln check
fails the mount on both clients (STORAGE_RESPONDING) within its bound (the healthy run's time plus the
storage timeout) instead of hanging, and Slurm's HealthCheckProgram drains both within one interval;
with the server back, both resume. A team's quota on the GlusterFS volume stops it at its limit while the
other team loses nothing. Then the opt-in throughput check gives a figure per node and fails
under a floor no testbed reaches."""

from __future__ import annotations

import pytest

import json
import re
import shutil
import subprocess
import time
import uuid

from kiln.testbed.inventory import (GLUSTER_BRICK, GLUSTER_MOUNT, GLUSTER_VOLUME, NFS_EXPORT, NFS_MOUNT,
                                    VM_HEALTH_CHECK_INTERVAL, VM_MONITORING_SETTINGS, VM_STORAGE_TIMEOUT)
from roles.gluster_tls import SECURE_ACCESS, tls_paths
from roles.storage_server import quotad_serving_command
from tests.testbed.slurm_helpers import alerts_firing, copy_inventory, kiln, ok, on, wait_for

STORAGE_TIMEOUT = VM_STORAGE_TIMEOUT  # kiln_check_storage_timeout on the VM tier
SCRAPE = VM_MONITORING_SETTINGS["kiln_monitoring_scrape_seconds"]  # and its scrapes and rule evaluations


def _check(tb, tmp_path, inventory=None, name="check.json"):
    report = tmp_path / name
    started = time.monotonic()
    out = kiln("check", "-i", str(inventory or tb.inventory), "--suite", "storage", "--json", str(report), timeout=300)
    took = time.monotonic() - started
    # kiln check writes its report unless it could not judge at all (an unreadable inventory, no node
    # reached): then what it said is the failure, not a missing file
    assert report.exists(), f"kiln check (exit {out.returncode}) wrote no report:\n{out.stdout}{out.stderr}"
    return out, json.loads(report.read_text()), took


def _verdicts(data, node, check_id):
    return [c for c in data["nodes"][node]["checks"] if c["id"] == check_id]


def _state(tb, node):
    line = ok(tb, tb.controller, f"scontrol show node {node} -o")
    reason = line.split("Reason=")[1].split(" [")[0] if "Reason=" in line else ""
    return line.split("State=")[1].split()[0], reason


def _health_check_story(tb, node) -> str:
    """Why a node was not drained: its Slurm state, when the health check last ran there and how long it
    took (its textfile metrics), slurmd's last lines, and what kiln-node-check says run by hand."""
    return "\n".join([
        f"{node} in Slurm: {_state(tb, node)}",
        on(tb, node, "date +%s; grep -h '^kiln_check_last_run\\|^kiln_check_duration\\|kiln_check_ok.*} 0' "
                     "/var/lib/prometheus/node-exporter/kiln.prom").stdout,
        on(tb, node, "journalctl -u slurmd -t kiln-node-check --no-pager -n 15 -o short-monotonic").stdout,
        on(tb, node, "ps -eo pid,etimes,stat,cmd | grep -E 'kiln-node-check|kiln-write-check' | grep -v grep").stdout,
        on(tb, node, "s=$(date +%s); /usr/local/sbin/kiln-node-check --no-drain 2>&1 | tail -5; "
                     "echo \"by hand: $(( $(date +%s) - s )) s\"", timeout=120).stdout])


def test_nfs_written_on_one_compute_vm_is_read_on_the_other(vms):
    a, b = vms.computes
    for node in vms.computes:
        assert ok(vms, node, f"findmnt -n -o FSTYPE,SOURCE {NFS_MOUNT}").split() == \
            ["nfs4", f"{vms.controller}:{NFS_EXPORT}"]
        assert f"{NFS_MOUNT} nfs rw,hard,vers=4.2" in ok(vms, node, "cat /etc/fstab").replace(f"{vms.controller}:{NFS_EXPORT} ", "")
        # slurmd (so every job) only with the network filesystem mounted
        assert NFS_MOUNT in ok(vms, node, "systemctl show -p RequiresMountsFor --value slurmd")
    token = f"kiln-{uuid.uuid4().hex}"
    ok(vms, a, f"echo {token} > {NFS_MOUNT}/from-{a}")
    assert ok(vms, b, f"cat {NFS_MOUNT}/from-{a}").strip() == token
    assert ok(vms, vms.controller, f"cat {NFS_EXPORT}/from-{a}").strip() == token  # on the server's own disk
    job = ok(vms, vms.controller, f"srun -N{len(vms.computes)} cat {NFS_MOUNT}/from-{a}", timeout=180)
    assert job.split() == [token] * len(vms.computes)


@pytest.mark.proves("storage", "storage_server", tier="vm")
def test_glusterfs_volume_served_by_the_controller_vm_is_shared_by_the_compute_vms(vms, tmp_path):
    a, b = vms.computes
    info = ok(vms, vms.controller, f"gluster --mode=script volume info {GLUSTER_VOLUME}")
    assert "Status: Started" in info and f"{vms.controller}:{GLUSTER_BRICK}" in info, info
    for node in vms.computes:
        assert ok(vms, node, f"findmnt -n -o FSTYPE,SOURCE {GLUSTER_MOUNT}").split() == \
            ["fuse.glusterfs", f"{vms.controller}:/{GLUSTER_VOLUME}"]
        assert GLUSTER_MOUNT in ok(vms, node, "systemctl show -p RequiresMountsFor --value slurmd")
    token = f"kiln-{uuid.uuid4().hex}"
    ok(vms, b, f"echo {token} > {GLUSTER_MOUNT}/from-{b}")
    assert ok(vms, a, f"cat {GLUSTER_MOUNT}/from-{b}").strip() == token
    assert ok(vms, vms.controller, f"cat {GLUSTER_BRICK}/from-{b}").strip() == token  # in the brick
    # the brick is written through the volume only: a team's user on the server never reaches it, not even her
    # own team's directory in it (a write there would pass the volume's quota, behind GlusterFS's back)
    parent = GLUSTER_BRICK.rsplit("/", 1)[0]
    assert ok(vms, vms.controller, f"stat -c '%U %a' {parent}").split() == ["root", "700"]
    direct = on(vms, vms.controller, f"runuser -u alice -- touch {GLUSTER_BRICK}/projects/vision/direct")
    assert direct.returncode != 0 and "Permission denied" in direct.stderr, direct
    out, data, _ = _check(vms, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    for node in vms.computes:
        shared = {c["message"].split(":")[0]: c["severity"] for c in _verdicts(data, node, "STORAGE_SHARED")}
        assert shared.get(NFS_MOUNT) == shared.get(GLUSTER_MOUNT) == "ok", data["nodes"][node]
    # GlusterFS's TLS as kiln set it, on the server (the volume's options) and on each client (secure-access)
    for node in (vms.controller, *vms.computes):
        assert [c["severity"] for c in _verdicts(data, node, "STORAGE_GLUSTER_TLS")] == ["ok"], data["nodes"][node]


@pytest.mark.skipif(shutil.which("tcpdump") is None, reason="needs tcpdump for the capture on the testbed's bridge "
                    "(apt-get install tcpdump; .ci/run installs it)")
@pytest.mark.proves("storage", "storage_server", tier="vm")
def test_glusterfs_speaks_tls_only_admits_its_clients_and_a_capture_of_a_file_written_through_it_holds_none_of_it(
        vms, tmp_path):
    """kiln_storage_gluster_tls (on by default): the volume's I/O and management paths are TLS with the hosts'
    certificates of the cluster CA; a capture on the bridge of a file written through /gluster holds none of its
    content while the same capture holds a control written over NFS (clear text); a client whose name the volume's
    auth.ssl-allow does not list is refused its mount."""
    a, b = vms.computes
    address = {n.name: n.address for n in vms.recorded_nodes()}
    info = ok(vms, vms.controller, f"gluster --mode=script volume info {GLUSTER_VOLUME}")
    for option in ("client.ssl: on", "server.ssl: on", f"auth.ssl-allow: {vms.controller},{a},{b}"):
        assert option in info, info
    cert, key, ca = tls_paths("debian")
    for node in (vms.controller, a, b):
        files = ok(vms, node, f"stat -c '%n %U %a' {key} {SECURE_ACCESS}")
        assert files.split() == [key, "root", "600", SECURE_ACCESS, "root", "644"], files
        subject = ok(vms, node, f"openssl x509 -noout -subject -in {cert}")
        assert subject.strip().replace(" ", "") == f"subject=CN={node}", subject
        verified = ok(vms, node, f"openssl verify -CAfile {ca} {cert}")
        assert verified.strip() == f"{cert}: OK", verified
    # the FUSE client's own word: TLS on both paths
    said = ok(vms, a, f"grep -h 'SSL support' /var/log/glusterfs/{GLUSTER_MOUNT.strip('/')}.log | tail -1")
    assert "SSL support for MGMT is ENABLED IO path is ENABLED" in said, said
    content, control = f"kiln-gluster-{uuid.uuid4().hex}", f"kiln-nfs-{uuid.uuid4().hex}"
    capture = tmp_path / "storage.pcap"
    dump = subprocess.Popen(["tcpdump", "-i", vms.bridge, "-U", "-s", "0", "-w", str(capture),
                             f"tcp and host {address[vms.controller]} and not port 22"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2)  # tcpdump listening
        # 256 KiB of the content through the FUSE client, read back on the other client; the control over NFS
        ok(vms, a, f"yes {content} | head -n 6000 > {GLUSTER_MOUNT}/tls-probe")
        assert ok(vms, b, f"sort -u {GLUSTER_MOUNT}/tls-probe").strip() == content
        ok(vms, a, f"echo {control} > {NFS_MOUNT}/tls-control")
        assert ok(vms, vms.controller, f"cat {NFS_EXPORT}/tls-control").strip() == control
        time.sleep(2)
    finally:
        dump.terminate()
        dump.wait(timeout=30)
        on(vms, a, f"rm -f {GLUSTER_MOUNT}/tls-probe {NFS_MOUNT}/tls-control")
    data = capture.read_bytes()
    assert control.encode() in data, "the capture saw no clear text at all: it proves nothing"
    assert len(data) > 2 * 6000 * (len(content) + 1), f"only {len(data)} bytes captured: the file did not cross the bridge"
    assert content.encode() not in data and content[:20].encode() not in data, \
        "the capture of the GlusterFS traffic holds the file's content"
    print(f"capture on {vms.bridge}: {len(data)} bytes; the file written through {GLUSTER_MOUNT} "
          f"({6000 * (len(content) + 1)} bytes, written on {a}, read on {b}) not in it; the NFS control seen")
    # authorization: a certificate of the cluster's CA whose name auth.ssl-allow does not list is refused. The
    # controller's name leaves the list for a moment (it holds no lasting mount: a client whose name leaves it is
    # cut off at once, gluster checks connected clients again), and its own mount of the volume is refused
    # while both compute VMs go on reading
    ok(vms, vms.controller, f"gluster --mode=script volume set {GLUSTER_VOLUME} auth.ssl-allow {a},{b}")
    try:
        refused = on(vms, vms.controller, f"mkdir -p /mnt/kiln-tls && mount -t glusterfs localhost:/{GLUSTER_VOLUME} "
                                          "/mnt/kiln-tls && ls /mnt/kiln-tls", timeout=120)
        assert refused.returncode != 0, refused.stdout + refused.stderr
        why = ok(vms, vms.controller, "grep -h 'SETVOLUME on remote-host failed' /var/log/glusterfs/mnt-kiln-tls.log "
                                      "| tail -1")
        assert "Authentication failed" in why, why
        for node in (a, b):
            assert ok(vms, node, f"ls {GLUSTER_MOUNT}/projects").split() == ["language", "vision"]
        print(f"{vms.controller} left out of auth.ssl-allow: {why.strip()[-120:]}")
        # kiln check's storage suite reads the volume's options on its server and names the change
        out = kiln("check", "-i", str(vms.inventory), "--suite", "storage", "--limit", vms.controller, "--json",
                   str(tmp_path / "tls.json"), timeout=300)
        found = _verdicts(json.loads((tmp_path / "tls.json").read_text()), vms.controller, "STORAGE_GLUSTER_TLS")
        assert out.returncode == 1 and [v["severity"] for v in found] == ["fail"], out.stdout + out.stderr
        assert f"admits '{a},{b}', the hosts that mount it are '{vms.controller},{a},{b}'" in found[0]["message"], found
    finally:
        on(vms, vms.controller, "umount /mnt/kiln-tls; rmdir /mnt/kiln-tls")
        ok(vms, vms.controller, f"gluster --mode=script volume set {GLUSTER_VOLUME} auth.ssl-allow "
                                f"{vms.controller},{a},{b}")
        # quotad, the controller's own client of the brick, was cut off with its name and does not come back by
        # itself (the next test's writes under vision's quota then fail with ENOTCONN): glusterd starts it anew, and
        # kiln's wait for quotad (the storage_server role's) says when it serves again
        ok(vms, vms.controller, "systemctl restart glusterd.service && " + quotad_serving_command("glusterd.service"),
           timeout=900)


@pytest.mark.proves("storage_server", tier="vm")
def test_a_team_quota_stops_the_team_at_its_limit_and_the_other_team_loses_nothing(vms):
    """vision's project directory on the GlusterFS volume holds GLUSTER_QUOTA (set by the storage_server role
    on the controller VM); alice (vision) writing past it is stopped with EDQUOT, kiln usage shows vision at
    its limit, bob's (language) file written before is intact and bob still writes."""
    a, b = vms.computes
    vision, language = f"{GLUSTER_MOUNT}/projects/vision", f"{GLUSTER_MOUNT}/projects/language"
    listed = ok(vms, vms.controller, f"gluster --mode=script volume quota {GLUSTER_VOLUME} list /projects/vision")
    assert "/projects/vision" in listed and re.search(r"\b20(\.0)?MB\b", listed), listed
    assert ok(vms, a, f"stat -c '%G %a' {vision} {language}").split() == ["vision", "2770", "language", "2770"]
    ok(vms, b, f"runuser -u bob -- sh -c 'head -c 4M /dev/urandom > {language}/kept && md5sum {language}/kept "
               f"> /tmp/kept.md5'")
    try:
        # past the limit (Gluster counts asynchronously: its hard timeout, 5 s, may let some MB past it)
        fill = on(vms, a, f"runuser -u alice -- dd if=/dev/zero of={vision}/fill bs=1M count=64 conv=fsync", timeout=300)
        assert fill.returncode != 0 and "Disk quota exceeded" in fill.stderr, fill.stdout + fill.stderr
        written = int(ok(vms, a, f"stat -c %s {vision}/fill"))
        assert written < 64 * 2**20, written
        print(f"alice's write stopped at {written / 2**20:.1f} MiB of a 20 MB quota: {fill.stderr.strip().splitlines()[0]}")
        # kiln usage reads each team's use against its quota from the volume's server
        listed = ok(vms, vms.controller, f"gluster --mode=script volume quota {GLUSTER_VOLUME} list --xml")
        print("gluster volume quota list --xml, as the controller VM printed it:\n" + listed)
        usage = kiln("usage", "-i", str(vms.inventory), "--json", timeout=300)
        assert usage.returncode == 0, usage.stdout + usage.stderr
        [row] = [q for q in json.loads(usage.stdout)["storage_quotas"] if q["team"] == "vision"]
        assert row["path"] == vision and row["limit_bytes"] == 20 * 2**20, row
        assert row["used_bytes"] >= 19 * 2**20 and row["exceeded"] is True, row
        # still over it, from another client (dd with fsync: a shell's echo never reads the error, which
        # gluster's write-behind gives at the flush)
        again = on(vms, b, f"runuser -u alice -- dd if=/dev/zero of={vision}/more bs=64k count=16 conv=fsync")
        assert again.returncode != 0 and "Disk quota exceeded" in again.stderr, again
        assert ok(vms, b, "md5sum -c /tmp/kept.md5").strip().endswith("OK")
        ok(vms, a, f"runuser -u bob -- sh -c 'head -c 1M /dev/urandom > {language}/after'")  # no quota of his own
    finally:
        on(vms, a, f"rm -f {vision}/fill {vision}/more {language}/kept {language}/after /tmp/kept.md5")
        on(vms, b, "rm -f /tmp/kept.md5")


def test_a_dead_nfs_server_fails_both_clients_in_bounded_time_drains_them_and_they_resume(vms, tmp_path):
    out, data, healthy = _check(vms, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    wanted = {("KilnStorageNotResponding", n) for n in vms.computes}
    ok(vms, vms.controller, "systemctl stop nfs-server")
    stopped = time.monotonic()
    try:
        out, data, took = _check(vms, tmp_path, name="dead.json")
        print(f"kiln check --suite storage: {healthy:.1f} s healthy, exit {out.returncode} in {took:.1f} s with the "
              "NFS server stopped")
        assert out.returncode == 1, out.stdout + out.stderr
        # a dead server costs the bound (the timeout, and a second for the watcher), never a hang; the
        # healthy run's own time (about 20 s under emulation) varies by some seconds
        assert took < healthy + 2 * STORAGE_TIMEOUT, f"kiln check took {took:.1f} s with the server down, " \
            f"{healthy:.1f} s healthy"
        for node in vms.computes:
            [responding] = [c for c in _verdicts(data, node, "STORAGE_RESPONDING") if c["severity"] == "fail"]
            assert responding["message"].startswith(f"{NFS_MOUNT} (nfs from {vms.controller}:{NFS_EXPORT}) did not "
                                                    f"answer within {STORAGE_TIMEOUT} s"), responding
        # Slurm's HealthCheckProgram (every VM_HEALTH_CHECK_INTERVAL s) drains both: an interval, the run's own
        # bounded probe, and room for a run that started just before the server stopped and passed (under
        # emulation a health check takes 7 s healthy, 17 s or more with a dead mount), and this test's polls
        for node in vms.computes:
            try:
                wait_for(lambda n=node: "DRAIN" in _state(vms, n)[0],
                         timeout=2 * VM_HEALTH_CHECK_INTERVAL + 2 * STORAGE_TIMEOUT + 30, interval=1,
                         what=f"{node} drained by the health check")
            except AssertionError as late:
                raise AssertionError(f"{late}\n{_health_check_story(vms, node)}") from None
            assert _state(vms, node)[1].startswith(f"kiln: STORAGE_RESPONDING {NFS_MOUNT}"), _state(vms, node)
        drained = time.monotonic() - stopped
        print(f"both clients drained {drained:.0f} s after the server stopped "
              f"(health check interval {VM_HEALTH_CHECK_INTERVAL} s, storage timeout {STORAGE_TIMEOUT} s)")
        # the monitoring role's alert: node_exporter marks the hung mount (device_error) once a stat of it
        # outlasts its mount timeout, and kiln.prom has the check's verdict; a `for:` of 20 s on the testbed
        wait_for(lambda: wanted <= alerts_firing(vms), timeout=VM_HEALTH_CHECK_INTERVAL + 90 + 2 * SCRAPE, interval=2,
                 what="KilnStorageNotResponding firing for both clients")
        print(f"KilnStorageNotResponding firing for both clients {time.monotonic() - stopped:.0f} s after the "
              "server stopped")
    finally:
        ok(vms, vms.controller, "systemctl start nfs-server")
    back = time.monotonic()
    wait_for(lambda: not (wanted & alerts_firing(vms)), timeout=2 * VM_HEALTH_CHECK_INTERVAL + 150 + 2 * SCRAPE,
             interval=2,
             what="KilnStorageNotResponding resolved once the server was back")
    print(f"KilnStorageNotResponding resolved {time.monotonic() - back:.0f} s after the server started again")
    # the server's grace time (kiln_storage_nfs_lease_seconds: 15 on the testbed) before clients may open files
    for node in vms.computes:
        wait_for(lambda n=node: "DRAIN" not in _state(vms, n)[0], timeout=2 * VM_HEALTH_CHECK_INTERVAL + 120,
                 interval=2, what=f"{node} resumed once the server was back")
    print(f"both clients resumed {time.monotonic() - back:.0f} s after the server started again")
    out, data, _ = _check(vms, tmp_path, name="back.json")
    assert out.returncode == 0, out.stdout + out.stderr
    assert not any(c["severity"] == "fail" for n in vms.computes for c in data["nodes"][n]["checks"])
    # nothing the probes left behind: no probe older than one bound on a client (the health check's own
    # probe, every interval, is younger)
    for node in vms.computes:
        wait_for(lambda n=node: on(vms, n, f"pgrep -O {STORAGE_TIMEOUT + 5} -f kiln-write-check").returncode == 1,
                 timeout=30, interval=2, what=f"no probe left behind on {node}")


def test_throughput_check_reports_a_figure_per_node_and_fails_below_its_floor(vms, tmp_path):
    expect = json.loads(ok(vms, vms.computes[0], "cat /etc/kiln/node-checks.json"))
    # the inventory's mounts: the storage suite also judges each encrypted volume's mount, which is no
    # kiln_storage_mounts entry (kiln_encrypted_volumes)
    encrypted = {v["path"] for v in expect.get("encrypted_volumes", [])}
    mounts = [m for m in expect["storage"] if m["path"] not in encrypted]

    def with_floor(floor: int, name: str):
        changed = [dict(m, min_throughput_mbps=floor) if m["path"] == NFS_MOUNT else m for m in mounts]
        return copy_inventory(vms.inventory, tmp_path / name, {"kiln_check_storage_throughput_mib": 16},
                              {node: {"kiln_storage_mounts": changed} for node in vms.computes})
    out, data, _ = _check(vms, tmp_path, with_floor(1, "low"), name="low.json")
    assert out.returncode == 0, out.stdout + out.stderr
    for node in vms.computes:
        [figure] = _verdicts(data, node, "STORAGE_THROUGHPUT")
        assert figure["severity"] == "ok" and figure["message"].startswith(f"{NFS_MOUNT}: write "), figure
        print(f"{node}: {figure['message']}")
    out, data, _ = _check(vms, tmp_path, with_floor(100_000, "high"), name="high.json")
    assert out.returncode == 1
    for node in vms.computes:
        [figure] = _verdicts(data, node, "STORAGE_THROUGHPUT")
        assert figure["severity"] == "fail" and "below the floor of 100000 MB/s" in figure["message"], figure
    assert ok(vms, vms.controller, f"ls -A {NFS_EXPORT} | grep -c kiln-throughput || true").strip() == "0"
