"""The suites by name, and the one function both runners call."""

from __future__ import annotations

import concurrent.futures
import traceback

from checks import drift, fabric, gpu, isolation, logs, monitoring, slurm, storage, system, workload, zones
from checks.node import Node
from checks.verdict import Verdict, fail

SUITES = {"gpu": gpu.run, "fabric": fabric.run, "storage": storage.run, "slurm": slurm.run, "system": system.run,
          "drift": drift.run, "monitoring": monitoring.run, "logs": logs.run, "isolation": isolation.run, "zones": zones.run,
          "workload": workload.run}
COMMANDS = {"gpu": gpu.commands, "fabric": fabric.commands, "storage": storage.commands, "slurm": slurm.commands,
            "system": system.commands, "drift": drift.commands, "monitoring": monitoring.commands, "logs": logs.commands,
            "isolation": isolation.commands, "zones": zones.commands,
            "workload": workload.commands}
# Run only when named (kiln check --suite): they load the nodes (the workload suite trains on each one)
OPT_IN = ("workload",)


def suite_commands(expect: dict, names: list[str] | None = None) -> list[str]:
    """Every command the named suites ask a healthy node, once each, in suite order: what the remote
    runner fetches in its first round trip."""
    found: dict[str, None] = {}
    for name in names or list(SUITES):
        found.update(dict.fromkeys(COMMANDS[name](expect)))
    return list(found)


def _one(name: str, node: Node, expect: dict) -> list[Verdict]:
    try:
        found = SUITES[name](node, expect)
    except Exception as e:  # a bug or an unexpected tool state must show, on this node only
        tb = traceback.extract_tb(e.__traceback__)[-1]
        found = [fail(f"{name.upper()}_CHECK_CRASHED", f"{type(e).__name__}: {e} ({tb.filename.split('/')[-1]}:"
                      f"{tb.lineno}): report this as a kiln bug")]
    return [Verdict(v.id, v.severity, v.message, name) for v in found]


def run_suites(node: Node, expect: dict, names: list[str] | None = None, parallel: bool = False) -> list[Verdict]:
    """Every verdict of the named suites (all by default) on ``node``, in suite order; ``parallel`` runs
    the suites in threads (the node-local runner: its commands are local processes). A suite that crashes
    gives a failing ``<SUITE>_CHECK_CRASHED`` verdict, never a pass and never a crash of the runner."""
    names = names or list(SUITES)
    if not parallel:
        return [v for name in names for v in _one(name, node, expect)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(names)) as pool:
        results = list(pool.map(lambda n: _one(n, node, expect), names))
    return [v for found in results for v in found]
