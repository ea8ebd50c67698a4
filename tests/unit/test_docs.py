"""The docs stay honest: the settings reference is the schema's own output, and every repository path
the README names exists."""

from __future__ import annotations

import re

from kiln.inventory import reference
from kiln.inventory.schema import SETTINGS
from kiln.versions import PINS
from tests.conftest import REPO

# Paths the README names that kiln makes at run time (ignored by git), not files of the repository
MADE_AT_RUN_TIME = ("inventory/testbed", "inventory/vagrant", "inventory/<your-cluster>", "inventory/secrets/", "secrets/",
                    "check.html", ".kiln")


def test_the_settings_reference_is_complete_and_generated():
    text = (REPO / "docs" / "settings.md").read_text()
    assert text == reference.markdown(), "regenerate: kiln inventory settings --markdown > docs/settings.md"
    for name in list(SETTINGS) + [f"`{p}`" for p in PINS]:
        assert name in text


def test_every_path_the_readme_names_exists():
    readme = (REPO / "README.md").read_text()
    named = set(re.findall(r"`((?:inventory|deploy|roles|templates|checks|kiln|tests|benchmarks|docs)/[^`\s]*)`",
                           readme))
    assert named, "the README names no paths?"
    missing = [p for p in sorted(named) if not p.startswith(MADE_AT_RUN_TIME)
               and not (REPO / p.split("::")[0].rstrip("/")).exists()]
    assert not missing, f"README names paths that do not exist: {missing}"


def _ids_in_code() -> set[str]:
    """Every verdict id the checks can give: string constants shaped like one in checks/ and kiln/check/, and
    the two built ids (GPU_XID_<code>, <SUITE>_CHECK_CRASHED)."""
    import ast

    found = set()
    for path in list((REPO / "checks").glob("*.py")) + list((REPO / "kiln" / "check").glob("*.py")):
        if path.name in ("reference.py", "job_summary.py", "slurm_metrics.py", "repairs.py", "remediation.py",
                         "remediation_policy.py", "node_repair.py", "drain_reasons.py"):
            continue  # the catalog itself; node-side programs that give no verdicts (they read SLURM_* variables);
            # the repair ladders, kiln-remediate and the drain-reason classifier, which name the catalog's
            # ids and Slurm's own reasons
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(
                    r"(GPU|FABRIC|STORAGE|SLURM|SYSTEM|NODE|NCCL|DRIFT|MONITORING|LOG|AUDIT|ISOLATION|ZONES|WORKLOAD)_[A-Z0-9_]*[A-Z0-9]", node.value):
                found.add(node.value)
            if isinstance(node, ast.JoinedStr):
                text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
                if text == "GPU_XID_{}":
                    found.add("GPU_XID_<code>")
                if text == "{}_CHECK_CRASHED":
                    found.add("<SUITE>_CHECK_CRASHED")
    return found


def test_the_check_reference_is_complete_and_generated():
    from checks.reference import CHECKS, markdown

    assert _ids_in_code() == set(CHECKS)
    assert (REPO / "docs" / "checks.md").read_text() == markdown(), "regenerate: kiln check --reference > docs/checks.md"
    assert "docs/checks.md" in (REPO / "README.md").read_text()


def test_every_path_the_code_and_docs_name_exists():
    """A docstring, comment or doc that points at a file (``kiln/monitoring/alert_rules.py``, or one of its
    names: ``checks/repairs.ladder``) points at one that exists. SOURCES.md names files of other projects."""
    pattern = re.compile(r"(?<![\w/.{-])((?:deploy|roles|templates|checks|kiln|tests|benchmarks|docs)/"
                         r"[A-Za-z0-9_/-]+(?:\.[A-Za-z0-9_]+)*)")
    missing = []
    for root in ("kiln", "checks", "roles", "tests", "benchmarks", "docs", "templates"):
        for path in (REPO / root).rglob("*"):
            if path.suffix not in (".py", ".md", ".j2", ".yml", ".sh") or "__pycache__" in path.parts \
                    or path.name == "SOURCES.md":
                continue
            for ref in pattern.findall(path.read_text(errors="replace")):
                ref = ref.rstrip(".")
                stem, _, _ = ref.rpartition(".")
                if ref.endswith("/") or "{" in ref or ref.startswith(MADE_AT_RUN_TIME):
                    continue
                if not ((REPO / ref).exists() or (REPO / f"{ref}.py").exists() or (REPO / f"{stem}.py").exists()
                        or any((REPO / ref).parent.glob(f"{(REPO / ref).name}*"))):
                    missing.append(f"{path.relative_to(REPO)}: {ref}")
    assert not missing, missing
