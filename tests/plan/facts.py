"""Fresh-node facts per OS, as ``NodeSnapshot``s. Debian 12's and Debian 13's are recorded from testbed
nodes (tests/recorded/); the others list what a minimal install of that OS has, for the parts kiln reads."""

from __future__ import annotations

import json

from roles.snapshot import Account, FileState, NodeSnapshot, parse_snapshot
from tests.conftest import REPO


def _minimal(packages: dict[str, str]) -> NodeSnapshot:
    return NodeSnapshot(
        packages=packages,
        users={"root": Account(0, 0, "/root", "/bin/bash")},
        groups={"root": (0, set())},
        files={"/etc/hosts": FileState("regular file", "644", "root", "root", "0" * 40),
               "/etc/pam.d/sshd": FileState("regular file", "644", "root", "root", "1" * 40)},
    )


def fresh(os: str) -> NodeSnapshot:
    if os in ("debian12", "debian13"):
        rec = json.loads((REPO / "tests" / "recorded" / f"snapshot-fresh-compute-{os}.json").read_text())
        return parse_snapshot(rec["output"].splitlines())
    if os.startswith("ubuntu"):
        return _minimal({"openssh-server": "1:8.9p1-3ubuntu0.10", "systemd": "249.11-0ubuntu3.12",
                         "python3": "3.10.6-1~22.04"})
    return _minimal({"openssh-server": "8.7p1-38.el9", "systemd": "252-32.el9_4", "python3": "3.9.18-3.el9",
                     "dnf": "4.14.0-9.el9"})
