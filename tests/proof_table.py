"""The README's table of what is proven on which OS, and how: made from the tests themselves.

A test says what it proves with ``@pytest.mark.proves(*subjects, tier=..., os=...)`` (or a module's
``pytestmark``): the roles and kiln commands it exercises, the tier (``plan``: reviewed op lists from
recorded facts, no machine; ``nspawn``: live on container nodes; ``vm``: live on QEMU VMs with their own
kernel; ``gpu``: on a machine with a real NVIDIA GPU) and the OS (a test parametrized by ``os`` proves
each of its OSes; otherwise ``os``, default Debian 12, the testbed's). This module collects the test
suite (``pytest --collect-only``, nothing runs) and writes the table between its two marker lines in
README.md:

    python -m tests.proof_table            # print the table
    python -m tests.proof_table --write    # write it into README.md

tests/unit/test_proof_table.py fails when README.md and the tests disagree.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
BEGIN, END = "<!-- proof-table: begin (python -m tests.proof_table --write) -->", "<!-- proof-table: end -->"
OSES = ("debian12", "debian13", "ubuntu2204", "ubuntu2404", "rocky9")
OS_NAMES = {"debian12": "Debian 12", "debian13": "Debian 13", "ubuntu2204": "Ubuntu 22.04",
            "ubuntu2404": "Ubuntu 24.04", "rocky9": "Rocky 9"}
TIERS = ("plan", "nspawn", "vm", "gpu")
# The rows, in the order an operator meets them: roles, then what kiln does with a deployed cluster.
SUBJECTS = ("base", "slurm", "slurm accounting", "gpu gres", "nvidia_driver", "cuda", "nccl", "dcgm",
            "fabricmanager", "rdma", "storage", "storage_server", "disk encryption", "health", "containers", "monitoring",
            "remediation", "firewall", "isolation", "kiln check", "kiln patch", "slurm upgrade", "images", "drift")


class _Collector:
    """A pytest plugin: every collected test's ``proves`` marks, with the OS each one is for."""

    def __init__(self) -> None:
        self.found: list[dict] = []

    def pytest_collection_modifyitems(self, items) -> None:
        for item in items:
            for mark in item.iter_markers("proves"):
                params = getattr(getattr(item, "callspec", None), "params", {})
                os = mark.kwargs.get("os") or params.get("os") or "debian12"
                subjects = list(mark.args)
                if mark.kwargs.get("plan"):
                    subjects += plan_roles(REPO / "tests" / "plan" / "expected" / mark.kwargs["plan"].format(os=os))
                self.found.append({"test": item.nodeid, "subjects": subjects, "tier": mark.kwargs["tier"], "os": os})


def plan_roles(path: Path) -> list[str]:
    """The roles a reviewed op list has operations of (an operation's name begins with its role)."""
    names: set[str] = set()

    def walk(value) -> None:
        if isinstance(value, list):
            if len(value) == 2 and isinstance(value[0], str) and isinstance(value[1], list) and ": " in value[0]:
                names.add(value[0].split(": ", 1)[0])
            for v in value:
                walk(v)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)

    walk(json.loads(path.read_text()))
    return sorted(names & set(SUBJECTS))


def collect() -> list[dict]:
    """The suite's ``proves`` marks, collected in a separate process (no test runs)."""
    script = ("import json, sys, pytest\n"
              "from tests.proof_table import _Collector\n"
              "c = _Collector()\n"
              "rc = pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', 'tests'], plugins=[c])\n"
              "sys.stderr.flush()\n"
              "print('@@proofs ' + json.dumps(c.found))\n"
              "sys.exit(0 if rc in (0, 5) else rc)\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    lines = [line for line in out.stdout.splitlines() if line.startswith("@@proofs ")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"collecting the tests failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return json.loads(lines[-1].removeprefix("@@proofs "))


def table(found: list[dict]) -> str:
    for proof in found:
        unknown = set(proof["subjects"]) - set(SUBJECTS)
        if unknown or proof["tier"] not in TIERS or proof["os"] not in OSES:
            raise ValueError(f"{proof['test']}: proves {sorted(unknown)} tier {proof['tier']!r} os {proof['os']!r}: "
                             f"subjects are {', '.join(SUBJECTS)}; tiers {', '.join(TIERS)}; OSes {', '.join(OSES)}")
    cells: dict[tuple[str, str], set[str]] = {}
    for proof in found:
        for subject in proof["subjects"]:
            cells.setdefault((subject, proof["os"]), set()).add(proof["tier"])
    label = {"plan": "plan", "nspawn": "nspawn", "vm": "VM", "gpu": "GPU"}
    lines = ["| role or command | " + " | ".join(OS_NAMES[o] for o in OSES) + " |",
             "|---|" + "---|" * len(OSES)]
    for subject in SUBJECTS:
        row = [" · ".join(label[t] for t in TIERS if t in cells.get((subject, o), ())) or "–" for o in OSES]
        lines.append(f"| {subject} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def readme_with(text: str, readme: str) -> str:
    head, begin, rest = readme.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"README.md has no {BEGIN!r} ... {END!r} section")
    return f"{head}{BEGIN}\n{text}{END}{tail}"


def main(argv: list[str]) -> int:
    text = table(collect())
    if "--write" in argv:
        README.write_text(readme_with(text, README.read_text()))
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
