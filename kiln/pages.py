"""The HTML pages kiln writes (``kiln check --html``, the rollout report, ``kiln usage --html``), rendered
from jinja2 templates in templates/pages/ with autoescape on: every value a page shows (a node, job, user,
team or reservation name, a drain reason, a check's message) is text, never markup, whatever it holds.
Templates take plain values; the code around them computes numbers and never builds markup."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import jinja2

PAGES = Path(str(files("templates"))) / "pages"
_ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(str(PAGES)), autoescape=True,
                          undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def render(name: str, **values) -> str:
    """templates/pages/``name`` with ``values``, escaped."""
    return _ENV.get_template(name).render(**values)
