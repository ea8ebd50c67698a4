"""Monitoring suite, on hosts of the ``monitoring`` group: Prometheus scrapes every target it was given
(none down), kiln's alert rules are loaded and evaluate without error, and every series a rule reads is
served by some target (MONITORING_SERIES: a rule whose series nobody serves can never fire; the metrics
contract, kiln/monitoring/metrics_contract.py, says which series and who serves each).

Expectations (``expect["monitoring"]``): prometheus (ADDRESS:PORT it listens on), rules (how many alert
rules kiln ships), scrape_seconds (the scrape interval: how long a target not scraped yet is waited for),
series (the contract's series this cluster needs: name, other names, the rules reading it, who serves it,
and ``when``: a series whose presence makes it needed, "" for always). Prometheus' HTTP API is read on the node itself with the password kiln wrote there
(/etc/prometheus/kiln-password, root's to read); Python's standard library asks it, so nothing else is
needed on the node.
"""

from __future__ import annotations

import json
import shlex
import urllib.parse

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


# The series held, asked again (every 2 s, for at most two scrape intervals and 5 s) while a needed one is
# missing: right after a deploy, a node's first health check or the Slurm collector's first run may have
# written a series Prometheus has not scraped yet. Argument 5: the needed series as JSON, a list of lists
# of names (one of each list is enough).
_ASK_SERIES = ("import base64,json,sys,time,urllib.request;"
               "p=open(sys.argv[3]).read().strip();end=time.time()+float(sys.argv[4]);need=json.loads(sys.argv[5])\n"
               "while True:\n"
               " r=urllib.request.Request('http://'+sys.argv[1]+sys.argv[2],headers={'Authorization':'Basic '+"
               "base64.b64encode(('kiln:'+p).encode()).decode()})\n"
               " t=urllib.request.urlopen(r,timeout=10).read().decode()\n"
               " try: held={x['metric'].get('__name__') for x in json.loads(t)['data']['result']}\n"
               " except Exception: held=set()\n"
               " if all(held & set(n) for n in need) or time.time()>end: break\n"
               " time.sleep(2)\n"
               "print(t)")


def ask(address: str, path: str) -> str:
    return f"python3 -c {shlex.quote(_ASK)} {shlex.quote(address)} {shlex.quote(path)} {PASSWORD}"


def ask_targets(address: str, wait_seconds: int) -> str:
    return (f"python3 -c {shlex.quote(_ASK_TARGETS)} {shlex.quote(address)} /api/v1/targets?state=active {PASSWORD} "
            f"{int(wait_seconds)}")


def ask_series(address: str, series: list[dict], wait_seconds: int) -> str:
    """Which of ``series`` (every name, and each ``when``) Prometheus holds, asked until each that is
    needed always is there or ``wait_seconds`` have passed."""
    names = sorted({n for s in series for n in [s["name"], *s.get("also", []), s.get("when", "")] if n})
    promql = 'count by (__name__) ({__name__=~"' + "|".join(names) + '"})'
    path = "/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    need = json.dumps([[s["name"], *s.get("also", [])] for s in series if not s.get("when")], separators=(",", ":"))
    return (f"python3 -c {shlex.quote(_ASK_SERIES)} {shlex.quote(address)} {shlex.quote(path)} {PASSWORD} "
            f"{int(wait_seconds)} {shlex.quote(need)}")


def commands(expect: dict) -> list[str]:
    mon = expect.get("monitoring") or {}
    if not mon:
        return []
    return [ask_targets(mon["prometheus"], int(mon.get("scrape_seconds") or 30) + 5),
            ask(mon["prometheus"], "/api/v1/rules?type=alert")] + \
        ([ask_series(mon["prometheus"], mon["series"], 2 * int(mon.get("scrape_seconds") or 30) + 5)]
         if mon.get("series") else [])


def missing_series(data: dict, series: list[dict]) -> list[str]:
    """'NAME (read by RULES; served by WHO)' for each needed series none of whose names Prometheus holds."""
    held = {r.get("metric", {}).get("__name__") for r in data.get("data", {}).get("result", [])}
    return [f"{s['name']} (read by {', '.join(s['rules'])}; {s['served_by']})" for s in series
            if (not s.get("when") or s["when"] in held) and not held & {s["name"], *s.get("also", [])}]


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
    first, second, *third = commands(expect)
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
    if third:
        out = node.run(third[0])
        held = _json(out.stdout) if out.rc == 0 else None
        missing = missing_series(held, mon["series"]) if held else None
        if missing is None:
            verdicts.append(fail("MONITORING_SERIES", "Prometheus did not answer which series it holds: "
                                 "systemctl status prometheus"))
        elif missing:
            verdicts.append(fail("MONITORING_SERIES", f"{len(missing)} series kiln's rules read are served by no "
                                 f"target, so those rules can never fire: {'; '.join(missing)}"))
        else:
            verdicts.append(ok("MONITORING_SERIES", f"every series kiln's rules read is served "
                               f"({len(mon['series'])} needed here)"))
    return verdicts
