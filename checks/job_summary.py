"""kiln's job summary: Slurm's EpilogSlurmctld on the controller records what a finished job's GPUs did
(mean utilization and memory use over the job's life, from Prometheus' dcgm-exporter series) in the
job's ``AdminComment``, as Princeton's jobstats does: it lives in Slurm's accounting with the job, needs
no database of its own, and ``kiln usage`` reads it with the job (``kiln:gpu_util=63.5,...``), written with
``sacctmgr update job`` as jobstats does (slurmctld no longer takes updates of a finished job).

The job's GPUs per node come from ``scontrol show job -d`` (``GRES=gpu:h100:2(IDX:0-1)``): Slurm's index
into gres.conf's /dev/nvidia0.., so a minor number, matched with dcgm-exporter's series by UUID through
the node's ``kiln_gpu_device_info`` (``query``). Slurm shows them only while the job holds them, so the
same program runs as PrologSlurmctld too (``--start``) and keeps them in JOBS/<id>.json for the epilog. A job that never got a GPU, or whose GPUs have no
samples (shorter than one scrape), gets no figure. Standard library only (the controller's python3);
pure parsers, and ``main`` apart. Run as SlurmUser: the Prometheus password it reads is slurm's own copy
(/etc/slurm/kiln-prometheus.password, 0600).

Each finished GPU job is also added to per-account counters (JOBS/usage-counters.json: jobs, GPU-seconds,
measured and useful GPU-seconds, cost from the price of its node's type), which kiln's Slurm collector
(checks/slurm_metrics.py) exports as ``kiln_usage_*_total``: ``kiln usage``'s figures in Prometheus,
counted when a job ends.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
from datetime import datetime

from checks.alertmanager import AlertmanagerError, request
from checks.parsers.hostlist import expand_hostlist
from checks.parsers.scontrol import SlurmRecordError, show_job, show_job_command
from checks.parsers.slurm_values import BILLING_UNITS, SLURM_ENV, count as tres_count_of, epoch, tres

CONFIG = "/etc/slurm/kiln-job-summary.json"
JOBS = "/var/lib/kiln/jobs"  # slurm's: what each running job holds, from its prolog to its epilog
COUNTERS = os.path.join(JOBS, "usage-counters.json")
PREFIX = "kiln:"


def _indices(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        if re.fullmatch(r"\d{1,3}-\d{1,3}", part):
            a, b = (int(x) for x in part.split("-"))
            out += list(range(a, b + 1))
        elif re.fullmatch(r"\d{1,3}", part):
            out.append(int(part))
    return out


def parse_job(text: str) -> dict:
    """From ``scontrol show job -d ID`` (run with TZ=UTC): start and end (epoch seconds), the account,
    and {node: [GPU indices]} for every node of the job that held GPUs. Read by the one record reader
    (checks/parsers/scontrol.py): a job name or comment holding `` Account=other`` or
    `` StartTime=2000-01-01T00:00:00`` is the name's text, and a record such text makes ambiguous raises
    SlurmRecordError instead of being guessed."""
    job = show_job(text)
    allowed = set(expand_hostlist(str(job.get("NodeList", ""))))
    gpus: dict[str, list[int]] = {}
    for line in job["Nodes"]:
        m = re.fullmatch(r"Nodes=(\S+) .*?GRES=(\S+)", line)
        if not m:
            continue
        idx = [i for g in re.findall(r"gpu(?::[^:(,]+)?:\d+\(IDX:([0-9,-]+)\)", m.group(2)) for i in _indices(g)]
        for node in expand_hostlist(m.group(1)) if idx else []:
            if node not in allowed or node in gpus:
                raise SlurmRecordError(f"GRES line for {node!r}, which is not one of the job's nodes once")
            gpus[node] = idx
    times = {key: epoch(str(job.get(key, ""))) for key in ("StartTime", "EndTime")}
    account, partition = str(job.get("Account", "")), str(job.get("Partition", ""))
    held = tres(str(job.get("TRES", "")))
    return {"start": times["StartTime"], "end": times["EndTime"], "gpus": gpus,
            "account": account if re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", account) else "",
            "partition": partition if re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", partition) else "",
            "billing": tres_count_of(held["billing"]) if "billing" in held else None}


def _label(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,128}", value):
        raise ValueError(f"unexpected node name {value!r}")
    return value


def query(metric: str, gpus: dict[str, list[int]], seconds: int) -> str:
    """The mean of ``metric`` over the job's GPUs and the last ``seconds``, as one PromQL expression. Slurm
    names a job's GPUs by their index in gres.conf's ``File=/dev/nvidia[0-N]``, i.e. by minor number;
    dcgm-exporter names them by NVML's index (PCI order) and UUID, and the two orders differ on real nodes.
    The node's ``kiln_gpu_device_info`` (checks/gpu.py, from ``nvidia-smi -q``) says which UUID is which
    /dev/nvidiaN: the job's series are found by UUID through it, never by assuming the orders agree."""
    parts = [f'avg_over_time({metric}{{node="{_label(n)}"}}[{seconds}s]) * on(node, UUID) '
             f'kiln_gpu_device_info{{node="{_label(n)}",minor=~"{"|".join(str(i) for i in idx)}"}}'
             for n, idx in sorted(gpus.items())]
    return "avg(" + " or ".join(f"({p})" for p in parts) + ")"


# What "busy" means, best first: the share of time the GPU's graphics/compute engine was active (DCGM's
# profiling field, a ratio), else NVML's utilization (percent of time any kernel ran: 100 for a job that
# keeps one tiny kernel running). The AdminComment says which one measured the job (util_by).
ACTIVITY = (("gr_engine_active", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", 100.0), ("gpu_util", "DCGM_FI_DEV_GPU_UTIL", 1.0))


def summary(util: float | None, mem: float | None, gpus: dict[str, list[int]], seconds: int,
            util_by: str | None = None) -> str:
    """``kiln:gpu_util=63.5,gpu_mem_util=41.0,gpus=2,seconds=600,util_by=gr_engine_active``: plain key=value
    words (sacctmgr turns quotes into backticks, so no JSON)."""
    fields = {"gpu_util": None if util is None else round(util, 1),
              "gpu_mem_util": None if mem is None else round(mem, 1),
              "gpus": sum(len(v) for v in gpus.values()), "seconds": seconds,
              "util_by": util_by if util is not None else None}
    return PREFIX + ",".join(f"{k}={v}" for k, v in fields.items() if v is not None)


def add_job(counters: dict, account: str, gpus: int, seconds: int, util: float | None, price: float,
            billing: int | None = None) -> dict:
    """``counters`` (account -> figures) with one finished job added: its GPU-seconds, the measured and
    useful (x utilization) GPU-seconds when measured, and its cost: Slurm's ``billing`` where its partition
    is billed by kiln's weights (kiln/usage/billing.py, as kiln usage charges it), else GPU-hours x its
    node type's price."""
    acc = counters.setdefault(account, {"jobs": 0, "gpu_seconds": 0.0, "measured_gpu_seconds": 0.0,
                                        "useful_gpu_seconds": 0.0, "cost": 0.0})
    gpu_seconds = float(gpus * seconds)
    acc["jobs"] += 1
    acc["gpu_seconds"] += gpu_seconds
    if util is not None:
        acc["measured_gpu_seconds"] += gpu_seconds
        acc["useful_gpu_seconds"] += gpu_seconds * util / 100
    acc["cost"] += billing * seconds / 3600 / BILLING_UNITS if billing is not None else gpu_seconds / 3600 * price
    return counters


def count(config: dict, info: dict, seconds: int, util: float | None) -> None:
    """Add the job to COUNTERS, under a lock (epilogs of several jobs run at once), replaced whole."""
    account = info.get("account") or "unknown"
    prices = config.get("node_prices", {})
    price = next((prices[n] for n in sorted(info["gpus"]) if n in prices), 0.0)
    with open(COUNTERS + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(COUNTERS) as f:
                counters = json.load(f)
            if not isinstance(counters, dict):
                counters = {}
        except (OSError, ValueError):
            counters = {}  # none yet, or unreadable: start again (Prometheus reads a counter reset)
        billed = info.get("partition") in config.get("billed_partitions", ()) and info.get("billing") is not None
        add_job(counters, account, sum(len(v) for v in info["gpus"].values()), seconds, util, float(price),
                info["billing"] if billed else None)
        with open(COUNTERS + ".tmp", "w") as f:
            json.dump(counters, f, sort_keys=True)
        os.chmod(COUNTERS + ".tmp", 0o644)
        os.replace(COUNTERS + ".tmp", COUNTERS)


def _ask(config: dict, promql: str, at: float) -> float | None:
    """Prometheus' one value of ``promql`` at ``at`` (None: no series), over HTTPS trusting the cluster CA where
    the config names it (``prometheus_url``, ``ca_file``)."""
    password = open(config["password_file"]).read().strip()
    url = f"{config['prometheus_url']}/api/v1/query?" + urllib.parse.urlencode({"query": promql, "time": f"{at:.0f}"})
    try:
        answer = request(url, password, ca_file=config.get("ca_file"))
    except AlertmanagerError as e:
        raise ValueError(str(e)) from None
    result = answer.get("data", {}).get("result") if isinstance(answer, dict) else None
    if not isinstance(result, list) or (result and not (
            isinstance(result[0], dict) and isinstance(result[0].get("value"), list) and len(result[0]["value"]) == 2)):
        raise ValueError(f"Prometheus answered something of another shape: {str(answer)[:120]}")
    return float(result[0]["value"][1]) if result else None


def record(job: str, text: str, env: dict) -> bool:
    """Into the job's AdminComment in Slurm's accounting (``sacctmgr update job``, as SlurmUser: a
    finished job is no longer slurmctld's to update). The job's end reaches slurmdbd a moment after the
    epilog starts: a few tries."""
    for _ in range(10):
        out = subprocess.run(["sacctmgr", "-i", "update", "job", "where", f"jobid={job}", "set", f"AdminComment={text}"],
                             capture_output=True, text=True, timeout=30, env=env)
        if out.returncode == 0 and "Modified" in out.stdout:
            return True
        time.sleep(1)
    print(f"kiln-job-summary: job {job}: sacctmgr did not take the summary: {(out.stderr or out.stdout).strip()[:200]}",
          file=sys.stderr)
    return False


def main(argv: list[str] | None = None) -> int:
    """``--start`` (PrologSlurmctld): keep the job's GPUs. Otherwise (EpilogSlurmctld): ask Prometheus
    and write the job's AdminComment. Never fails: a job is not held or requeued for its report."""
    args = argv if argv is not None else sys.argv[1:]
    job = os.environ.get("SLURM_JOB_ID", "")
    if not re.fullmatch(r"\d{1,12}", job):
        return 0
    env = {**os.environ, **SLURM_ENV}  # Slurm's times read as UTC
    kept = os.path.join(JOBS, f"{job}.json")
    try:
        shown = subprocess.run(show_job_command(job), capture_output=True, text=True, timeout=30,
                               env=env)
        info = parse_job(shown.stdout)
        told = os.environ.get("SLURM_JOB_ACCOUNT", "")  # slurmctld's own word, where it gives one
        if told and info["account"] and told.lower() != info["account"].lower():
            raise SlurmRecordError(f"scontrol says account {info['account']!r}, slurmctld {told!r}")
        if "--start" in args:
            if info["gpus"]:
                with open(kept + ".tmp", "w") as f:
                    json.dump(info["gpus"], f)
                os.replace(kept + ".tmp", kept)
            return 0
        try:
            with open(kept) as f:
                info["gpus"] = info["gpus"] or json.load(f)
            os.unlink(kept)
        except (OSError, ValueError):
            pass
        if not info["gpus"] or info["start"] is None:
            return 0  # no GPUs, or never started: nothing to say
        end = info["end"] or datetime.now().timestamp()
        seconds = max(1, int(end - info["start"]))
        with open(CONFIG) as f:
            config = json.load(f)
        util, util_by = None, None
        for name, metric, scale in ACTIVITY:
            value = _ask(config, query(metric, info["gpus"], seconds), end)
            if value is not None:
                util, util_by = min(100.0, value * scale), name
                break
        used = _ask(config, query("DCGM_FI_DEV_FB_USED", info["gpus"], seconds), end)
        free = _ask(config, query("DCGM_FI_DEV_FB_FREE", info["gpus"], seconds), end)
        mem = 100 * used / (used + free) if used is not None and free is not None and used + free > 0 else None
        record(job, summary(util, mem, info["gpus"], seconds, util_by), env)
        count(config, info, seconds, util)
    except (OSError, ValueError, KeyError, subprocess.SubprocessError) as e:  # SlurmRecordError among them
        print(f"kiln-job-summary: job {job}: no GPU figures ({e})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
