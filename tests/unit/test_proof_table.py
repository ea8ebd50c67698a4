"""README's table of what is proven on which OS is the one the tests' `proves` marks make."""

from __future__ import annotations

import pytest

from tests import proof_table


def test_the_readme_table_is_the_one_the_tests_make():
    found = proof_table.collect()
    text = proof_table.table(found)
    readme = proof_table.README.read_text()
    assert proof_table.readme_with(text, readme) == readme, "run: python -m tests.proof_table --write"
    # the live proofs the table is there to show, each from a test that exists
    tiers = {(p["os"], p["tier"]) for p in found}
    assert {("debian12", "nspawn"), ("debian12", "vm"), ("debian13", "nspawn")} <= tiers
    assert any(p["os"] == "debian13" and "kiln patch" in p["subjects"] and p["tier"] == "nspawn" for p in found)


def test_a_subject_tier_or_os_the_table_does_not_know_is_refused():
    for bad in ({"subjects": ["slurmm"], "tier": "plan", "os": "debian12"},
                {"subjects": ["slurm"], "tier": "cloud", "os": "debian12"},
                {"subjects": ["slurm"], "tier": "plan", "os": "debian11"}):
        with pytest.raises(ValueError, match="test_x"):
            proof_table.table([{"test": "test_x", **bad}])


def test_a_plan_mark_reads_the_roles_of_its_reviewed_op_list(tmp_path):
    plan = tmp_path / "p.json"
    plan.write_text('{"gpu01": [["nvidia_driver: 550, held", ["apt-get install x"]], ["slurm: conf", []],'
                    ' ["nvidia: CUDA repository", []]]}')
    assert proof_table.plan_roles(plan) == ["nvidia_driver", "slurm"]
