"""kiln usage's day-by-day series, reservations' used share and the --html page: Slurm's values escaped,
nothing fetched, and the plots visible in headless Chromium (screenshot kept in the test's output)."""

from __future__ import annotations

import subprocess
from datetime import datetime, timezone

import pytest

from kiln.inventory import load_cluster
from kiln.usage import html_page, sacct
from kiln.usage.report import report
from tests.browser import chromium
from tests.conftest import REPO
from tests.slurm_framing import SEP, frame
from tests.unit import usage_month

SMALL = REPO / "tests" / "inventories" / "small"
HEAD = "JobIDRaw|User|Account|QOS|Partition|State|Submit|Eligible|Start|End|ElapsedRaw|AllocTRES|NodeList|Reservation|AdminComment|JobName"
# a job of 2 GPUs over two day boundaries, one in a reservation, and jobs whose names are markup
SACCT = """201|ann|alpha|normal|gpu|COMPLETED|2026-11-02T20:00:00|2026-11-02T20:00:00|2026-11-02T22:00:00|2026-11-04T02:00:00|100800|cpu=2,gres/gpu=2|gpu01||kiln:gpu_util=50.0,gpus=2,seconds=100800||<script>alert(1)</script>
202|ben|beta|normal|gpu|COMPLETED|2026-11-03T08:00:00|2026-11-03T08:00:00|2026-11-03T08:00:00|2026-11-03T10:00:00|7200|cpu=4,gres/gpu=4|gpu[02-03]|sprint|kiln:gpu_util=10.0,gpus=4,seconds=7200||</svg><img src=x onerror=alert(2)>
203|ann|alpha|normal|gpu|RUNNING|2026-11-05T00:00:00|2026-11-05T00:00:00|2026-11-05T00:00:00|Unknown|0|cpu=1,gres/gpu=1|gpu04||||"'&amp; \u202e
"""
RESERVATIONS = """sprint|2026-11-03T06:00:00|2026-11-03T18:00:00|cpu=64|gpu[02-03]|SPEC_NODES
maint|2026-11-06T00:00:00|2026-11-06T04:00:00|cpu=32,gres/gpu=8|gpu[01-04]|MAINT,IGNORE_JOBS
broken|not a time|2026-11-06T04:00:00|cpu=1|gpu01|
"""


def _ts(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()


@pytest.fixture(scope="module")
def data():
    cluster = load_cluster(SMALL)
    return report(sacct.read(frame(SACCT, 17), SEP)[0], cluster, _ts("2026-11-02T00:00:00"), _ts("2026-11-06T00:00:00"),
                  {"gpu_a": 2.0}, "EUR", sacct.parse_reservations(RESERVATIONS))


def test_gpu_hours_come_day_by_day_and_add_up(data):
    assert data["days"] == ["2026-11-02", "2026-11-03", "2026-11-04", "2026-11-05"]
    # 201: 2 GPUs from 22:00 on the 2nd to 02:00 on the 4th: 4, 48, 4 GPU-hours; 203: 1 GPU all of the 5th
    assert data["team_gpu_hours_per_day"]["alpha"] == [4.0, 48.0, 4.0, 24.0]
    assert data["team_gpu_hours_per_day"]["beta"] == [0.0, 8.0, 0.0, 0.0]
    for team in data["teams"]:
        assert sum(data["team_gpu_hours_per_day"][team["team"]]) == pytest.approx(team["gpu_hours"])


def test_reservations_report_the_share_their_jobs_used(data):
    res = {r["reservation"]: r for r in data["reservations"]}
    assert sorted(res) == ["maint", "sprint"]  # the line without a start is not read
    # sprint: 12 h on gpu02 and gpu03 (4 GPUs each in the inventory, Slurm's TRES has no GPUs) = 96
    # GPU-hours held, job 202 used 8
    assert res["sprint"]["gpus"] == 8 and res["sprint"]["reserved_gpu_hours"] == 96.0
    assert res["sprint"]["used_gpu_hours"] == 8.0 and res["sprint"]["used_share"] == round(8 / 96, 3)
    # maint lies after the window: nothing held inside it, no share (not 0 %, not a division by zero)
    assert res["maint"]["gpus"] == 8 and res["maint"]["reserved_gpu_hours"] == 0.0 and res["maint"]["used_share"] is None


def test_the_page_escapes_slurms_values_and_fetches_nothing(data):
    text = html_page.page(data)
    assert "<script" not in text and "<img src=x" not in text and "</svg><img" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "&lt;/svg&gt;&lt;img src=x onerror=alert(2)&gt;" in text
    assert "&#34;&#39;&amp;amp;" in text  # markupsafe's escapes of " ' &
    assert "default-src 'none'; img-src data:" in text  # the browser may load nothing but the page's own images
    sources = [part.split('"', 1)[0] for part in text.split(' src="')[1:]]
    assert len(sources) == 3 and all(s.startswith("data:image/svg+xml;base64,") for s in sources), sources
    assert "http://" not in text and "https://" not in text
    assert html_page.page(data) == text  # the same report gives the same page


def test_the_page_shows_its_plots_in_headless_chromium(tmp_path):
    from PIL import Image

    browser = chromium()
    cluster = load_cluster(usage_month.write_inventory(tmp_path / "inventory"))
    month = report(sacct.read(frame(usage_month.sacct_month(2000), 17), SEP)[0], cluster, usage_month.START, usage_month.END,
                   cluster.setting("usage_gpu_hour_prices"), "EUR",
                   sacct.parse_reservations(usage_month.reservations_month()))
    page = tmp_path / "usage.html"
    page.write_text(html_page.page(month), encoding="utf-8")
    shot = tmp_path / "usage.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars", "--window-size=1280,1200",
                    f"--screenshot={shot}", page.as_uri()], check=True, capture_output=True, timeout=120)
    print(f"screenshot of kiln usage --html: {shot}")
    image = Image.open(shot).convert("RGB")
    assert image.size == (1280, 1200)
    # the first plot (GPU-hours per team over time) lies between the heading and the tables: its lines
    # are drawn in matplotlib's first colours; an image that did not load leaves the band white
    band = image.crop((0, 100, 1280, 480))
    colours = {c for _, c in band.getcolors(maxcolors=1 << 20)}
    for tab in ((0x1F, 0x77, 0xB4), (0xFF, 0x7F, 0x0E), (0x2C, 0xA0, 0x2C)):  # C0, C1, C2
        assert tab in colours, f"colour {tab} of the team lines not on screen"
    # the idle-allocation bars (busy teal, idle orange) below it
    lower = {c for _, c in image.crop((0, 480, 1280, 900)).getcolors(maxcolors=1 << 20)}
    assert (0x2A, 0x9D, 0x8F) in lower and (0xE7, 0x6F, 0x51) in lower
