"""pytest entry of ``kiln check``: one test per node and suite, each failing with the suite's failing
verdicts. Nodes are checked in parallel over SSH (testinfra, strict host keys) by the ``kiln_check``
fixture that ``kiln check`` provides; run it through ``kiln check``, not bare pytest."""

from __future__ import annotations


def test_suite(kiln_check, node_name, suite):
    verdicts = kiln_check.verdicts(node_name, suite)
    failed = [v for v in verdicts if v.failed]
    assert not failed, "\n".join(f"{v.id}: {v.message}" for v in failed)
