"""Monitoring suite. On every monitored host (``expect["monitoring_tls"]``: the CA file and the host's
listeners), MONITORING_TLS: each listener kiln runs there refuses plain HTTP and serves TLS with a
certificate of the cluster CA for the host's address. On hosts of the ``monitoring`` group: Prometheus scrapes every target it was given
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
import time
import urllib.parse

from checks.node import Node
from checks.verdict import Verdict, fail, ok

PASSWORD = "/etc/prometheus/kiln-password"
# Arguments 1-4 of every script: Prometheus' base URL (https://ADDRESS:PORT), the path, the password file and
# the CA file to trust ("" where the listeners speak plain HTTP).
_GET = ("import base64,json,ssl,sys,time,urllib.request\n"
        "def get(path):\n"
        " p=open(sys.argv[3]).read().strip()\n"
        " r=urllib.request.Request(sys.argv[1]+path,headers={'Authorization':'Basic '+"
        "base64.b64encode(('kiln:'+p).encode()).decode()})\n"
        " c=ssl.create_default_context(cafile=sys.argv[4]) if sys.argv[4] else None\n"
        " return urllib.request.urlopen(r,timeout=10,context=c).read().decode()\n")
_ASK = _GET + "print(get(sys.argv[2]))"


# The targets, asked again (every 2 s, for at most one scrape interval and 5 s) while one of them has not
# been scraped yet (health "unknown": new since Prometheus last scraped, as right after a deploy added it):
# a target Prometheus has not asked yet is neither up nor down. Argument 5: that bound.
_ASK_TARGETS = (_GET + "end=time.time()+float(sys.argv[5])\n"
                "while True:\n"
                " t=get(sys.argv[2])\n"
                " try: new=any(x.get('health')=='unknown' for x in json.loads(t)['data']['activeTargets'])\n"
                " except Exception: new=False\n"
                " if not new or time.time()>end: break\n"
                " time.sleep(2)\n"
                "print(t)")


# The series held, asked again (every 2 s, for at most two scrape intervals and 5 s) while a needed one is
# missing: right after a deploy, a node's first health check or the Slurm collector's first run may have
# written a series Prometheus has not scraped yet. Argument 5: that bound; 6: the needed series as JSON, a
# list of lists of names (one of each list is enough).
_ASK_SERIES = (_GET + "end=time.time()+float(sys.argv[5]);need=json.loads(sys.argv[6])\n"
               "while True:\n"
               " t=get(sys.argv[2])\n"
               " try: held={x['metric'].get('__name__') for x in json.loads(t)['data']['result']}\n"
               " except Exception: held=set()\n"
               " if all(held & set(n) for n in need) or time.time()>end: break\n"
               " time.sleep(2)\n"
               "print(t)")


def _words(mon: dict, path: str) -> str:
    url = mon.get("url") or f"http://{mon['prometheus']}"
    return f"{shlex.quote(url)} {shlex.quote(path)} {PASSWORD} {shlex.quote(mon.get('ca_file') or '')}"


def ask(mon: dict, path: str) -> str:
    return f"python3 -c {shlex.quote(_ASK)} {_words(mon, path)}"


def ask_targets(mon: dict, wait_seconds: int) -> str:
    return f"python3 -c {shlex.quote(_ASK_TARGETS)} {_words(mon, '/api/v1/targets?state=active')} {int(wait_seconds)}"


def ask_series(mon: dict, series: list[dict], wait_seconds: int) -> str:
    """Which of ``series`` (every name, and each ``when``) Prometheus holds, asked until each that is
    needed always is there or ``wait_seconds`` have passed."""
    names = sorted({n for s in series for n in [s["name"], *s.get("also", []), s.get("when", "")] if n})
    promql = 'count by (__name__) ({__name__=~"' + "|".join(names) + '"})'
    path = "/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    need = json.dumps([[s["name"], *s.get("also", [])] for s in series if not s.get("when")], separators=(",", ":"))
    return f"python3 -c {shlex.quote(_ASK_SERIES)} {_words(mon, path)} {int(wait_seconds)} {shlex.quote(need)}"


# Each listener of this host (argument 2: JSON [[name, address, port], ...]) asked twice: in plain HTTP (its
# first bytes back, or the error) and over TLS trusting the CA file (argument 1) alone, its address checked
# against the certificate (the TLS version and the certificate's end, or the error). One JSON list.
_PROBE_TLS = ("import json,socket,ssl,sys\n"
              "out=[]\n"
              "for name,host,port in json.loads(sys.argv[2]):\n"
              " r={'name':name,'host':host,'port':port}\n"
              " try:\n"
              "  with socket.create_connection((host,port),timeout=3) as s:\n"
              "   s.settimeout(3);s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n');r['plain']=s.recv(200).decode('latin-1')\n"
              " except Exception as e: r['plain_error']=type(e).__name__+': '+str(e)\n"
              " try:\n"
              "  c=ssl.create_default_context(cafile=sys.argv[1])\n"
              "  with socket.create_connection((host,port),timeout=3) as s, c.wrap_socket(s,server_hostname=host) as t:\n"
              "   r['tls']=t.version();r['not_after']=ssl.cert_time_to_seconds(t.getpeercert()['notAfter'])\n"
              " except Exception as e: r['tls_error']=type(e).__name__+': '+str(e)\n"
              " out.append(r)\n"
              "print(json.dumps(out))")


def probe_tls(tls: dict) -> str:
    listeners = json.dumps(tls["listeners"], separators=(",", ":"))
    return f"python3 -c {shlex.quote(_PROBE_TLS)} {shlex.quote(tls['ca_file'])} {shlex.quote(listeners)}"


def plain_answer(text: str) -> int | None:
    """The HTTP status of a plain answer (None: no HTTP answer). A TLS listener answers plain HTTP with 400."""
    parts = text.split(" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[0].startswith("HTTP/") and parts[1].isdigit() else None


def tls_findings(answers: list[dict], now: float) -> tuple[list[str], float | None]:
    """('NAME (ADDRESS:PORT): what is wrong' for each listener that answers plain HTTP or no TLS of the
    cluster CA, the fewest days any certificate has left)."""
    found, days = [], []
    for a in answers:
        where = f"{a.get('name')} ({a.get('host')}:{a.get('port')})"
        status = plain_answer(a.get("plain") or "")
        if status is not None and status != 400:
            found.append(f"{where} answered plain HTTP (status {status})")
        if a.get("tls_error"):
            refused = "ConnectionRefused" in a["tls_error"] and "ConnectionRefused" in (a.get("plain_error") or "")
            found.append(f"{where} " + ("does not answer: systemctl status on the host" if refused else
                                        f"gave no TLS with a certificate of the cluster CA for its address "
                                        f"({a['tls_error'][:160]})"))
        elif isinstance(a.get("not_after"), (int, float)):
            days.append((a["not_after"] - now) / 86400)
    return found, (min(days) if days else None)


def commands(expect: dict) -> list[str]:
    tls = expect.get("monitoring_tls") or {}
    mon = expect.get("monitoring") or {}
    return ([probe_tls(tls)] if tls else []) + _prometheus_commands(mon)


def _prometheus_commands(mon: dict) -> list[str]:
    if not mon:
        return []
    return [ask_targets(mon, int(mon.get("scrape_seconds") or 30) + 5),
            ask(mon, "/api/v1/rules?type=alert")] + \
        ([ask_series(mon, mon["series"], 2 * int(mon.get("scrape_seconds") or 30) + 5)]
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


def _tls(node: Node, tls: dict) -> Verdict:
    out = node.run(probe_tls(tls))
    try:
        answers = json.loads(out.stdout)
    except ValueError:
        answers = None
    if out.rc != 0 or not isinstance(answers, list):
        said = (out.stderr.strip().splitlines() or ["no output"])[-1][:160]
        return fail("MONITORING_TLS", f"could not probe this host's listeners ({said}): is python3 here?")
    found, days = tls_findings([a for a in answers if isinstance(a, dict)], time.time())
    if found:
        return fail("MONITORING_TLS", "; ".join(found[:4]) + ": kiln deploy writes each listener's certificate and "
                    "web config (kiln_monitoring_tls)")
    return ok("MONITORING_TLS", f"{len(answers)} listener(s) refuse plain HTTP and serve TLS with a certificate "
              f"of the cluster CA" + (f" ({days:.0f} days left)" if days is not None else ""))


def run(node: Node, expect: dict) -> list[Verdict]:
    tls = expect.get("monitoring_tls") or {}
    verdicts = [_tls(node, tls)] if tls else []
    mon = expect.get("monitoring") or {}
    if not mon:
        return verdicts
    return verdicts + _prometheus(node, mon)


def _prometheus(node: Node, mon: dict) -> list[Verdict]:
    first, second, *third = _prometheus_commands(mon)
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
