"""Headless Chromium for the tests that open kiln's HTML pages (CI installs it; elsewhere they skip)."""

from __future__ import annotations

import os
import shutil

import pytest


def chromium() -> str:
    """The browser's command, or a skip that says why (a failure in CI, which installs it)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return name
    reason = "no Chromium on this machine to open a page in (apt-get install chromium)"
    if os.environ.get("CI"):
        pytest.fail(f"CI installs Chromium, but: {reason}")
    pytest.skip(reason)
