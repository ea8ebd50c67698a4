"""Talking to the cluster's Prometheus and Alertmanager over HTTP with basic auth, and the silences kiln
makes for its planned work: used on the operator's side (kiln alerts, kiln patch) and on the controller
(kiln-remediate), so both make silences of one shape.

A silence matches every alert whose node label is one of the work's nodes: kiln's rules name a node in
``node`` (node_exporter, dcgm-exporter, the node checks) or in ``slurm_node`` (the Slurm collector's
view), so one piece of work is two silences, one per label, each an anchored regex of the nodes' names
(each name escaped, so a name matches only itself). Alertmanager's API v2 (``/api/v2/silences``).
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import time
import urllib.error
import urllib.request

NODE_LABELS = ("node", "slurm_node")
SILENCE_ID = re.compile(r"[0-9a-fA-F-]{1,64}")


class AlertmanagerError(Exception):
    pass


def request(url: str, password: str, method: str = "GET", body=None, timeout: float = 10.0, user: str = "kiln",
            ca_file: str | None = None):
    """The JSON answer of ``method`` on ``url`` (None when empty), with basic auth and a JSON ``body``;
    AlertmanagerError saying what went wrong (no answer, a refusal with its text, no JSON). An https ``url``
    is trusted through ``ca_file`` alone (the cluster CA's certificate), its host name or address checked."""
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    headers = {"Authorization": f"Basic {token}"}
    data = None
    if body is not None:
        data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
    where = url.split("?")[0]
    if url.startswith("https://") and not ca_file:
        raise AlertmanagerError(f"{where}: no CA file to trust it by (kiln trusts only the cluster's CA)")
    try:
        context = ssl.create_default_context(cafile=ca_file) if url.startswith("https://") else None
    except OSError as e:
        raise AlertmanagerError(f"cannot read the CA file {ca_file} ({e.strerror or e}): kiln deploy writes it") from None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers, method=method),
                                    timeout=timeout, context=context) as response:  # noqa: S310 (the cluster's)
            text = response.read(16 << 20)
            return json.loads(text) if text.strip() else None
    except urllib.error.HTTPError as e:
        said = e.read(300).decode(errors="replace").strip()
        raise AlertmanagerError(f"{where} refused the {method}: HTTP {e.code}" + (f" ({said})" if said else "")) from None
    except OSError as e:
        raise AlertmanagerError(f"{where} did not answer ({e}): is kiln deploy done, and the cluster network "
                                "reachable from here?") from None
    except ValueError:
        raise AlertmanagerError(f"{where} answered something that is not JSON") from None


def matchers(label: str, nodes: list[str]) -> list[dict]:
    """Alertmanager matchers for ``label`` being exactly one of ``nodes`` (its regexes are anchored)."""
    if not nodes:
        raise ValueError("a silence needs at least one node")
    return [{"name": label, "value": "|".join(re.escape(n) for n in sorted(set(nodes))), "isRegex": True,
             "isEqual": True}]


def _rfc3339(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def make_silences(base: str, password: str, nodes: list[str], starts: float, ends: float, comment: str,
                  created_by: str, timeout: float = 10.0, ca_file: str | None = None) -> list[str]:
    """Silence every alert of ``nodes`` from ``starts`` to ``ends`` (epoch seconds) on the Alertmanager at
    ``base`` (``http://host:9093``); the new silences' ids."""
    ids = []
    for label in NODE_LABELS:
        body = {"matchers": matchers(label, nodes), "startsAt": _rfc3339(starts), "endsAt": _rfc3339(ends),
                "createdBy": created_by, "comment": comment}
        answer = request(f"{base}/api/v2/silences", password, "POST", body, timeout, ca_file=ca_file)
        silence_id = answer.get("silenceID") if isinstance(answer, dict) else None
        if not isinstance(silence_id, str) or not SILENCE_ID.fullmatch(silence_id):
            raise AlertmanagerError(f"Alertmanager answered a new silence without an id ({str(answer)[:120]})")
        ids.append(silence_id)
    return ids


def expire_silences(base: str, password: str, ids: list[str], timeout: float = 10.0, after: float = 0,
                    ca_file: str | None = None) -> list[str]:
    """End the silences ``ids``: now, or ``after`` seconds from now (the silence kept that long: alerts the
    work caused are still resolving, a scrape or a health check behind); one Alertmanager no longer has
    (expired, or its data lost) is no error. Returns the ids it ended or shortened."""
    for silence_id in ids:
        if not SILENCE_ID.fullmatch(silence_id):
            raise AlertmanagerError(f"{silence_id!r} is no silence id")
    for silence_id in ids:
        try:
            if after <= 0:
                request(f"{base}/api/v2/silence/{silence_id}", password, "DELETE", timeout=timeout, ca_file=ca_file)
                continue
            old = request(f"{base}/api/v2/silence/{silence_id}", password, timeout=timeout, ca_file=ca_file)
            if not isinstance(old, dict) or (old.get("status") or {}).get("state") != "active":
                continue
            body = {k: old[k] for k in ("id", "matchers", "startsAt", "createdBy", "comment") if k in old}
            request(f"{base}/api/v2/silences", password, "POST", {**body, "endsAt": _rfc3339(time.time() + after)},
                    timeout, ca_file=ca_file)
        except AlertmanagerError as e:
            if "HTTP 404" not in str(e) and "already expired" not in str(e):
                raise
    return list(ids)
