"""Every parser on real recorded output (tests/recorded/captured/), and on malformed or truncated output:
a clear CheckError, never a crash and never a silent pass."""

from __future__ import annotations

import pytest

from checks.parsers.dcgm import parse_dcgm_diag
from checks.parsers.infiniband import MIB_PER_SECOND_IN_GBITS, parse_ib_write_bw, parse_ibstat, parse_ibv_devinfo
from checks.parsers.kernel_log import (NOW_MARK, RESET_FILE, RESET_MARK, after_gpu_reset, count_link_flaps, log_command,
                                       parse_xids, recent)
from checks.parsers.mounts import options_match, parse_df_percent, parse_findmnt_json, parse_fstab
from checks.parsers.nccl import parse_nccl_tests
from checks.parsers.nvidia_smi import FAULTS, explain_exit, number, parse_nvlink_status, parse_query_csv
from checks.verdict import CheckError
from tests.conftest import REPO

CAPTURED = REPO / "tests" / "recorded" / "captured"


def read(path: str) -> str:
    return (CAPTURED / path).read_text(errors="replace")


# --- nvidia-smi ---

@pytest.mark.parametrize("name", ["gpuexp-linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.load.query-gpu.csv",
                                  "gpuexp-linux-x86_64__nvidia-h200__590.48.01.load.query-gpu.csv",
                                  "gpuexp-linux-x86_64__nvidia-h100-mig__590.48.01.idle.query-gpu.csv"])
def test_query_gpu_csv_with_header_and_units(name):
    rows = parse_query_csv(read(f"nvidia-smi-query-gpu-csv/{name}"))
    assert len(rows) == 1
    row = rows[0]
    assert row["driver_version"] == "590.48.01" and row["name"].startswith("NVIDIA H")
    assert row["pci.bus_id"].startswith("00000000:")
    assert row["vgpu_driver_capability.heterogenous_multivGPU"] is None  # [N/A]


def test_query_csv_old_driver_and_na_values():
    rows = parse_query_csv(read("nvidia-smi-query-gpu-csv/azdiag-nvidia-smi-query-gpu.csv"))
    assert len(rows) == 4 and rows[0]["remapped_rows.failure"] is None and rows[3]["retired_pages.dbe"] == "0"


def test_query_csv_noheader_and_numbers():
    rows = parse_query_csv("0, NVIDIA H100 80GB HBM3, 16, 0x0000000000000004, Enabled, 41 C\n",
                           ["index", "name", "width", "reasons", "ecc", "temp"])
    assert number(rows[0]["width"]) == 16 and number(rows[0]["reasons"]) == 4 and number(rows[0]["temp"]) == 41
    assert number(rows[0]["ecc"]) == 1 and number(None) is None


@pytest.mark.parametrize("text", ["", "index, name\n0, NVIDIA H100, extra, values\n", "index, name\n0\n"])
def test_query_csv_malformed(text):
    with pytest.raises(CheckError):
        parse_query_csv(text)


def test_nvlink_healthy_and_inactive():
    good = parse_nvlink_status(read("nvidia-smi-nvlink-status/azhc-good_nvlink_status.txt"))
    assert list(good) == [7] and len(good[7]["links"]) == 12 and all(good[7]["links"].values())
    bad = parse_nvlink_status(read("nvidia-smi-nvlink-status/azhc-bad_nvlink_status.txt"))
    assert any(g["all_inactive"] for g in bad.values())
    h100 = parse_nvlink_status(read("nvidia-smi-nvlink-status/gpuexp-linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.nvlink-s"))
    assert len(h100[0]["links"]) == 18


def test_nvlink_with_one_inactive_link():
    text = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-x)\n\t Link 0: 26.562 GB/s\n\t Link 1: <inactive>\n"
    assert parse_nvlink_status(text)[0]["links"] == {0: 26.562, 1: None}


def test_nvlink_garbage():
    with pytest.raises(CheckError):
        parse_nvlink_status("Failed to initialize NVML: Driver/library version mismatch\n")


def test_exit_codes_are_explained():
    assert "driver is not loaded" in explain_exit(9) and "fallen off the bus" in explain_exit(15)
    assert explain_exit(42) == "nvidia-smi exited 42"


# --- kernel log ---

def test_xids_in_iso_dmesg():
    xids = parse_xids(read("kernel-xid/gpud-dmesg-time-format-iso.log"))
    codes = [x.code for x in xids]
    assert 48 in codes and 63 in codes and 94 in codes
    first = xids[0]
    assert first.pci == "0000:19:00" and first.code == 48 and first.fatal and first.stamp.startswith("2024-11-15T")
    burst = next(x for x in xids if x.code == 94)
    assert burst.count > 5  # one contained-ECC event printed once per channel within milliseconds
    one = parse_xids("2024-11-15T12:02:03,521616+00:00 NVRM: Xid (PCI:0000:19:00): 94, pid=1248209, name=python3.10, "
                     "Ch 00000008\n")
    assert one[0].pid == "1248209" and one[0].process == "python3.10"


def test_xid_119_and_application_xids():
    xids = parse_xids(read("kernel-xid/gpud-dmesg-with-xid-119.log"))
    assert {x.code for x in xids} == {119} and all(x.fatal for x in xids)
    app = parse_xids("[2397166.983093] NVRM: Xid (PCI:0000:0f:00): 13, pid=2503421, name=python3, Graphics Exception\n")
    assert app[0].code == 13 and not app[0].fatal
    off_bus = parse_xids("NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.\n")
    assert off_bus[0].fatal and "reboot" in off_bus[0].action


def test_nvswitch_sxid():
    xids = parse_xids("nvidia-nvswitch2: SXid (PCI:0000:85:00.0): 12028, Non-fatal, Link 44 egress error\n"
                      "nvidia-nvswitch2: SXid (PCI:0000:85:00.0): 20034, Fatal, Link 30 LTSSM Fault Up\n")
    assert [x.fatal for x in xids] == [False, True]


def test_all_recorded_logs_parse():
    for path in (CAPTURED / "kernel-xid").iterdir():
        parse_xids(path.read_text(errors="replace"))


def test_recent_keeps_the_last_hours_by_the_nodes_clock():
    """The recorded dmesg (ISO times with microseconds and +00:00) read with a node clock 1 h 30 min after
    its last Xid: a 2 h window keeps the Xids of the last 2 h, a 1 h window none; journalctl's +0000 form
    and a line kiln cannot date (kept) on their own."""
    log = read("kernel-xid/gpud-dmesg-time-format-iso.log")
    last = max(x.stamp for x in parse_xids(log))  # 2024-11-15T...
    import calendar
    import time
    when = calendar.timegm(time.strptime(last[:19], "%Y-%m-%dT%H:%M:%S"))
    clock = f"{NOW_MARK}{when + 5400}\n"
    assert parse_xids(recent(clock + log, 2)) and not parse_xids(recent(clock + log, 1))
    assert recent(log, 1) == log  # no clock line (a recorded log): nothing dropped
    lines = (f"{NOW_MARK}1732000000\n"
             "2024-11-19T06:00:00+0000 n1 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, x\n"
             "2024-11-19T03:00:00+0000 n1 kernel: NVRM: Xid (PCI:0000:18:00): 48, pid='<unknown>', name=<unknown>, x\n"
             "2024-11-19T08:00:00+0200 n1 kernel: NVRM: Xid (PCI:0000:2b:00): 74, pid='<unknown>', name=<unknown>, x\n"
             "[2397166.983093] NVRM: Xid (PCI:0000:0f:00): 95, pid='<unknown>', name=<unknown>, x\n")
    # 1732000000 is 2024-11-19T07:06:40Z: 79 (1 h ago) and 74 (08:00+02:00 = 06:00Z) stay, 48 (4 h) goes,
    # 95 has no date kiln can read and stays
    assert [x.code for x in parse_xids(recent(lines, 2))] == [79, 74, 95]
    assert log_command("kiln-sim kernel-log --since={since}") == \
        f"echo {NOW_MARK}$(date +%s); echo {RESET_MARK}$(head -c 32 {RESET_FILE} 2>/dev/null | tr -cd 0-9.); " \
        "kiln-sim kernel-log --since=-24h"


def test_gpu_driver_lines_from_before_the_last_gpu_reset_are_not_counted():
    """The real ECC burst (Xid 48, 63, 94 at 12:02:03 on 2024-11-15): a reset at 12:05 leaves none of
    it; a reset before it leaves all of it; SXid lines and lines kiln cannot date stay whatever the
    reset; a mark that is not a plain epoch is ignored."""
    from checks.gpu import check_xids
    from checks.node import Node, Result
    log = read("kernel-xid/gpud-dmesg-time-format-iso.log")
    burst = 1731672123  # 2024-11-15T12:02:03Z
    assert check_xids(Node("gpu01", lambda c: Result(0, log, "")), "cat log")[0].id == "GPU_XID_63"  # the last fatal
    text, dropped = after_gpu_reset(f"{RESET_MARK}{burst + 120}.250\n" + log)
    assert dropped == 11 and parse_xids(text) == []
    (v,) = check_xids(Node("gpu01", lambda c: Result(0, f"{RESET_MARK}{burst + 120}\n" + log, "")), "cat log")
    assert v.severity == "ok" and "11 GPU driver line(s) from before the last GPU reset not counted" in v.message
    text, dropped = after_gpu_reset(f"{RESET_MARK}{burst - 60}\n" + log)
    assert dropped == 0 and [x.code for x in parse_xids(text)][:2] == [48, 63]
    kept = ("2024-11-15T12:01:00+0000 n1 kernel: nvidia-nvswitch2: SXid (PCI:0000:85:00.0): 20034, Fatal, Link 30\n"
            "[2397166.983093] NVRM: Xid (PCI:0000:0f:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off\n")
    text, dropped = after_gpu_reset(f"{RESET_MARK}{burst + 120}\n" + kept)
    assert dropped == 0 and [(x.code, x.nvswitch) for x in parse_xids(text)] == [(20034, True), (79, False)]
    for mark in ("", "1731672243; rm -rf /", "0x67370000", "１７３１６７２２４３", "17316722431234"):
        assert after_gpu_reset(f"{RESET_MARK}{mark}\n" + log)[1] == 0, mark


def test_the_reset_mark_the_node_prints_is_digits_whatever_its_file_holds(tmp_path, monkeypatch):
    import subprocess

    from checks.parsers import kernel_log
    mark = tmp_path / "gpu-reset"
    monkeypatch.setattr(kernel_log, "RESET_FILE", str(mark))
    command = kernel_log.log_command("true {since}")
    assert subprocess.run(["sh", "-c", command], capture_output=True, text=True).stdout.splitlines()[1] == \
        RESET_MARK.strip()  # no file yet: an empty mark
    mark.write_text("1731672243.250\n* $(touch x) `id`\n")
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, cwd=tmp_path).stdout
    assert out.splitlines()[1] == f"{RESET_MARK}1731672243.250" and not (tmp_path / "x").exists()


def test_link_flaps():
    assert count_link_flaps(read("syslog-ib-flap/azhc-1dev_6flap_syslog")) == {"ib6": 6}


# --- InfiniBand ---

def test_ibstat_all_active_h100():
    adapters = parse_ibstat(read("ibstat/gpud-ibstat.47.0.h100.all.active.1"))
    ports = [p for a in adapters.values() for p in a.ports.values()]
    assert ports and all(p.active and p.link_up for p in ports)
    assert {p.link_layer for p in ports} <= {"InfiniBand", "Ethernet"}


def test_ibstat_soft_roce_from_the_vm_tier():
    """rxe0 as Debian 12's ibstat prints it on a VM (empty CA type and firmware, rate 2.5, Ethernet)."""
    adapters = parse_ibstat(read("ibstat/kiln-vm-ibstat.44.rxe.active"))
    port = adapters["rxe0"].ports[1]
    assert port.active and port.link_up and port.rate == 2.5 and port.link_layer == "Ethernet"


def test_ib_write_bw_row_with_a_warning_glued_to_it():
    """As perftest printed it on a soft-RoCE VM: the correlation warning on the row's own line."""
    text = (" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
            " 1048576    38           0.000000            0.000000            0.000000Correlation coefficient "
            "r^2: 0.672018 < 0.9\n")
    assert parse_ib_write_bw(text) == {1048576: 0.0}


def test_ibstat_some_down():
    adapters = parse_ibstat(read("ibstat/gpud-ibstat.47.0.some.down.0"))
    down = [a.name for a in adapters.values() for p in a.ports.values() if not p.active]
    assert len(down) == 3 and all(not adapters[n].ports[1].link_up for n in down)
    rates = {p.rate for a in adapters.values() for p in a.ports.values()}
    assert 400 in rates


def test_ibstat_ibpanic_and_truncated():
    with pytest.raises(CheckError, match="ibpanic"):
        parse_ibstat(read("ibstat/gpud-ibstat.39.0.a100.failed.ibpanic.exit-255.0"))
    text = read("ibstat/gpud-ibstat.47.0.a100.all.active.0")
    with pytest.raises(CheckError):
        parse_ibstat(text[: text.index("State:")])
    with pytest.raises(CheckError):
        parse_ibstat("")


def test_ibv_devinfo():
    text = ("hca_id:\tmlx5_0\n\ttransport:\t\t\tInfiniBand (0)\n\tphys_port_cnt:\t\t\t1\n\t\tport:\t1\n"
            "\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tactive_width:\t\t4X (2)\n\t\t\tactive_speed:\t\t100.0 Gbps (64)\n"
            "\t\t\tphys_state:\t\tLINK_UP (5)\n\t\t\tlink_layer:\t\tInfiniBand\n")
    port = parse_ibv_devinfo(text)["mlx5_0"].ports[1]
    assert port.active and port.link_up and port.rate == 400 and port.link_layer == "InfiniBand"
    with pytest.raises(CheckError):
        parse_ibv_devinfo("No IB devices found\n")


def test_ib_write_bw():
    results = parse_ib_write_bw(read("ib_write_bw/sbench-ib_loopback_8M_size.log"))
    assert round(results[8388608]) == 202  # 24056.72 MB/s: perftest's "MB" is 2^20 bytes
    gbits = parse_ib_write_bw(" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
                              " 8388608    5000             391.22             390.87\t\t     0.005824\n")
    assert gbits == {8388608: 390.87}
    with pytest.raises(CheckError, match="no result row"):
        parse_ib_write_bw(" Couldn't connect to 10.0.0.2:18515\n")


# --- nccl-tests ---

def test_nccl_single_node():
    result = parse_nccl_tests(read("nccl-tests/gcm-test_check_nccl.py.sample_single_success_output.txt"))
    assert result.average_busbw == 210.99 and result.wrong == 0 and result.out_of_bounds == 0
    assert result.max_busbw == 231.72 and len(result.rows) == 6 and result.validated


def test_nccl_recorded_runs_parse():
    for path in (CAPTURED / "nccl-tests").iterdir():
        assert parse_nccl_tests(path.read_text()).rows
    alltoall = parse_nccl_tests(read("nccl-tests/sbench-nccl_alltoall.log"))
    assert not alltoall.validated and alltoall.wrong == 0  # run with validation off: nothing checked


def test_nccl_truncated():
    text = read("nccl-tests/gcm-test_check_nccl.py.sample_single_success_output.txt")
    with pytest.raises(CheckError, match="cut short"):
        parse_nccl_tests(text[: text.index("# Out of bounds")])


# --- DCGM ---

def test_dcgm3_real_output_with_stray_line_and_nulls():
    results = parse_dcgm_diag(read("dcgmi-diag/dcgm-JsonResultTests.cpp.deserialize-real-output.json"))
    assert results and {r.status for r in results} == {"pass"}
    assert results[0].gpus == "0,1,2,3,4,5,6,7"


def test_dcgm4_keys():
    text = ('{"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [{"name": "memory", '
            '"results": [{"entity_group": "GPU", "entity_id": 3, "status": "Fail", "warnings": [{"warning": '
            '"Memory errors"}]}], "test_summary": {"status": "Fail"}}]}]}}')
    (r,) = parse_dcgm_diag(text)
    assert (r.test, r.gpus, r.status, r.detail) == ("memory", "3", "fail", "Memory errors")


@pytest.mark.parametrize("text", ["", "Error: unable to connect to host engine", '{"DCGM Diagnostic": {"test_cat',
                                  '{"Other": {}}', '{"DCGM Diagnostic": {"test_categories": []}}'])
def test_dcgm_malformed(text):
    with pytest.raises(CheckError):
        parse_dcgm_diag(text)


# --- mounts ---

def test_findmnt_json_list_and_tree():
    mounts = parse_findmnt_json(read("findmnt/gpud-findmnt.0.json"))
    assert mounts["/"].fstype == "ext4"
    tree = parse_findmnt_json('{"filesystems": [{"target": "/", "source": "/dev/sda1", "fstype": "ext4", '
                              '"options": "rw,relatime", "children": [{"target": "/home", "source": "nfs01:/home", '
                              '"fstype": "nfs4", "options": "rw,hard,vers=4.2"}]}]}')
    assert tree["/home"].options == ("rw", "hard", "vers=4.2")
    with pytest.raises(CheckError):
        parse_findmnt_json('{"filesystems": [{"target": "/"')


def test_fstab_df_and_options():
    fstab = parse_fstab("# comment\nnfs01:/export/home /home nfs rw,hard 0 0\n/dev/sda1 / ext4 defaults 0 1\n")
    assert fstab["/home"].source == "nfs01:/export/home" and fstab["/"].options == ("defaults",)
    usage = parse_df_percent("Mounted on Use% IUse%\n/ 42% 3%\n/lustre 96% -\n")
    assert usage == {"/": (42, 3), "/lustre": (96, None)}
    assert options_match("rw,hard,vers=4.2", ("rw", "hard", "vers=4.1")) == ["vers=4.2"]
    assert options_match("defaults", ("rw",)) == []
    assert options_match("rw,size=64m", ("rw", "nosuid", "size=65536k")) == []
    assert options_match("size=64m", ("size=32768k",)) == ["size=64m"]
    with pytest.raises(CheckError):
        parse_df_percent("Mounted on Use% IUse%\ngarbage here\n")


@pytest.mark.parametrize("capture, events, verdict", [
    # an SXid's Severity/Data lines are the same event: three non-fatal events, no drain
    ("kiln-made-sxid-multiline-nonfatal.log", [(12028, "ok"), (11004, "ok"), (12028, "ok")], ("GPU_XID", "ok")),
    ("kiln-made-sxid-multiline-fatal.log", [(20034, "fail")], ("GPU_XID_20034", "fail")),
    ("kiln-made-xid-154-reset-required.log", [(120, "fail"), (154, "fail")], ("GPU_XID_154", "fail")),
    ("kiln-made-xid-154-only.log", [(154, "fail")], ("GPU_XID_154", "fail")),
    ("kiln-made-xid-154-cleared.log", [(154, "ok")], ("GPU_XID", "ok")),
    ("kiln-made-xid-149-nvlink-blackwell.log", [(149, "fail")], ("GPU_XID_149", "fail")),
    # the driver's own word decides where it prints one: Nonfatal NVLink Xids are reported, not drained
    ("kiln-made-xid-149-nvlink-blackwell-nonfatal.log", [(149, "warn")], ("GPU_XID", "warn")),
    # Data and Severity lines before the event line: one event, with the event line's words
    ("kiln-made-sxid-data-first-fatal.log", [(20034, "fail")], ("GPU_XID_20034", "fail")),
    ("kiln-made-dmesg-T-xid-hours-apart.log", [(48, "fail"), (48, "fail")], ("GPU_XID_48", "fail")),
    ("kiln-made-fallen-off-the-bus-no-xid.log", [(79, "fail"), (79, "fail")], ("GPU_XID_79", "fail")),
    ("kiln-made-unknown-xid-171.log", [(171, "warn")], ("GPU_XID", "warn")),
    ("kiln-made-xid-13-burst.log", [(13, "ok")], ("GPU_XID", "ok")),
    # real lines from other sites (SOURCES.md): Blackwell NVLink Xids with the driver's own Fatal/Nonfatal
    # word (the two unstamped 149 lines of one GPU are one burst: nothing tells them apart in time) ...
    ("gpud-pr1160-1174-blackwell-nvlink-xid.log", [(144, "warn"), (149, "fail"), (149, "fail"), (145, "warn")],
     ("GPU_XID_149", "fail")),
    # ... an application's Xid 45 that names the NVLink Xid behind it: judged by its own code (the 149/145
    # lines decide where they are in the log; a dead link also fails GPU_NVLINK_INACTIVE)
    ("ogkm-1150-xid-45-after-149-145.log", [(45, "ok")] * 7, ("GPU_XID", "ok")),
    # ... and four NVSwitches' SXids interleaved, each switch's Severity/Data lines twice, the second round
    # with no event line of its own: one non-fatal event per switch
    ("hgx-shared-nvswitch-sxid-11004-interleaved.log", [(11004, "ok")] * 4, ("GPU_XID", "ok")),
])
def test_xid_and_sxid_events_as_the_driver_prints_them(capture, events, verdict):
    from checks.gpu import check_xids
    from checks.node import Node, Result
    text = read(f"kernel-xid/{capture}")
    assert [(x.code, x.severity) for x in parse_xids(text)] == events
    (v,) = check_xids(Node("gpu01", lambda command: Result(0, text, "")), "cat log")
    assert (v.id, v.severity) == verdict, v


def test_a_burst_is_one_event_and_the_same_code_later_is_another():
    burst = parse_xids(read("kernel-xid/kiln-made-xid-13-burst.log"))
    assert len(burst) == 1 and burst[0].count == 20
    later = parse_xids("[100.0] NVRM: Xid (PCI:0000:0f:00): 48, DBE\n[100.5] NVRM: Xid (PCI:0000:0f:00): 48, DBE\n"
                       "[500.0] NVRM: Xid (PCI:0000:0f:00): 48, DBE\n")
    assert [x.count for x in later] == [2, 1]


def test_dmesg_ctime_stamps_are_read_as_times_not_as_the_year():
    """`dmesg -T` stamps end in the year: read as seconds they made every line of 2025 one burst."""
    events = parse_xids(read("kernel-xid/gpud-dmesg-with-xid-119.log"))
    assert [(x.code, x.count) for x in events] == [(119, 2), (119, 1), (119, 1), (119, 1)]
    assert [x.count for x in parse_xids(read("kernel-xid/kiln-made-dmesg-T-xid-hours-apart.log"))] == [1, 1]
    from checks.parsers.kernel_log import _STAMP, _seconds
    real = read("kernel-xid/kiln-vm-dmesg-T.log").splitlines()  # a VM's own dmesg -T
    stamps = [_seconds(_STAMP.match(line).group(1)) for line in real]
    assert all(s is not None and s > 1.7e9 for s in stamps) and stamps == sorted(stamps)
    assert parse_xids("\n".join(real)) == []


def test_the_catalog_splits_fatal_application_and_unknown():
    from checks.parsers.xid_catalog import classify
    assert classify(79)[0] == "fail" and "reboot" in classify(79)[1]
    assert classify(13)[0] == classify(31)[0] == classify(45)[0] == "ok"
    assert all(classify(code)[0] == "fail" for code in range(144, 151))
    assert classify(171)[0] == "warn" and "171" in classify(171)[1]
    assert classify(154, "GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)")[1].startswith(
        "the driver asks for recovery action 4")


@pytest.mark.parametrize("capture", ["kiln-made-srun-l-prefixed.txt", "kiln-made-bracket-prefixed.txt",
                                     "kiln-made-mpirun-tag-output.txt"])
def test_nccl_rows_behind_a_launchers_prefix(capture):
    plain = parse_nccl_tests(read("nccl-tests/gcm-test_check_nccl.py.sample_single_success_output.txt"))
    prefixed = parse_nccl_tests(read(f"nccl-tests/{capture}"))
    assert prefixed == plain and prefixed.validated and prefixed.average_busbw == 210.99


def test_nccl_older_error_column_is_validation_on():
    good = parse_nccl_tests(read("nccl-tests/kiln-made-old-error-column.txt"))
    assert good.validated and good.wrong == 0 and good.average_busbw == 54.05
    bad = parse_nccl_tests(read("nccl-tests/kiln-made-old-error-column-wrong.txt"))
    assert bad.validated and bad.wrong == 1


def test_dcgm3_names_the_gpu_with_gpu_id():
    results = parse_dcgm_diag(read("dcgmi-diag/kiln-made-dcgm3-gpu-id.json"))
    failed = [r for r in results if r.status == "fail"]
    assert [(r.test, r.gpus) for r in failed] == [("GPU Memory", "1")] and "cudaMalloc" in failed[0].detail
    assert all(r.gpus for r in results)


def test_ib_write_bw_two_ports_keeps_the_slow_one():
    assert parse_ib_write_bw(read("ib_write_bw/kiln-made-two-ports.txt")) == {8388608: 196.95}


def test_ib_write_bw_bidirectional_is_read_per_direction():
    assert parse_ib_write_bw(read("ib_write_bw/kiln-made-bidirectional.txt")) == {1048576: 785.42 / 2}
    # real: perftest over soft-RoCE between two VMs, with -b, and the same pair one way in MB/sec
    assert parse_ib_write_bw(read("ib_write_bw/kiln-vm-bidirectional-rxe.txt")) == {65536: 0.091633 / 2}
    assert parse_ib_write_bw(read("ib_write_bw/kiln-vm-mb-per-sec-rxe.txt")) == {65536: 11.73 * MIB_PER_SECOND_IN_GBITS}


def test_ib_write_bw_older_four_columns():
    assert parse_ib_write_bw(read("ib_write_bw/kiln-made-old-four-columns.txt")) == {65536: 5871.90 * MIB_PER_SECOND_IN_GBITS}
    # real: an older perftest on an InfiniBand pair (MTU 2048, no MsgRate column), its address lines
    # wrapped where the notes it was pasted in wrapped them
    assert parse_ib_write_bw(read("ib_write_bw/notes-old-perftest-ib-four-columns.txt")) == {65536: 939.37 * MIB_PER_SECOND_IN_GBITS}


def test_perftest_mib_per_second_is_read_as_2_to_the_20_bytes_whatever_its_label():
    """perftest divides by 0x100000 for its MB/MiB figure (125000000 for Gb): one NDR400 pair of another
    site measured both ways agrees only when "MiB/sec" is read as MiB (a "Conflicting CPU frequency"
    line stands between the header and the row)."""
    mib = parse_ib_write_bw(read("ib_write_bw/notes-ndr400-send-bw-mib-per-sec.txt"))[65536]
    gbits = parse_ib_write_bw(read("ib_write_bw/notes-ndr400-write-bw-gbits.txt"))[65536]
    assert gbits == 392.34 and round(mib, 2) == 390.55
    assert abs(mib - gbits) / gbits < 0.01  # read as 10^6 bytes it would be 372.5, 5 % short of the same link


def test_ib_write_bw_with_a_unit_kiln_does_not_read_is_refused_with_that_reason():
    text = read("ib_write_bw/kiln-made-old-four-columns.txt").replace("BW average[MB/sec]", "BW average[KB/sec]")
    with pytest.raises(CheckError, match="names no BW average unit"):
        parse_ib_write_bw(text)


def test_sxid_lines_of_two_switches_interleaved_are_two_events():
    one = read("kernel-xid/kiln-made-sxid-multiline-nonfatal.log").splitlines(keepends=True)
    fatal = read("kernel-xid/kiln-made-sxid-multiline-fatal.log").splitlines(keepends=True)
    mixed = "".join(a + b for a, b in zip(one[:3], fatal))  # switch 1 and switch 3, line by line
    assert [(x.code, x.severity) for x in parse_xids(mixed)] == [(12028, "ok"), (20034, "fail")]


def _flat(text: str) -> str:
    """The capture as a ticket or a log shipper leaves it: every line's indentation gone."""
    return "\n".join(line.strip() for line in text.splitlines()) + "\n"


@pytest.mark.parametrize("path", sorted(p.name for p in (CAPTURED / "ibstat").iterdir() if "ibpanic" not in p.name))
def test_ibstat_without_indentation_reads_the_same(path):
    text = read(f"ibstat/{path}")
    assert parse_ibstat(_flat(text)) == parse_ibstat(text)


@pytest.mark.parametrize("path", sorted(p.name for p in (CAPTURED / "nvidia-smi-nvlink-status").iterdir()))
def test_nvlink_status_without_indentation_reads_the_same(path):
    text = read(f"nvidia-smi-nvlink-status/{path}")
    try:
        expected = parse_nvlink_status(text)
    except CheckError:
        with pytest.raises(CheckError):
            parse_nvlink_status(_flat(text))
        return
    assert parse_nvlink_status(_flat(text)) == expected


def test_ibstat_with_fewer_ports_than_it_declares_is_refused():
    text = read("ibstat/gpud-ibstat.47.0.some.down.0")
    two = text.replace("Number of ports: 1", "Number of ports: 2", 1)
    with pytest.raises(CheckError, match="lists 1 port\\(s\\) of 2"):
        parse_ibstat(two)
    no_port = "CA 'mlx5_0'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tFirmware version: 28.39.1002\n"
    with pytest.raises(CheckError, match="lists 0 port"):
        parse_ibstat(no_port)


def test_ibstat_with_a_line_it_does_not_print_is_refused():
    text = read("ibstat/gpud-ibstat.47.0.some.down.0").replace("\t\tState: Active", "\t\tState Active", 1)
    with pytest.raises(CheckError, match="not understood"):
        parse_ibstat(text)


def test_nvlink_status_with_a_line_it_does_not_print_is_refused():
    text = read("nvidia-smi-nvlink-status/gpud-nvidia-smi.nvlink.status.a100")
    broken = text.replace("Link 3: 25 GB/s", "Lnk 3 25 GB/s", 1)
    with pytest.raises(CheckError, match="not understood under GPU 0"):
        parse_nvlink_status(broken)


GPU_ROW = ("{i}, NVIDIA H100 80GB HBM3, 00000000:{bus}:00.0, 550.163.01, Enabled, Enabled, {ecc}, No, 5, 5, 16, 16, "
           "0x0000000000000000")


def _table(*ecc: str) -> str:
    return "\n".join(GPU_ROW.format(i=i, bus=f"{0x18 + i:02X}", ecc=e) for i, e in enumerate(ecc)) + "\n"


@pytest.mark.parametrize("placeholder, check_id, severity", [
    ("[GPU requires reset]", "GPU_LOST", "fail"), ("[GPU is lost]", "GPU_LOST", "fail"),
    # one field the driver could not read: seen for ever on some boards (fan.speed, a GeForce's
    # power.default_limit), so reported without a drain, never read as "not available" and passed
    ("[Unknown Error]", "GPU_FIELD_UNREADABLE", "warn"), ("[Timeout]", "GPU_FIELD_UNREADABLE", "warn"),
])
def test_a_gpu_state_placeholder_is_a_verdict_not_a_pass_or_a_crash(placeholder, check_id, severity):
    from checks.gpu import FIELDS, check_table
    rows = parse_query_csv(_table("0", placeholder, "0"), FIELDS + ["throttle"])
    assert rows[1]["ecc.errors.uncorrected.volatile.total"] is None
    verdicts = check_table(rows, {"count": 3, "model": "h100", "driver": "550.163.01"})
    found = [v for v in verdicts if v.id == check_id]
    assert len(found) == 1 and found[0].severity == severity, verdicts
    assert found[0].message.startswith(f"gpu1 (00000000:19:00.0): nvidia-smi printed {placeholder}")


def test_a_real_requires_reset_row_from_a_slurm_node_is_a_lost_gpu_beside_a_healthy_one():
    """`srun --jobid=J nvidia-smi --query-gpu=... --format=csv` on two H100 nodes of another site
    (SOURCES.md): the header with units, the sick GPU's fields in brackets, values with their units."""
    from checks.gpu import check_table
    sick = parse_query_csv(read("nvidia-smi-query-gpu-csv/slurm-h100-requires-reset.csv"))
    well = parse_query_csv(read("nvidia-smi-query-gpu-csv/slurm-h100-healthy-neighbour.csv"))
    assert sick[0]["temperature.gpu"] is None and sick[0]["utilization.gpu"] is None
    assert number(sick[0]["memory.used"]) == 0 and number(well[0]["memory.used"]) == 80620
    assert [f[:2] for f in sick[0][FAULTS]] == [("temperature.gpu", "[GPU requires reset]"),
                                                ("utilization.gpu", "[GPU requires reset]")]
    assert well[0][FAULTS] == [] and number(well[0]["utilization.gpu"]) == 100
    blank = dict.fromkeys(("name", "pci.bus_id", "driver_version", "persistence_mode", "ecc.mode.current",
                           "ecc.errors.uncorrected.volatile.total", "retired_pages.pending",
                           "pcie.link.width.current", "pcie.link.width.max", "pcie.link.gen.current",
                           "pcie.link.gen.max", "throttle"))
    lost = [v for v in check_table([{**blank, **sick[0], "persistence_mode": "Enabled"}], {"count": 1})
            if v.severity != "ok"]
    assert [(v.id, v.severity) for v in lost] == [("GPU_LOST", "fail")], lost
    assert "nvidia-smi printed [GPU requires reset] for temperature.gpu, utilization.gpu" in lost[0].message


def test_not_available_placeholders_are_no_value_and_no_fault():
    from checks.gpu import FIELDS, check_table
    rows = parse_query_csv(_table("[N/A]", "[Not Supported]"), FIELDS + ["throttle"])
    assert [r["ecc.errors.uncorrected.volatile.total"] for r in rows] == [None, None]
    assert all(v.severity == "ok" for v in check_table(rows, {"count": 2, "model": "h100"}))


def test_a_placeholder_kiln_does_not_know_is_refused():
    with pytest.raises(CheckError, match=r"printed '\[Driver Reloading\]' in place of a value"):
        parse_query_csv(_table("0", "[Driver Reloading]"), ["f"] * 13)


def test_real_bridged_pairs_of_pcie_cards_pass_and_a_card_left_without_its_bridge_fails():
    """Two real `nvlink -s` of RTX A6000 nodes joined in pairs by NVLink bridges (SOURCES.md): a Slurm
    node of 8 cards in four bridged pairs (4 links each, space-indented as pasted in a forum), and a
    3-card machine whose third card has no bridge ("all links are inActive")."""
    from checks.gpu import check_nvlink
    from checks.node import Node, Result

    def node(name):
        text = read(f"nvidia-smi-nvlink-status/{name}")
        return Node("gpu01", lambda command: Result(0, text, ""))

    eight = "unige-baobab-gpu048-8x-a6000-bridged-pairs.txt"
    gpus = parse_nvlink_status(read(f"nvidia-smi-nvlink-status/{eight}"))
    assert sorted(gpus) == list(range(8)) and all(g["links"] == {n: 14.062 for n in range(4)} for g in gpus.values())
    (v,) = check_nvlink(node(eight), 4, bridged=True)
    assert (v.id, v.severity) == ("GPU_NVLINK_INACTIVE", "ok"), v
    (v,) = check_nvlink(node("notes-3x-a6000-one-pair-bridged.txt"), 4, bridged=True)
    assert (v.id, v.severity) == ("GPU_NVLINK_INACTIVE", "fail") and "gpu2" in v.message and "gpu0" not in v.message, v


def test_bridged_nvlink_counts_active_links_and_leaves_unbridged_slots_alone():
    from checks.gpu import check_nvlink
    from checks.node import Node, Result
    text = read("nvidia-smi-nvlink-status/kiln-made-a100-pcie-two-bridges.txt")
    node = Node("gpu01", lambda command: Result(0, text, ""))
    (bridged,) = check_nvlink(node, 8, bridged=True)
    assert (bridged.id, bridged.severity) == ("GPU_NVLINK_INACTIVE", "ok")
    (missing,) = check_nvlink(node, 12, bridged=True)
    assert missing.severity == "fail" and "gpu0: 8 of 12 bridged links active" in missing.message
    listed = check_nvlink(node, 12)  # read as an NVSwitch-style layout, the unbridged slots fail
    assert [v.severity for v in listed] == ["fail", "ok"]


def test_a_contained_ecc_error_asks_to_restart_the_application_and_never_drains():
    """NVIDIA's catalog: Xid 94, a contained ECC error, needs the application restarted, not the node."""
    from checks.gpu import check_xids
    from checks.node import Node, Result
    line = "2024-11-15T12:02:03,521616+00:00 NVRM: Xid (PCI:0000:19:00): 94, pid=1248209, name=python3.10, Ch 00000008\n"
    (v,) = check_xids(Node("gpu01", lambda c: Result(0, line, "")), "cat log")
    assert (v.id, v.severity) == ("GPU_XID", "warn") and "restart the application" in v.message


def test_every_fatal_code_has_its_catalog_ladder_and_a_fatal_sxid_of_five_digits_is_rebooted():
    from checks.parsers.xid_catalog import FATAL, NVLINK, REBOOT, RESET, SERVICE
    from checks.repairs import ESCALATE, ladder
    steps = {RESET: ("reset", "reboot", ESCALATE), REBOOT: ("reboot", ESCALATE), SERVICE: (ESCALATE,),
             NVLINK: ("restart:nvidia-fabricmanager", "reset", "reboot", ESCALATE)}
    for code, (_, action) in FATAL.items():
        assert ladder(f"GPU_XID_{code}") == steps.get(action, ("reboot", ESCALATE)), code
    for sxid in (11004, 12028, 20034, 24007):
        assert ladder(f"GPU_XID_{sxid}") == ("reboot", ESCALATE), sxid
    assert ladder("GPU_XID_94") == (ESCALATE,)  # never drained for it; a person's if ever asked


# --- nvidia-smi -q ---

@pytest.mark.parametrize("name, driver, gpus", [
    ("azdiag-nvidia-smi-q.out", "460.32.03", 8), ("azhc-orig_nvsmi8_output.txt", "535.86.10", 8),
    ("gpud-nvidia-smi-query.535.129.03.out.0.valid.a10", "535.129.03", 1),
    ("gpud-nvidia-smi-query.535.154.05.out.0.valid", "535.154.05", 8),
    ("gpud-nvidia-smi-query.535.154.05.out.2.valid", "535.154.05", 8),
    ("gpud-nvidia-smi-query.535.161.08.out.0.valid", "535.161.08", 8),
    ("gpud-nvidia-smi-query.535.183.01.out.0.valid", "535.183.01", 8),
    ("gpud-nvidia-smi-query.560.35.03.out.0.valid", "560.35.03", 1),
    ("gpuexp-linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.load.q", "590.48.01", 1),
    ("gpuexp-linux-x86_64__nvidia-h100-mig__590.48.01.idle.q", "590.48.01", 1),
    ("gpuexp-linux-x86_64__nvidia-h200__590.48.01.load.q", "590.48.01", 1),
])
def test_nvidia_smi_q_is_read_whole_on_every_recorded_driver(name, driver, gpus):
    from checks.parsers import nvidia_smi_q as q
    parsed = q.read(read(f"nvidia-smi-q/{name}"))
    assert parsed["driver"] == driver and len(parsed["gpus"]) == gpus
    for gpu in parsed["gpus"].values():
        assert isinstance(gpu, dict) and gpu


def test_nvidia_smi_q_sections_kiln_reads():
    from checks.parsers import nvidia_smi_q as q
    a10 = next(iter(q.read(read("nvidia-smi-q/gpud-nvidia-smi-query.535.129.03.out.0.valid.a10"))["gpus"].values()))
    assert q.remapped_rows(a10) == {"correctable": "0", "uncorrectable": "4", "pending": "Yes", "failure": "No"}
    assert q.ecc_mode(a10) == ("Enabled", "Enabled")
    h100 = q.read(read("nvidia-smi-q/gpud-nvidia-smi-query.535.161.08.out.0.valid"))["gpus"]
    first = next(iter(h100.values()))
    assert q.clock_event_reasons(first) == ["HW Slowdown", "HW Power Brake Slowdown"]  # nested reasons too
    assert q.fabric(first) == {"state": "Completed", "status": "Success", "clique": "", "health": ""}
    h200 = next(iter(q.read(read("nvidia-smi-q/gpuexp-linux-x86_64__nvidia-h200__590.48.01.load.q"))["gpus"].values()))
    assert q.fabric(h200) == {"state": "Completed", "status": "Success", "clique": "0", "health": "N/A"}
    titan = next(iter(q.read(read("nvidia-smi-q/gpud-nvidia-smi-query.560.35.03.out.0.valid"))["gpus"].values()))
    assert q.remapped_rows(titan) is None and q.fabric(titan) is None  # N/A: no such hardware
    old = next(iter(q.read(read("nvidia-smi-q/azdiag-nvidia-smi-q.out"))["gpus"].values()))
    assert q.ecc_mode(old) == ("Enabled", "Enabled")  # "Ecc Mode" on driver 460


def test_nvidia_smi_q_cut_short_is_an_error_never_a_partial_pass():
    from checks.parsers import nvidia_smi_q as q
    with pytest.raises(CheckError, match="says 8 GPUs but lists 1"):
        q.read(read("nvidia-smi-q/gpud-nvidia-smi-query.535.183.01.out.0.invalid"))
    with pytest.raises(CheckError, match="Attached GPUs"):
        q.read("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
