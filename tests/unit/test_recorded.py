"""tests/recorded/captured: every row of SOURCES.md names a file (or tree) that is there, and every file
there has its row; kiln-made cases say so."""

from __future__ import annotations

import os
import re

from tests.conftest import REPO

CAPTURED = REPO / "tests" / "recorded" / "captured"


def rows() -> list[str]:
    return re.findall(r"^\| `([^`]+)` \|", (CAPTURED / "SOURCES.md").read_text(), re.M)


def test_every_row_names_a_file_that_is_there():
    missing = [r for r in rows() if not (CAPTURED / r.split(" ")[0]).exists()]
    assert not missing, missing


def test_every_file_has_its_row():
    named = [r.split(" ")[0] for r in rows()]
    files = [os.path.relpath(os.path.join(top, f), CAPTURED) for top, _, names in os.walk(CAPTURED) for f in names
             if f != "SOURCES.md"]
    orphans = [f for f in files if not any(f == n or f.startswith(n.rstrip("/") + "/") for n in named)]
    assert not orphans, orphans
    made = [line for line in (CAPTURED / "SOURCES.md").read_text().splitlines() if line.startswith("| `kiln-made-")
            or line.startswith("| `") and "/kiln-made-" in line.split("|")[1]]
    assert made and all("| made by kiln |" in line for line in made)
