"""GlusterFS directory quotas: ``gluster volume quota VOLUME list --xml`` on the volume's server.

The XML, not the table: the table prints sizes rounded to one decimal in the largest unit (``20.0MB``) and
``N/A`` columns that shift; the XML gives bytes. Its shape (glusterfs' cli-xml-output)::

    <cliOutput><opRet>0</opRet><opErrno>0</opErrno><opErrstr/>
      <volQuota><limit><path>/projects/vision</path><hard_limit>20971520</hard_limit>
        <soft_limit_percent>80%</soft_limit_percent><soft_limit_value>16777216</soft_limit_value>
        <used_space>20971520</used_space><avail_space>0</avail_space>
        <sl_exceeded>Yes</sl_exceeded><hl_exceeded>Yes</hl_exceeded></limit></volQuota></cliOutput>

A limit on a directory that is gone reads ``N/A`` in its usage fields: kept, with no usage.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

from checks.verdict import CheckError


def command(volume: str) -> list[str]:
    """The words of the command (quote them with kiln.shell.command)."""
    return ["gluster", "--mode=script", "volume", "quota", volume, "list", "--xml"]


@dataclass(frozen=True)
class QuotaUsage:
    path: str                  # in the volume, e.g. /projects/vision
    hard_limit: int            # bytes
    used: int | None           # bytes; None where gluster says N/A
    available: int | None
    hard_exceeded: bool | None


def _bytes(limit: ET.Element, tag: str, path: str) -> int | None:
    text = (limit.findtext(tag) or "").strip()
    if text == "N/A":
        return None
    if not text.isdigit():
        raise CheckError(f"gluster quota list: {tag} of {path} is {text[:40]!r}, not a number of bytes")
    return int(text)


def parse(text: str) -> list[QuotaUsage]:
    """Every limit of the volume, in gluster's order. Raises CheckError on output that is not the list (a
    failed command's XML carries its opErrstr, which the message gives)."""
    try:
        root = ET.fromstring(text.strip())
    except ET.ParseError as error:
        raise CheckError(f"gluster quota list: not XML ({error}): {text.strip()[:120]!r}") from None
    if root.tag != "cliOutput":
        raise CheckError(f"gluster quota list: <{root.tag}> where <cliOutput> was expected")
    ret = (root.findtext("opRet") or "").strip()
    if ret != "0":
        raise CheckError(f"gluster quota list failed (opRet {ret or '?'}): {(root.findtext('opErrstr') or '').strip()[:200]}")
    out = []
    for limit in root.findall("volQuota/limit"):
        path = (limit.findtext("path") or "").strip()
        if not path.startswith("/"):
            raise CheckError(f"gluster quota list: a limit without a path ({path[:40]!r})")
        hard = _bytes(limit, "hard_limit", path)
        if hard is None:
            raise CheckError(f"gluster quota list: {path} has no hard limit")
        exceeded = (limit.findtext("hl_exceeded") or "").strip()
        out.append(QuotaUsage(path, hard, _bytes(limit, "used_space", path), _bytes(limit, "avail_space", path),
                              {"Yes": True, "No": False}.get(exceeded)))
    return out
