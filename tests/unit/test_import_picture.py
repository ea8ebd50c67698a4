"""Which way the imports run (the design's rules): read from the source with ``ast``, every import counted,
also those inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

PACKAGES = ("kiln", "roles", "checks", "templates")


def _module(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """module -> the kiln-project modules it imports."""
    found: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if "simulators" in path.parts:
                continue
            name, targets = _module(path), set()
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    targets |= {a.name for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    # ``from kiln.cli import check``: the module kiln.cli.check (its package is the parent)
                    subs = {f"{node.module}.{a.name}" for a in node.names}
                    known = {s for s in subs if (REPO / s.replace(".", "/")).with_suffix(".py").exists()}
                    targets |= known or {node.module}
            found[name] = {t for t in targets if t.split(".")[0] in PACKAGES + ("tests",)}
    return found


def test_inventory_loading_never_imports_checks_the_cli_or_pyinfra_runs():
    for name, targets in imports().items():
        if name.startswith("kiln.inventory"):
            bad = {t for t in targets if t.startswith(("checks", "kiln.cli", "kiln.deploy", "kiln.check", "roles"))}
            assert not bad, f"{name} imports {sorted(bad)}"


def test_parsers_are_pure_and_roles_never_import_the_cli_testbed_or_check_suites():
    """Roles read Slurm's answers (sacctmgr) with the one reader of each, in checks.parsers; never a suite."""
    for name, targets in imports().items():
        if name.startswith("checks.parsers"):
            assert all(t.startswith(("checks.parsers", "checks.verdict")) for t in targets), (name, targets)
        if name.startswith("checks"):
            assert not any(t.startswith(("kiln", "roles")) for t in targets), (name, targets)
        if name.startswith("roles"):
            bad = {t for t in targets if t.startswith(("kiln.cli", "kiln.testbed", "checks"))
                   and not t.startswith(("checks.parsers", "checks.version"))}
            assert not bad, f"{name} imports {sorted(bad)}"


def test_nothing_imports_the_cli_and_the_product_never_imports_tests():
    for name, targets in imports().items():
        assert not any(t.startswith("tests") for t in targets), (name, targets)
        if not name.startswith("kiln.cli") and name != "kiln.__main__":
            assert not any(t.startswith("kiln.cli") for t in targets), (name, targets)


def test_no_import_circle_in_the_cli():
    graph = {n: {t for t in ts if t.startswith("kiln.cli") and t in imports_modules()} for n, ts in imports().items()
             if n.startswith("kiln.cli")}

    def visit(node: str, path: list[str]) -> None:
        assert node not in path, " -> ".join(path + [node])
        for nxt in graph.get(node, ()):
            visit(nxt, path + [node])

    for start in graph:
        visit(start, [])


def imports_modules() -> set[str]:
    return set(imports())


def test_images_never_import_the_testbed():
    """The base of each OS is an image (kiln/image/base.py); the testbed boots images and bases, never the
    other way round: no circle between the two for a second OS to widen."""
    for name, targets in imports().items():
        if name.startswith("kiln.image"):
            assert not any(t.startswith("kiln.testbed") for t in targets), (name, targets)
