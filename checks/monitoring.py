"""Monitoring suite, on hosts of the ``monitoring`` group: Prometheus scrapes every target it was given
(none down), and kiln's alert rules are loaded and evaluate without error.

Expectations (``expect["monitoring"]``): prometheus (ADDRESS:PORT it listens on), rules (how many alert
rules kiln ships), scrape_seconds (the scrape interval: how long a target not scraped yet is waited for). Prometheus' HTTP API is read on the node itself with the password kiln wrote there
(/etc/prometheus/kiln-password, root's to read); Python's standard library asks it, so nothing else is
needed on the node.
"""

from __future__ import annotations

import json
import shlex

from checks.node import Node
from checks.verdict import Verdict, fail, ok

PASSWORD = "/etc/prometheus/kiln-password"
_ASK = ("import base64,sys,urllib.request;"
        "p=open(sys.argv[3]).read().strip();"
        "r=urllib.request.Request('http://'+sys.argv[1]+sys.argv[2],headers={'Authorization':'Basic '+"
        "base64.b64encode(('kiln:'+p).encode()).decode()});"
        "print(urllib.request.urlopen(r,timeout=10).read().decode())")


# The targets, asked again (every 2 s, for at most one scrape interval and 5 s) while one of them has not
# been scraped yet (health "unknown": new since Prometheus last scraped, as right after a deploy added it):
# a target Prometheus has not asked yet is neither up nor down.
_ASK_TARGETS = ("import base64,json,sys,time,urllib.request;"
                "p=open(sys.argv[3]).read().strip();end=time.time()+float(sys.argv[4])\n"
                "while True:\n"
                " r=urllib.request.Request('http://'+sys.argv[1]+sys.argv[2],headers={'Authorization':'Basic '+"
                "base64.b64encode(('kiln:'+p).encode()).decode()})\n"
                " t=urllib.request.urlopen(r,timeout=10).read().decode()\n"
                " try: new=any(x.get('health')=='unknown' for x in json.loads(t)['data']['activeTargets'])\n"
                " except Exception: new=False\n"
                " if not new or time.time()>end: break\n"
                " time.sleep(2)\n"
                "print(t)")


def ask(address: str, path: str) -> str:
    return f"python3 -c {shlex.quote(_ASK)} {shlex.quote(address)} {shlex.quote(path)} {PASSWORD}"


def ask_targets(address: str, wait_seconds: int) -> str:
    return (f"python3 -c {shlex.quote(_ASK_TARGETS)} {shlex.quote(address)} /api/v1/targets?state=active {PASSWORD} "
            f"{int(wait_seconds)}")


def commands(expect: dict) -> list[str]:
    mon = expect.get("monitoring") or {}
    if not mon:
        return []
    return [ask_targets(mon["prometheus"], int(mon.get("scrape_seconds") or 30) + 5),
            ask(mon["prometheus"], "/api/v1/rules?type=alert")]


def _json(text: str) -> dict | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) and data.get("status") == "success" else None


def targets_down(data: dict) -> list[str]:
    """'job node (instance): last error' for each active target that is not up."""
    out = []
    for t in data.get("data", {}).get("activeTargets", []):
        if t.get("health") != "up":
            labels = t.get("labels", {})
            out.append(f"{labels.get('job', '?')} {labels.get('node', '')} ({labels.get('instance', t.get('scrapeUrl', '?'))})"
                       f": {t.get('lastError') or t.get('health')}")
    return out


def rules_state(data: dict) -> tuple[int, list[str]]:
    """(how many kiln alert rules are loaded, 'name: error' for each rule whose evaluation fails)."""
    rules = [r for g in data.get("data", {}).get("groups", []) if g.get("name") == "kiln" for r in g.get("rules", [])]
    return len(rules), [f"{r.get('name')}: {r.get('lastError')}" for r in rules if r.get("health") == "err"]


def run(node: Node, expect: dict) -> list[Verdict]:
    mon = expect.get("monitoring") or {}
    if not mon:
        return []
    first, second = commands(expect)
    out = node.run(first)
    targets = _json(out.stdout) if out.rc == 0 else None
    if targets is None:
        return [fail("MONITORING_PROMETHEUS", f"Prometheus at {mon['prometheus']} did not answer its API "
                     f"({(out.stderr.strip().splitlines() or ['no output'])[-1][:160]}): systemctl status prometheus")]
    verdicts = [ok("MONITORING_PROMETHEUS", f"Prometheus answers at {mon['prometheus']}")]
    down = targets_down(targets)
    count = len(targets.get("data", {}).get("activeTargets", []))
    verdicts.append(fail("MONITORING_TARGETS", f"{len(down)} of {count} scrape targets down: " + "; ".join(down[:8]))
                    if down else ok("MONITORING_TARGETS", f"all {count} scrape targets up"))
    out = node.run(second)
    rules = _json(out.stdout) if out.rc == 0 else None
    loaded, broken = rules_state(rules) if rules else (0, [])
    if loaded < mon["rules"] or broken:
        verdicts.append(fail("MONITORING_RULES", f"{loaded} of kiln's {mon['rules']} alert rules loaded"
                             + (f"; failing: {'; '.join(broken[:5])}" if broken else "")
                             + ": read /etc/prometheus/kiln-rules.yml and Prometheus' log"))
    else:
        verdicts.append(ok("MONITORING_RULES", f"kiln's {loaded} alert rules loaded and evaluating"))
    return verdicts
