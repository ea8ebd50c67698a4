"""--limit resolves Ansible host patterns exactly as ansible-core does, without loading Ansible again."""

from __future__ import annotations

import json

import pytest

from kiln.inventory import load_cluster
from kiln.inventory.limit import LimitError, resolve_limit, split_patterns
from tests.conftest import REPO

EXAMPLE = REPO / "inventory" / "example"
PATTERNS = [
    "hgx001", "gpu_h100", "compute", "all", "hgx00*", "l40s0[1-3]", "~hgx00[12]", "~l40s.*",
    "gpu_h100:gpu_l40s", "gpu_h100,gpu_l40s", "compute:!gpu_l40s", "compute:&gpu_l40s", "compute:!hgx0*",
    "gpu_h100[0]", "gpu_h100[1:3]", "gpu_h100[2-4]", "gpu_h100[30:]", "gpu_h100[-1]", "slurm_controller:login", "ctl01,login01,hgx032",
    "compute:&l40s0*:!l40s02", "!gpu_h100", "&gpu_l40s",
]


@pytest.fixture(scope="module")
def example():
    return load_cluster(EXAMPLE)


@pytest.fixture(scope="module")
def ansible_inventory():
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    return InventoryManager(loader=DataLoader(), sources=[str(EXAMPLE)])


@pytest.mark.parametrize("pattern", PATTERNS)
def test_same_hosts_as_ansible(example, ansible_inventory, pattern):
    expected = [h.name for h in ansible_inventory.get_hosts(pattern=pattern, order="inventory")]
    if not expected:  # Ansible warns and runs on nothing; kiln refuses the pattern
        with pytest.raises(LimitError):
            resolve_limit(example, pattern)
        return
    assert resolve_limit(example, pattern) == expected


def test_no_limit_is_every_host(example):
    assert resolve_limit(example, None) == list(example.hosts)


@pytest.mark.parametrize("pattern", ["hgx999", "gpu_a100", "compute:nosuchgroup"])
def test_a_term_that_matches_nothing_is_an_error(example, pattern):
    with pytest.raises(LimitError, match="matches no host or group"):
        resolve_limit(example, pattern)


def test_colons_inside_subscripts_do_not_split():
    assert split_patterns("gpu_h100[1:3]:login") == ["gpu_h100[1:3]", "login"]


def test_inventory_show_limit_lists_the_matching_hosts():
    from click.testing import CliRunner

    from kiln.cli import main

    result = CliRunner().invoke(main, ["inventory", "show", "-i", str(EXAMPLE), "--limit", "compute:!gpu_l40s",
                                       "--json"])
    assert result.exit_code == 0, result.output
    cluster = load_cluster(EXAMPLE)
    assert json.loads(result.output) == [n for n in cluster.groups["compute"] if n not in cluster.groups["gpu_l40s"]]
    bad = CliRunner().invoke(main, ["inventory", "show", "-i", str(EXAMPLE), "--limit", "nosuchgroup"])
    assert bad.exit_code == 2 and "matches no host or group" in bad.output
