"""The suites by name, and the one function both runners call."""

from __future__ import annotations

import traceback

from checks import fabric, gpu, slurm, storage, system
from checks.node import Node
from checks.verdict import Verdict, fail

SUITES = {"gpu": gpu.run, "fabric": fabric.run, "storage": storage.run, "slurm": slurm.run, "system": system.run}


def run_suites(node: Node, expect: dict, names: list[str] | None = None) -> list[Verdict]:
    """Every verdict of the named suites (all by default) on ``node``. A suite that crashes gives a failing
    ``<SUITE>_CHECK_CRASHED`` verdict with the error, never a pass and never a crash of the runner."""
    verdicts: list[Verdict] = []
    for name in names or list(SUITES):
        try:
            found = SUITES[name](node, expect)
        except Exception as e:  # a bug or an unexpected tool state must show, on this node only
            tb = traceback.extract_tb(e.__traceback__)[-1]
            found = [fail(f"{name.upper()}_CHECK_CRASHED", f"{type(e).__name__}: {e} ({tb.filename.split('/')[-1]}:"
                          f"{tb.lineno}): report this as a kiln bug")]
        verdicts += [Verdict(v.id, v.severity, v.message, name) for v in found]
    return verdicts
