"""Load a page in a real headless browser (Debian's chromium) and read what it drew.

Each dashboard page writes a JSON self-check into `<pre id="pb-check">` once every figure has
settled (see perfbench/dashboard/site.py). `check(path)` loads the page from file://, lets its
scripts run, and returns it."""

from __future__ import annotations

import html
import json
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
    """{"figures", "drawn", "empty", "errors", "dom"} of the page at `path`: how many figures it has,
    how many were drawn with at least one trace or heatmap in their SVG, the ids of empty ones, and
    every script error, console.error or rejected promise the page saw."""
    r = _run(["--dump-dom", Path(path).resolve().as_uri()])
    m = re.search(r'<pre id="pb-check" hidden="">(.*?)</pre>', r.stdout, re.S)
    if not m:
        raise AssertionError(f"{path}: no self-check result: the browser returned no page or the page's scripts "
                             f"never finished ({r.stderr[-600:]})")
    if not m.group(1).strip():
        raise AssertionError(f"{path}: the page's drawing never finished within the virtual time budget")
    got = json.loads(html.unescape(m.group(1)))
    got["errors"] = " | ".join(str(e) for e in got["errors"])
    got["dom"] = r.stdout
    return got


def screenshot(path: Path, png: Path, width: int = 1400, height: int = 1600) -> Path:
    png.parent.mkdir(parents=True, exist_ok=True)
    r = _run([f"--window-size={width},{height}", f"--screenshot={png}", Path(path).resolve().as_uri()])
    if not png.exists():
        raise AssertionError(f"no screenshot of {path}: {r.stderr[-800:]}")
    return png
