"""Every HTML page kiln writes shows what it is given as text: a node, job, user, team, reservation, check
id or reason holding markup renders as those characters, never as an element or an attribute. The pages
come from templates/pages/ with autoescape (kiln/pages.py); each page is read back with an HTML parser
here, and one is opened in headless Chromium, whose DOM is read after the page ran."""

from __future__ import annotations

import subprocess
from html.parser import HTMLParser

import pytest

from checks.verdict import Verdict
from kiln.check.report import as_html
from kiln.patch import report as rollout_report
from tests.browser import chromium

HOSTILE = ['<script>alert(1)</script>', '"><img src=x onerror=alert(2)>', "'><svg onload=alert(3)>",
           "</td></tr></table><h1>forged</h1>", "&lt;already&gt; &amp;"]


class Elements(HTMLParser):
    """Every element (tag, attributes) and every text of a page."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.texts: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.texts.append(data)


def read(page: str) -> Elements:
    parsed = Elements()
    parsed.feed(page)
    parsed.close()
    return parsed


def assert_inert(page: str, values: list[str], allowed_tags: set[str]) -> None:
    """No element or attribute that the template did not write, and each value shown as its own text."""
    parsed = read(page)
    tags = {t for t, _ in parsed.tags}
    assert tags <= allowed_tags, tags - allowed_tags
    assert not [(t, a) for t, attrs in parsed.tags for a in attrs if a.startswith("on")]
    assert "h1" not in tags or sum(t == "h1" for t, _ in parsed.tags) == 1  # no forged heading
    shown = "".join(parsed.texts) + "".join(v for _, attrs in parsed.tags for v in attrs.values() if v)
    for value in values:
        assert value in shown, value


def test_the_check_page_shows_node_ids_and_messages_as_text():
    results = {h: [Verdict(f"GPU_{i}{h[:3]}", "fail", h, "gpu"), Verdict("SLURM_SLURMD", "warn", h, "slurm")]
               for i, h in enumerate(HOSTILE)}
    page = as_html(results, HOSTILE[0])
    assert_inert(page, HOSTILE, {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "table", "tr",
                                 "th", "td", "div", "ul", "li", "b"})


def test_the_rollout_page_shows_nodes_reasons_and_jobs_as_text():
    records = [{"t": 0, "event": "start", "plan": {"total_compute": 2, "max_unavailable": 1},
                "options": {"roles": [HOSTILE[1]], "reboot": HOSTILE[2]}},
               {"t": 1, "event": "sample", "in_service": 2},
               {"t": 2, "event": "batch", "phase": "begin", "index": 0},
               *({"t": 3, "event": "node", "node": h, "result": h, "detail": h} for h in HOSTILE),
               {"t": 4, "event": "batch", "phase": "done", "index": 0, "nodes": HOSTILE, "seconds": 2, "drain_s": 0,
                "patch_s": 1, "reboot_s": 1, "overhead_s": 0},
               {"t": 5, "event": "end", "result": HOSTILE[3], "why": HOSTILE[0]}]
    page = rollout_report.html(records, HOSTILE[4])
    assert_inert(page, HOSTILE, {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "b", "table",
                                 "tr", "th", "td", "svg", "line", "text", "polyline"})


def test_the_usage_page_shows_teams_users_jobs_and_reservations_as_text():
    pytest.importorskip("matplotlib", reason="kiln usage --html draws with matplotlib (the test extra)")
    from kiln.usage import html_page
    job = {"job": HOSTILE[0], "team": HOSTILE[1], "user": HOSTILE[2], "name": HOSTILE[3], "state": HOSTILE[4],
           "gpus": 1, "gpu_hours": 1.0, "cost": 1.0, "gpu_util": None, "idle_gpu_hours": 0.0}
    team = {"team": HOSTILE[1], "jobs": 1, "gpu_hours": 1.0, "cpu_hours": 1.0, "share_used": 1.0, "share_target": 0.5,
            "gpu_limit": None, "cost": 1.0, "cost_per_useful_gpu_hour": None, "idle_gpu_hours": 0.0,
            "useful_gpu_hours": 0.0, "pending_hours": 0.0}
    data = {"cluster": HOSTILE[0], "currency": HOSTILE[2], "since": 0.0, "until": 86400.0, "days": ["1970-01-01"],
            "team_gpu_hours_per_day": {HOSTILE[1]: [1.0]}, "teams": [team], "top_cost_jobs": [job], "idle_jobs": [job],
            "reservations": [{"reservation": HOSTILE[3], "nodes": HOSTILE[4], "start": 0.0, "end": 3600.0, "gpus": 1,
                              "reserved_gpu_hours": 1.0, "used_gpu_hours": 0.0, "used_share": None}],
            "totals": {"jobs": 1, "gpu_hours": 1.0, "cost": 1.0, "cost_per_useful_gpu_hour": None}}
    page = html_page.page(data)
    assert_inert(page, HOSTILE, {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "img", "div",
                                 "table", "thead", "tbody", "tr", "th", "td"})
    images = [a for t, a in read(page).tags if t == "img"]
    assert len(images) == 3 and all(a["src"].startswith("data:image/svg+xml;base64,") for a in images)


def test_a_hostile_check_page_opened_in_chromium_runs_nothing_and_shows_the_text(tmp_path):
    """Chromium loads the page and prints its DOM as it stands after load: an injected element would be
    in it (and a script would have changed the title)."""
    browser = chromium()
    results = {h: [Verdict("GPU_XID_79", "fail", h, "gpu")] for h in HOSTILE}
    page = tmp_path / "check.html"
    page.write_text(as_html(results, "c<script>document.title='pwned'</script>"), encoding="utf-8")
    dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          "--disable-background-networking", "--disable-component-update", "--disable-sync",
                          f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()],
                         check=True, capture_output=True, text=True, timeout=120).stdout
    parsed = read(dom)
    tags = {t for t, _ in parsed.tags}
    assert "table" in tags and not tags & {"script", "img", "svg"}, tags
    assert "pwned" not in "".join(parsed.texts[:3])  # the title is the page's own
    text = "".join(parsed.texts)
    assert all(h.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&") in text or h in text
               for h in HOSTILE), text[:500]
