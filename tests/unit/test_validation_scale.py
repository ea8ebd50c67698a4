"""Every validation check is linear in the inventory's size: each check is timed on lists of teams, QoS and
Alertmanager receivers at 1x and 10x (a check that scans a list once per item takes 100 times as long).
The whole validation of 20,000 of each, against the target of 5 s, is measured by
benchmarks/validation_lists.py (a speed target is a benchmark's, not a timed test's)."""

from __future__ import annotations

import functools
import gc
import shutil
import time
from collections import defaultdict

import pytest

from kiln.inventory import cluster_checks, identities, monitoring_checks, validate
from tests.conftest import REPO

SMALL = REPO / "tests" / "inventories" / "small"
CHECK_MODULES = (cluster_checks, identities, monitoring_checks)


def write_inventory(root, teams: int = 0, qos: int = 0, receivers: int = 0):
    shutil.copytree(SMALL, root)
    lines = []
    if teams:
        lines.append("kiln_teams:")
        lines += [f"  - {{name: t{i:05d}, shares: 1, users: [{{name: u{i:05d}, uid: {10000 + i}}}]}}"
                  for i in range(teams)]
    if qos:  # a chain of preemption: the worst case for a search from every QoS
        lines.append("kiln_qos:")
        lines += [f"  - {{name: q{i:05d}" + (f", preempt: [q{i + 1:05d}]}}" if i + 1 < qos else "}")
                  for i in range(qos)]
    if receivers:
        lines.append("kiln_monitoring_receivers:")
        lines += [f"  - {{name: r{i:05d}, webhook_url: 'http://hooks.example.org/{i}'}}" for i in range(receivers)]
    cluster = root / "group_vars" / "all" / "cluster.yml"
    text = cluster.read_text()
    if teams:  # the scale file's teams replace the small inventory's two
        text = text[:text.index("kiln_teams:")] + text[text.index("kiln_storage_mounts:"):]
    cluster.write_text(text)
    (root / "group_vars" / "all" / "scale.yml").write_text("\n".join(lines) + "\n")
    return root


def _timed(monkeypatch) -> dict[str, float]:
    """Each check's CPU time (this thread's, not the wall clock's): the other lane's testbed and anything else
    on the machine's cores then add nothing to a check's figure (CI once saw a 1x run timed idle and its
    10x run timed beside a burst of load, past the limit)."""
    spent: dict[str, float] = defaultdict(float)
    for module in CHECK_MODULES:
        for name in [n for n in dir(module) if n.startswith("check_")]:
            original = getattr(module, name)

            @functools.wraps(original)
            def timed(*args, _original=original, _name=f"{module.__name__}.{name}", **kwargs):
                t0 = time.thread_time()
                try:
                    return _original(*args, **kwargs)
                finally:
                    spent[_name] += time.thread_time() - t0
            monkeypatch.setattr(module, name, timed)
    return spent


@pytest.mark.parametrize("what", ["teams", "qos", "receivers"])
def test_each_validation_check_is_linear(tmp_path, monkeypatch, what):
    spent = _timed(monkeypatch)
    times: dict[int, dict[str, float]] = {}
    gc.disable()  # a collection of the whole inventory's objects lands in whichever check runs then
    try:
        for scale in (1_000, 10_000):
            root = write_inventory(tmp_path / f"{what}{scale}", **{what: scale})
            for _ in range(3):  # the best of three
                spent.clear()
                errors = validate(root)[1]
                assert not errors, errors[:3]
                times[scale] = {k: min(v, times.get(scale, {}).get(k, v)) for k, v in spent.items()}
    finally:
        gc.enable()
    for name, small in times[1_000].items():
        big = times[10_000][name]
        # linear: about 10x; quadratic: about 100x. Checks under 20 ms at 10x are below the clock's noise.
        assert big < 0.02 or big < 30 * max(small, 1e-3), f"{name}: {small:.3f} s at 1x, {big:.3f} s at 10x"
