"""The reader of ``gluster volume quota VOLUME list --xml`` (checks/parsers/gluster_quota.py) and the rows
``kiln usage`` makes of it (kiln/usage/storage.py)."""

from __future__ import annotations

import pytest

from checks.parsers import gluster_quota
from checks.verdict import CheckError
from kiln.usage.storage import asked, rows
from tests.unit.test_team_quotas import _inventory
from kiln.inventory import load_cluster
from tests.conftest import REPO

RECORDED = REPO / "tests" / "recorded"

LISTED = """<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<cliOutput>
  <opRet>0</opRet>
  <opErrno>0</opErrno>
  <opErrstr/>
  <volQuota>
    <limit>
      <path>/vision</path>
      <hard_limit>2199023255552</hard_limit>
      <soft_limit_percent>80%</soft_limit_percent>
      <soft_limit_value>1759218604441</soft_limit_value>
      <used_space>549755813888</used_space>
      <avail_space>1649267441664</avail_space>
      <sl_exceeded>No</sl_exceeded>
      <hl_exceeded>No</hl_exceeded>
    </limit>
    <limit>
      <path>/gone</path>
      <hard_limit>1048576</hard_limit>
      <soft_limit_percent>80%</soft_limit_percent>
      <soft_limit_value>838861</soft_limit_value>
      <used_space>N/A</used_space>
      <avail_space>N/A</avail_space>
      <sl_exceeded>N/A</sl_exceeded>
      <hl_exceeded>N/A</hl_exceeded>
    </limit>
  </volQuota>
</cliOutput>
"""
DISABLED = """<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<cliOutput><opRet>-1</opRet><opErrno>30800</opErrno><opErrstr>Quota is disabled, please enable quota</opErrstr></cliOutput>
"""


def test_the_list_a_testbed_server_printed_is_read():
    [vision] = gluster_quota.parse((RECORDED / "gluster-quota-list-glusterfs10-testbed.xml").read_text())
    assert vision == gluster_quota.QuotaUsage("/projects/vision", 20 * 2**20, 22151168, 0, True)


def test_each_limit_is_read_in_bytes_and_a_gone_directory_has_no_usage():
    vision, gone = gluster_quota.parse(LISTED)
    assert vision == gluster_quota.QuotaUsage("/vision", 2 * 2**40, 2**39, 2199023255552 - 2**39, False)
    assert (gone.path, gone.hard_limit, gone.used, gone.hard_exceeded) == ("/gone", 2**20, None, None)


@pytest.mark.parametrize("text, said", [
    (DISABLED, "Quota is disabled, please enable quota"),
    ("quota command failed : Volume kiln does not exist\n", "not XML"),
    (LISTED.replace("<hard_limit>2199023255552</hard_limit>", "<hard_limit>2TB</hard_limit>"), "not a number of bytes"),
    (LISTED.replace("<path>/vision</path>", "<path></path>"), "without a path"),
    ("<volStatus/>", "<cliOutput> was expected"),
])
def test_output_that_is_not_the_list_is_refused_with_what_it_said(text, said):
    with pytest.raises(CheckError, match=said):
        gluster_quota.parse(text)


def test_usage_rows_name_the_team_its_clients_path_and_the_share_used(tmp_path):
    cluster = load_cluster(_inventory(tmp_path, {"/scratch": "2TB"}))
    assert asked(cluster) == {("nas1", "scratch"): "gluster --mode=script volume quota scratch list --xml"}
    found, problems = rows(cluster, {("nas1", "scratch"): (0, LISTED, "")})
    assert problems == []
    assert found == [{"team": "vision", "path": "/scratch/vision", "volume": "scratch", "limit": "2TB",
                      "limit_bytes": 2 * 2**40, "used_bytes": 2**39, "used_share": 0.25, "exceeded": False, "set": True}]
    unread, problems = rows(cluster, {("nas1", "scratch"): (1, DISABLED, "")})
    assert unread == [] and problems == ["the quotas of GlusterFS volume scratch on nas1 could not be read: gluster "
                                         "quota list failed (opRet -1): Quota is disabled, please enable quota"]
    missing, _ = rows(cluster, {("nas1", "scratch"): (0, LISTED.replace("/vision", "/other"), "")})
    assert missing[0]["set"] is False and missing[0]["used_bytes"] is None
