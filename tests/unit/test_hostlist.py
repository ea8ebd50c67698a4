"""Host lists folded for people and for Slurm, and Slurm's lists read back (ClusterShell's NodeSet)."""

from __future__ import annotations

import pytest

from kiln.hostlist import HostListError, expand, fold, group


@pytest.mark.parametrize("names, expected", [
    (["n01", "n02", "n03"], "n[01-03]"),
    (["n01", "n02", "n04", "n05", "n07"], "n[01-02,04-05,07]"),
    (["gpu1"], "gpu1"),
    (["hgx001", "l40s01", "hgx002"], "hgx[001-002],l40s01"),
    (["login", "ctl01"], "ctl01,login"),
    (["a9", "a10"], "a[9-10]"),
    (["gpu033", "gpu001", "gpu002", "gpu001"], "gpu[001-002,033]"),   # sorted, duplicates once
    (["rack1-n01", "rack1-n02", "rack2-n01"], "rack1-n[01-02],rack2-n01"),
    ([], ""),
])
def test_host_names_fold_as_slurm_writes_them(names, expected):
    assert fold(names) == expected
    assert sorted(expand(expected)) == sorted(set(names))   # and Slurm's reading gives them back


@pytest.mark.parametrize("expression, expected", [
    ("kilntest[02-03,05]", ["kilntest02", "kilntest03", "kilntest05"]),
    ("gpu[8-11],login1", ["gpu8", "gpu9", "gpu10", "gpu11", "login1"]),
    ("(null)", []), ("", []),
])
def test_slurm_node_lists_expand_without_asking_slurm(expression, expected):
    assert expand(expression) == expected


def test_a_broken_list_is_an_error_that_names_it():
    with pytest.raises(HostListError, match=r"gpu\[1-"):
        expand("gpu[1-")


def test_hosts_with_the_same_outcome_are_grouped_in_first_seen_order():
    assert group({"b1": "ok", "a1": "failed", "b2": "ok"}) == [("ok", ["b1", "b2"]), ("failed", ["a1"])]


def test_ten_thousand_names_fold_to_one_range():
    assert fold(f"gpu{i:05d}" for i in range(1, 10001)) == "gpu[00001-10000]"
