"""GPU suite: count, model, driver pin, persistence, ECC, retired pages, remapped rows, PCIe link,
throttling, NVLink, fatal Xids, fabric manager, the NVLink fabric's state and an ECC mode change
pending (``nvidia-smi -q``), nvidia_peermem, DCGM diagnostic.

Expectations (``expect["gpu"]``): count, model, driver, nvswitch, rdma, dcgm_level, kernel_log, and optionally xid_hours
(default ``XID_HOURS``).
"""

from __future__ import annotations

from checks import gpu_load
from checks.node import Node
from checks.parsers.dcgm import parse_dcgm_diag
from checks.parsers.kernel_log import DEFAULT_COMMAND, after_gpu_reset, parse_xids, recent
from checks.parsers import nvidia_smi_q
from checks.parsers.exposition import Exposition
from checks.parsers.nvidia_smi import FAULTS, GPU_GONE, explain_exit, number, parse_nvlink_status, parse_query_csv
from checks.verdict import CheckError, Verdict, fail, ok, warn, with_passes

FIELDS = ["index", "name", "pci.bus_id", "driver_version", "persistence_mode", "ecc.mode.current",
          "ecc.errors.uncorrected.volatile.total", "retired_pages.pending", "pcie.link.gen.current",
          "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max"]
EVENTS_NEW, EVENTS_OLD = "clocks_event_reasons.active", "clocks_throttle_reasons.active"
# Idle (0x1) and the software power cap (0x4) are normal; anything else slows the GPU down.
BENIGN_THROTTLE = {0x0, 0x1, 0x4}
XID_HOURS = 2  # a fatal Xid fails the suite for this long


def query_command(events: str) -> str:
    return f"nvidia-smi --query-gpu={','.join(FIELDS + [events])} --format=csv,noheader,nounits"


REMAPPED_ROWS = ("nvidia-smi --query-remapped-rows=gpu_bus_id,remapped_rows.pending,remapped_rows.failure "
                 "--format=csv,noheader,nounits")
NVLINK_STATUS = "nvidia-smi nvlink -s"
# NVLinks per GPU of each SXM/OAM model (what ``nvidia-smi nvlink -s`` lists when all is well); PCIe
# models have none. The inventory's kiln_gpu_nvlinks overrides it (NVL bridges, other boards).
NVLINKS_PER_MODEL = {"v100": 6, "a100": 12, "a800": 8, "h100": 18, "h200": 18, "h800": 8, "h20": 18, "b100": 18,
                     "b200": 18, "b300": 18, "gb200": 18, "gb300": 18}
FULL_QUERY = "nvidia-smi -q"
PEERMEM = "test -d /sys/module/nvidia_peermem"
FABRIC_MANAGER = "nvidia-fabricmanager"


def dcgm_command(level: int) -> str:
    return f"dcgmi diag -r {level} -j"


def service_command(unit: str) -> str:
    return f"systemctl is-active {unit}"


def _query(node: Node) -> tuple[list[dict] | None, Verdict | None]:
    """nvidia-smi's GPU table, trying the clock-event field by its new name, then its old one. With a
    GPU lost (exit 15) the others are still listed: they are checked, and the loss is the verdict."""
    for events in (EVENTS_NEW, EVENTS_OLD):
        out = node.run(query_command(events))
        if out.rc == 2 and events == EVENTS_NEW:
            continue  # driver older than 535.54: the field is still called clocks_throttle_reasons
        if out.rc == 15 and out.stdout.strip():
            lost = [line.strip() for line in (out.stderr + out.stdout).splitlines() if "Unable to determine" in line]
            stdout = "\n".join(line for line in out.stdout.splitlines() if "Unable to determine" not in line)
            try:
                return parse_query_csv(stdout, FIELDS + ["throttle"]), fail(
                    "GPU_LOST", f"{'; '.join(lost) or 'a GPU is lost'}: {explain_exit(15)}")
            except CheckError as e:
                return None, fail("GPU_NVIDIA_SMI_UNREADABLE", f"nvidia-smi output not understood: {e}")
        if out.rc != 0:
            detail = (out.stdout + out.stderr).strip().splitlines()
            return None, fail("GPU_NVIDIA_SMI", f"nvidia-smi exited {out.rc}: {explain_exit(out.rc)}"
                              + (f" ({detail[0][:120]})" if detail else ""))
        try:
            rows = parse_query_csv(out.stdout, FIELDS + ["throttle"])
        except CheckError as e:
            return None, fail("GPU_NVIDIA_SMI_UNREADABLE", f"nvidia-smi output not understood: {e}")
        return rows, None
    return None, fail("GPU_NVIDIA_SMI", "nvidia-smi rejected both clock-event field names")


def _gpu(row: dict) -> str:
    return f"gpu{row['index']} ({row['pci.bus_id']})"


def check_table(rows: list[dict], expect: dict) -> list[Verdict]:
    out = []
    count = expect.get("count", 0)
    out.append(ok("GPU_COUNT", f"{len(rows)} GPUs") if len(rows) == count else
               fail("GPU_COUNT", f"{len(rows)} GPUs visible, the inventory says {count}: a GPU is missing or "
                    "fell off the bus; check dmesg for Xid 79, reseat or service it"))
    model = (expect.get("model") or "").lower()
    wrong_model = [_gpu(r) + f" is {r['name']}" for r in rows if model and model not in (r["name"] or "").lower()]
    out.append(fail("GPU_MODEL", "; ".join(wrong_model) + f" (inventory: {model})") if wrong_model
               else ok("GPU_MODEL", f"all {model or 'GPUs'}"))
    driver = expect.get("driver")
    versions = sorted({r["driver_version"] or "?" for r in rows})
    if driver:
        out.append(ok("GPU_DRIVER_VERSION", f"driver {driver}") if versions == [driver] else
                   fail("GPU_DRIVER_VERSION", f"driver {', '.join(versions)} loaded, the pin is {driver}: "
                        "reboot if the pinned driver is installed, else run kiln deploy --roles nvidia_driver"))
    for r in rows:
        g = _gpu(r)
        faults = r.get(FAULTS) or []
        gone = [f for f in faults if f[1] in GPU_GONE]
        for found, verdict, check_id in ((gone, fail, "GPU_LOST"),
                                         ([f for f in faults if f not in gone], warn, "GPU_FIELD_UNREADABLE")):
            if found:
                printed = sorted({value for _, value, _ in found})
                out.append(verdict(check_id, f"{g}: nvidia-smi printed {', '.join(printed)} for "
                                   f"{', '.join(field for field, _, _ in found[:3])}: {found[0][2]}"))
        if (r["persistence_mode"] or "").lower() != "enabled":
            out.append(fail("GPU_PERSISTENCE", f"{g}: persistence mode {r['persistence_mode']}: start "
                            "nvidia-persistenced (kiln deploy --roles nvidia_driver)"))
        ecc = r["ecc.mode.current"]
        if ecc is not None and ecc.lower() != "enabled":
            out.append(fail("GPU_ECC_MODE", f"{g}: ECC is {ecc}: nvidia-smi -i {r['index']} -e 1, then reset"))
        unc = number(r["ecc.errors.uncorrected.volatile.total"])
        if unc:
            out.append(fail("GPU_ECC_UNCORRECTED", f"{g}: {int(unc)} uncorrected volatile ECC errors: drain, "
                            "reset the GPU; service it if they recur"))
        if (r["retired_pages.pending"] or "").lower() in ("yes", "1"):
            out.append(fail("GPU_RETIRED_PAGES_PENDING", f"{g}: retired pages pending: reset the GPU or reboot"))
        width, width_max = number(r["pcie.link.width.current"]), number(r["pcie.link.width.max"])
        if width is not None and width_max and width < width_max:
            out.append(fail("GPU_PCIE_WIDTH", f"{g}: PCIe x{int(width)} of x{int(width_max)}: reseat or service"))
        gen, gen_max = number(r["pcie.link.gen.current"]), number(r["pcie.link.gen.max"])
        if gen is not None and gen_max and gen < gen_max:
            out.append(warn("GPU_PCIE_GEN", f"{g}: PCIe gen {int(gen)} of {int(gen_max)} (normal while idle)"))
        reasons = number(r["throttle"])
        if reasons is not None and int(reasons) not in BENIGN_THROTTLE:
            out.append(warn("GPU_THROTTLE", f"{g}: clocks slowed, reasons 0x{int(reasons):x}: check cooling and power"))
    return with_passes(out, ["GPU_PERSISTENCE", "GPU_ECC_MODE", "GPU_ECC_UNCORRECTED", "GPU_RETIRED_PAGES_PENDING",
                             "GPU_PCIE_WIDTH", "GPU_PCIE_GEN", "GPU_THROTTLE"], f"all {len(rows)} GPUs")


def check_remapped_rows(node: Node) -> list[Verdict]:
    out = node.run(REMAPPED_ROWS)
    if out.rc in (2, 3):
        return [ok("GPU_REMAPPED_ROWS", "row remapping not supported by these GPUs")]
    if out.rc not in (0, 15):  # 15: a lost GPU, reported by GPU_LOST; the others are listed
        return [fail("GPU_REMAPPED_ROWS", f"nvidia-smi --query-remapped-rows exited {out.rc}: {explain_exit(out.rc)}")]
    try:
        rows = parse_query_csv(out.stdout, ["bus", "pending", "failure"]) if out.stdout.strip() else []
    except CheckError as e:
        return [fail("GPU_REMAPPED_ROWS_UNREADABLE", str(e))]
    verdicts = []
    for r in rows:
        if (r["failure"] or "").lower() in ("yes", "1"):
            verdicts.append(fail("GPU_REMAP_FAILURE", f"GPU {r['bus']}: row remapping failed: service the GPU"))
        elif (r["pending"] or "").lower() in ("yes", "1"):
            verdicts.append(fail("GPU_REMAP_PENDING", f"GPU {r['bus']}: row remapping pending: reset the GPU or reboot"))
    return verdicts or [ok("GPU_REMAPPED_ROWS", "no remapping pending or failed")]


def check_full_query(node: Node) -> list[Verdict]:
    """What only ``nvidia-smi -q`` shows: the NVLink fabric's state as each GPU sees it (Hopper and newer
    with NVSwitches, GB200's NVLink domain: registration Completed, Status Success, Health Summary
    Healthy), and an ECC mode change waiting for the next reset. A lost GPU (exit 15) is GPU_LOST's."""
    out = node.run(FULL_QUERY)
    if out.rc == 15:
        return []
    if out.rc != 0:
        return [fail("GPU_NVIDIA_SMI", f"nvidia-smi -q exited {out.rc}: {explain_exit(out.rc)}")]
    try:
        tree = nvidia_smi_q.read(out.stdout)
    except CheckError as e:
        return [fail("GPU_NVIDIA_SMI_UNREADABLE", f"nvidia-smi -q: {e}")]
    verdicts, registered = [], []
    for bus, gpu in tree["gpus"].items():
        fabric = nvidia_smi_q.fabric(gpu)
        if fabric is not None:
            health = fabric["health"] or "N/A"
            if fabric["state"] != "Completed" or fabric["status"] != "Success":
                verdicts.append(fail("GPU_FABRIC", f"GPU {bus}: NVLink fabric registration {fabric['state']} "
                                     f"(status {fabric['status']}): the GPU cannot run CUDA until it completes; check "
                                     "nvidia-fabricmanager (and, in an NVLink domain, the NVLink switch trays and IMEX)"))
            elif health not in ("Healthy", "N/A"):
                verdicts.append(fail("GPU_FABRIC", f"GPU {bus}: NVLink fabric health {health} (clique "
                                     f"{fabric['clique'] or 'N/A'}): check the NVLink switches and the fabric manager's log"))
            else:
                registered.append(bus)
        current, pending = nvidia_smi_q.ecc_mode(gpu)
        if current not in ("", "N/A") and pending not in ("", "N/A") and pending != current:
            verdicts.append(warn("GPU_ECC_MODE_PENDING", f"GPU {bus}: ECC is {current}, {pending} after the next "
                                 "reset or reboot: make sure that is wanted (nvidia-smi -e)"))
    if registered and not any(v.id == "GPU_FABRIC" for v in verdicts):
        verdicts.append(ok("GPU_FABRIC", f"{len(registered)} GPUs registered with the NVLink fabric"))
    return verdicts


def expected_nvlinks(gpu: dict) -> int | None:
    """NVLinks each GPU must list: the inventory's ``nvlinks``, else, on an NVSwitch node, the model's
    count; None: not checked. (A model name alone does not say SXM: an "h100" may be a PCIe card.)"""
    if gpu.get("nvlinks") is not None:
        return int(gpu["nvlinks"])
    return NVLINKS_PER_MODEL.get(str(gpu.get("model") or "").lower()) if gpu.get("nvswitch") else None


def check_nvlink(node: Node, expected: int | None = None, bridged: bool = False) -> list[Verdict]:
    """Every NVLink active, and each listed GPU with ``expected`` links (a GPU missing altogether is
    GPU_COUNT's). ``bridged``: PCIe cards joined by NVLink bridges, whose slots without a bridge are
    inactive by design: each GPU must have ``expected`` active links, however many it lists."""
    out = node.run(NVLINK_STATUS)
    if out.rc != 0:
        return [fail("GPU_NVLINK", f"nvidia-smi nvlink -s exited {out.rc}: {explain_exit(out.rc)}")]
    try:
        gpus = parse_nvlink_status(out.stdout)
    except CheckError as e:
        return [fail("GPU_NVLINK_UNREADABLE", str(e))]
    if bridged:
        return [_bridged(gpus, expected or 0)]
    bad, short = [], []
    for index, g in sorted(gpus.items()):
        if g["all_inactive"]:
            bad.append(f"gpu{index}: all links inactive")
        down = [str(n) for n, speed in sorted(g["links"].items()) if speed is None]
        if down:
            bad.append(f"gpu{index}: link {','.join(down)} inactive")
        if expected and not g["all_inactive"] and len(g["links"]) != expected:
            short.append(f"gpu{index} lists {len(g['links'])}")
    verdicts = [fail("GPU_NVLINK_INACTIVE", "; ".join(bad) + ": check fabric manager, reset the GPUs")] if bad \
        else [ok("GPU_NVLINK_INACTIVE", "all NVLinks active")]
    if expected:
        verdicts.append(fail("GPU_NVLINK_COUNT", f"{'; '.join(short)} NVLinks, each GPU should have {expected}: "
                             "reset the GPUs; if a link stays missing, service the baseboard") if short
                        else ok("GPU_NVLINK_COUNT", f"{expected} NVLinks per GPU"))
    return verdicts


def _bridged(gpus: dict[int, dict], expected: int) -> Verdict:
    short = []
    for index, g in sorted(gpus.items()):
        active = [n for n, speed in g["links"].items() if speed is not None]
        if len(active) < expected:
            short.append(f"gpu{index}: {len(active)} of {expected} bridged links active")
    return fail("GPU_NVLINK_INACTIVE", "; ".join(short) + ": reseat the NVLink bridges, then reset the GPUs") if short \
        else ok("GPU_NVLINK_INACTIVE", f"{expected} bridged NVLinks active per GPU")


def check_xids(node: Node, command: str, hours: float = XID_HOURS) -> list[Verdict]:
    out = node.run(command)
    text, before_reset = after_gpu_reset(recent(out.stdout, hours))
    xids = parse_xids(text)
    repaired = f"; {before_reset} GPU driver line(s) from before the last GPU reset not counted" \
        if before_reset else ""
    fatal = [x for x in xids if x.fatal]
    if fatal:
        last = fatal[-1]
        kind = "SXid" if last.nvswitch else "Xid"
        return [fail(f"GPU_XID_{last.code}", f"{len(fatal)} fatal Xid/SXid event(s) in {hours:g} h, last {kind} "
                     f"{last.code} on {last.pci}: {last.action}")]
    unknown = [x for x in xids if x.severity == "warn"]
    if unknown:
        last = unknown[-1]
        return [warn("GPU_XID", f"{'SXid' if last.nvswitch else 'Xid'} {last.code} on {last.pci} in {hours:g} h: "
                     f"{last.action if not last.nvswitch else 'its event line is missing: read the kernel log'}")]
    app = sorted({x.code for x in xids})
    return [ok("GPU_XID", f"no fatal Xid in {hours:g} h" + (f" (application Xids {app})" if app else "")
               + repaired)]


def check_service(node: Node, check_id: str, unit: str, what: str) -> Verdict:
    out = node.run(service_command(unit))
    state = out.stdout.strip() or "unknown"
    return ok(check_id, f"{unit} active") if state == "active" else \
        fail(check_id, f"{unit} is {state}: {what}")


def check_peermem(node: Node) -> Verdict:
    out = node.run(PEERMEM)
    return ok("GPU_PEERMEM", "nvidia_peermem loaded") if out.rc == 0 else \
        warn("GPU_PEERMEM", "nvidia_peermem not loaded: GPUDirect RDMA is off (modprobe nvidia_peermem)")


def check_dcgm(node: Node, level: int) -> list[Verdict]:
    out = node.run(dcgm_command(level))
    try:
        results = parse_dcgm_diag(out.stdout)
    except CheckError as e:
        return [fail("GPU_DCGM_DIAG", f"dcgmi diag -r {level} exited {out.rc}: {e}")]
    failed = [r for r in results if r.status == "fail"]
    if failed:
        return [fail("GPU_DCGM_DIAG", "; ".join(f"{r.test} on GPU {r.gpus}: {r.detail or 'Fail'}" for r in failed[:3]))]
    return [ok("GPU_DCGM_DIAG", f"dcgmi diag -r {level}: {len(results)} results, none failed")]


def commands(expect: dict) -> list[str]:
    """What ``run`` asks a healthy node, for the remote runner to fetch in one round trip (anything
    left out is still fetched, a round trip later)."""
    gpu = expect.get("gpu") or {}
    if not gpu.get("count"):
        return []
    out = [query_command(EVENTS_NEW), REMAPPED_ROWS, FULL_QUERY]
    if gpu.get("nvswitch") or expected_nvlinks(gpu):
        out.append(NVLINK_STATUS)
    if gpu.get("nvswitch"):
        out.append(service_command(FABRIC_MANAGER))
    out.append(gpu.get("kernel_log") or DEFAULT_COMMAND)
    if gpu.get("rdma"):
        out.append(PEERMEM)
    if gpu.get("dcgm_level"):
        out.append(dcgm_command(int(gpu["dcgm_level"])))
    return out + gpu_load.commands(gpu)


def run(node: Node, expect: dict) -> list[Verdict]:
    gpu = expect.get("gpu") or {}
    if not gpu.get("count"):
        return []
    rows, error = _query(node)
    if rows is None:
        return [error]
    verdicts = ([error] if error else []) + check_table(rows, gpu)
    verdicts += check_remapped_rows(node)
    verdicts += check_full_query(node)
    if gpu.get("nvswitch") or expected_nvlinks(gpu):
        verdicts += check_nvlink(node, expected_nvlinks(gpu), gpu.get("nvlink_layout") == "bridged")
    if gpu.get("nvswitch"):
        verdicts.append(check_service(node, "GPU_FABRIC_MANAGER", FABRIC_MANAGER,
                                      "start it (systemctl start nvidia-fabricmanager); GPUs cannot talk over NVSwitch"))
    verdicts += check_xids(node, gpu.get("kernel_log") or DEFAULT_COMMAND, gpu.get("xid_hours", XID_HOURS))
    if gpu.get("rdma"):
        verdicts.append(check_peermem(node))
    if gpu.get("dcgm_level"):
        verdicts += check_dcgm(node, int(gpu["dcgm_level"]))
    return verdicts + gpu_load.run(node, gpu)


DEVICE_FILE = "kiln-gpu-devices.prom"


def device_exposition(full_query: str) -> str:
    """``kiln_gpu_device_info{minor,device,UUID,pci_bus_id} 1`` per GPU from ``nvidia-smi -q``: which
    ``/dev/nvidiaN`` (Slurm's name for a job's GPU) is which UUID (dcgm-exporter's label), so kiln's job
    summary joins the two by UUID instead of assuming NVML's order is Slurm's. CheckError when the output
    is cut short."""
    out = Exposition()
    text = "1 for each GPU: its /dev/nvidiaN (minor) and UUID, from nvidia-smi -q."
    out.add("kiln_gpu_device_info", "gauge", text)
    for bus, minor, uuid in nvidia_smi_q.devices(nvidia_smi_q.read(full_query)):
        out.add("kiln_gpu_device_info", "gauge", text, 1,
                {"minor": str(minor), "device": f"nvidia{minor}", "UUID": uuid, "pci_bus_id": bus})
    return out.text()

