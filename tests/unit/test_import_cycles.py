"""No import cycle among kiln's own modules, counting imports inside functions too: a cycle hidden in a
function-level import works until the order of first imports changes, and it binds two modules that
were meant to be apart."""

from __future__ import annotations

import ast
from pathlib import Path

from kiln.inventory.cluster_checks import in_cycles
from tests.conftest import REPO

PACKAGES = ("kiln", "checks", "roles", "deploy")


def _module(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of kiln's packages it imports, anywhere in its code."""
    files = {_module(p): p for package in PACKAGES for p in (REPO / package).rglob("*.py")
             if "__pycache__" not in p.parts}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                       and ast.unparse(block.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING", "t.TYPE_CHECKING")
                       for n in ast.walk(block)}  # annotations only: never imported at run time
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            for target in targets:
                while target and target not in files:
                    target = target.rpartition(".")[0]
                if target and target != name and not name.startswith(target + "."):
                    graph[name].add(target)
    return graph


def test_no_import_cycle_at_module_or_function_level():
    graph = import_graph()
    assert len(graph) > 100
    cyclic = in_cycles({k: sorted(v) for k, v in graph.items()})
    pairs = sorted(f"{a} <-> {b}" for a in cyclic for b in graph[a] if b in cyclic and a in graph[b] and a < b)
    assert not cyclic, f"import cycles among {sorted(cyclic)}; direct pairs: {pairs}"
