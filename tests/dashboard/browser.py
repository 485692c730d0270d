"""Load a page in a real headless browser (Debian's chromium) and read what it drew.

Each dashboard page writes into `<body>` how many figures it drew (`data-figures`), how many
plotly SVG roots exist (`data-svgs`) and every script error or console.error (`data-errors`).
`check(path)` loads the page from file://, lets its scripts run, and returns those."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def browser() -> str:
    for b in BROWSERS:
        found = shutil.which(b)
        if found:
            return found
    msg = "no headless browser (Debian's chromium) found"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(msg + " (CI=true: .ci/run installs chromium)", pytrace=False)
    pytest.skip("!!! " + msg + ": install chromium to run the dashboard browser tests !!!")


def _run(args: list[str], timeout: float = 90) -> subprocess.CompletedProcess:
    base = [browser(), "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--hide-scrollbars", "--virtual-time-budget=8000"]
    return subprocess.run(base + args, capture_output=True, text=True, timeout=timeout)


def check(path: Path) -> dict:
    """{"figures": int, "svgs": int, "errors": str, "dom": str} of the page at `path`."""
    r = _run(["--dump-dom", Path(path).resolve().as_uri()])
    m = re.search(r"<body([^>]*)>", r.stdout)
    if not m:
        raise AssertionError(f"the browser returned no page for {path}: {r.stderr[-800:]}")
    attrs = dict(re.findall(r'(data-[a-z]+)="([^"]*)"', m.group(1)))
    if "data-figures" not in attrs:
        raise AssertionError(f"{path}: the page's own check never ran (no data-figures): scripts failed to load")
    return {"figures": int(attrs["data-figures"]), "svgs": int(attrs.get("data-svgs", "0")),
            "errors": attrs.get("data-errors", ""), "dom": r.stdout}


def screenshot(path: Path, png: Path, width: int = 1400, height: int = 1600) -> Path:
    png.parent.mkdir(parents=True, exist_ok=True)
    r = _run([f"--window-size={width},{height}", f"--screenshot={png}", Path(path).resolve().as_uri()])
    if not png.exists():
        raise AssertionError(f"no screenshot of {path}: {r.stderr[-800:]}")
    return png
