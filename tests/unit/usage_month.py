"""A month of Slurm accounting as sacct and sacctmgr print it, made up with a fixed seed: the usage
report's page test, its screenshot in docs/ and benchmarks/usage_report.py read it.

``write_inventory`` writes a cluster of 64 GPU nodes (two node types, prices for both) and six teams;
``sacct_month`` gives N jobs of that cluster in November 2026 in ``kiln.usage.sacct.FIELDS`` order (about
four in five measured by kiln-job-summary, a few with hostile names); ``reservations_month`` two
reservations, one of them half used.
"""

from __future__ import annotations

import random
from datetime import datetime, timezone
from pathlib import Path

TEAMS = (("vision", 30, 32), ("language", 25, 32), ("speech", 15, 16), ("robotics", 10, 8),
         ("bio", 10, 8), ("infra", 10, None))
START = datetime(2026, 11, 1, tzinfo=timezone.utc).timestamp()
END = datetime(2026, 12, 1, tzinfo=timezone.utc).timestamp()
HOSTILE_NAMES = ("<script>alert(1)</script>", "</svg><img src=x onerror=alert(1)>", "a|b|c", "$(reboot)",
                 "\u202eevil", "train\"; rm -rf /")


def write_inventory(root: Path) -> Path:
    """The cluster of the month: h100[001-032] (type h100, 4.10 per GPU-hour) and a100[001-032] (type
    a100, 2.20), 8 GPUs each."""
    (root / "group_vars" / "all").mkdir(parents=True)
    hosts = ["all:", "  children:", "    slurm_controller:", "      hosts:", "        ctl1: {ansible_host: 10.0.0.1}",
             "    compute:", "      children:"]
    for i, kind in enumerate(("h100", "a100")):
        hosts += [f"        {kind}:", "          hosts:"]
        hosts += [f"            {kind}{n:03d}: {{ansible_host: 10.0.{i + 1}.{n}}}" for n in range(1, 33)]
    (root / "hosts.yml").write_text("\n".join(hosts) + "\n")
    for kind, model in (("h100", "H100"), ("a100", "A100")):
        (root / "group_vars" / f"{kind}.yml").write_text(
            f"kiln_cpus: 96\nkiln_memory_mb: 1000000\nkiln_gpu_count: 8\nkiln_gpu_model: {model.lower()}\n")
    (root / "group_vars" / "all" / "versions.yml").write_text(
        (Path(__file__).resolve().parents[1] / "inventories" / "small" / "group_vars" / "all" / "versions.yml").read_text())
    teams = []
    for t, (name, shares, limit) in enumerate(TEAMS):
        teams.append(f"  - name: {name}\n    shares: {shares}\n" + (f"    gpu_limit: {limit}\n" if limit else "")
                     + f"    users: [{', '.join(f'{{name: {name[:3]}{u}, uid: {4000 + 10 * t + u}}}' for u in range(4))}]")
    (root / "group_vars" / "all" / "cluster.yml").write_text(
        "kiln_cluster_name: month\nkiln_teams:\n" + "\n".join(teams) + "\n"
        "kiln_usage_gpu_hour_prices: {h100: 4.10, a100: 2.20}\nkiln_usage_currency: EUR\n"
        # one partition per node type: Slurm bills a partition by one set of weights
        "kiln_slurm_partitions: [{name: h100, groups: [h100], default: true}, {name: a100, groups: [a100]}]\n")
    return root


PRICES = {"h100": 4.10, "a100": 2.20}  # as kiln_usage_gpu_hour_prices: a job of 12 CPUs a GPU bills its GPUs


def _stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


def sacct_month(jobs: int, seed: int = 7) -> str:
    """``jobs`` job lines of the month, as ``sacct -a -X -n -P --noconvert -o FIELDS`` prints them (UTC)."""
    rnd = random.Random(seed)
    lines = []
    for job_id in range(1, jobs + 1):
        team = TEAMS[rnd.randrange(len(TEAMS))][0]
        user = f"{team[:3]}{rnd.randrange(4)}"
        kind = rnd.choice(("h100", "a100"))
        gpus = rnd.choice((1, 1, 2, 4, 8))
        nodes = max(1, gpus // 8)
        first = rnd.randrange(1, 33 - nodes + 1)
        nodelist = f"{kind}{first:03d}" if nodes == 1 else f"{kind}[{first:03d}-{first + nodes - 1:03d}]"
        submit = START - 86400 + rnd.random() * (END - START + 86400)
        start = submit + rnd.expovariate(1 / 1800)
        length = rnd.choice((300, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600)) * (0.5 + rnd.random())
        end = start + length
        state, end_text = "COMPLETED", _stamp(end)
        if end > END:
            state, end_text = "RUNNING", "Unknown"
        elif rnd.random() < 0.08:
            state = rnd.choice(("FAILED", "CANCELLED by 4001", "TIMEOUT", "OUT_OF_MEMORY"))
        util = rnd.choice((None, 95.0, 80.5, 60.0, 35.0, 5.0, 0.0))
        comment = (f"kiln:gpu_util={util},gpu_mem_util={util / 2},gpus={gpus},seconds={int(length)}"
                   if util is not None and state != "RUNNING" else "")
        name = rnd.choice(HOSTILE_NAMES) if rnd.random() < 0.01 else rnd.choice(("train", "eval", "sweep", "prep"))
        reservation = "vision-sprint" if team == "vision" and rnd.random() < 0.05 else ""
        cpus = gpus * 12
        lines.append("|".join((
            str(job_id), user, team, "normal", kind, state, _stamp(submit), _stamp(submit), _stamp(start), end_text,
            str(int(min(end, END) - start)),
            f"billing={round(gpus * PRICES[kind] * 100)},cpu={cpus},gres/gpu:{kind}={gpus},gres/gpu={gpus},mem={gpus * 64}G,node={nodes}",
            nodelist, reservation, comment, "", name)))
    return "\n".join(lines) + "\n"


def reservations_month() -> str:
    """``sacctmgr -nP show reservation format=Name,Start,End,TRES,NodeNames,Flags`` for the month."""
    return ("vision-sprint|2026-11-10T00:00:00|2026-11-17T00:00:00|cpu=384|h100[001-004]|SPEC_NODES\n"
            "maint-nov|2026-11-20T06:00:00|2026-11-20T10:00:00|cpu=3072|a100[001-032]|MAINT,IGNORE_JOBS,SPEC_NODES\n")
