"""The fleet page in a real browser: Debian's chromium, headless, from file:// (as people
open reports/fleet.html). After its script ran, the DOM holds every host and the reason of
every layer that did not pass, the script finished (data-js="ready") without an error, the
page logged nothing to the console, and the filter and order taken from the URL apply.

Skipped, with the reason, only where chromium is not installed (scripts/prereqs.sh test
installs it). GPUPROV_REPORT_SCREENSHOT=PATH also saves the mixed page's screenshot there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import report  # scripts/report.py (pythonpath)
import report_fixtures as fx
from html_tree import Node, parse

CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed: apt-get install chromium (scripts/prereqs.sh test)",
)


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    argv = [
        CHROMIUM,
        "--headless=new",
        "--no-sandbox",  # root in CI containers
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--enable-logging=stderr",
        "--v=0",
        *args,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    reports = tmp_path_factory.mktemp("browser") / "mixed"
    inventory = fx.write_case("mixed", reports)
    args = ["--reports", str(reports), "--inventory", str(inventory), "--html", "--quiet"]
    assert report.main(args) == 1
    return reports / "fleet.html", json.loads((reports / "fleet.json").read_text())


def console(stderr: str) -> list[str]:
    """What the page logged or threw (Chromium logs console messages as CONSOLE lines)."""
    return [line for line in stderr.splitlines() if re.search(r"CONSOLE|Uncaught", line)]


def visible_rows(root: Node) -> list[str]:
    rows = root.by_id("overview").find("tbody").find_all("tr")
    return [r.attrs["data-host"] for r in rows if "hidden" not in r.attrs]


def test_after_the_script_every_host_and_every_reason_is_in_the_dom(page, tmp_path):
    path, fleet = page
    proc = chromium(tmp_path, "--dump-dom", path.as_uri())
    assert console(proc.stderr) == []
    root = parse(proc.stdout)
    html_el = root.find("html")
    assert html_el.attrs.get("data-js") == "ready"
    assert "data-js-error" not in html_el.attrs
    assert "hidden" not in root.by_id("controls").attrs  # the script showed the controls
    assert root.by_id("shown").words == "5 of 5 hosts shown"
    assert visible_rows(root) == ["lab-mixed", "gpu-a100", "lab-cpu", "lab-k40m", "lab-m40"]
    text = root.find("body").words
    for row in fleet["hosts"]:
        assert root.by_id(f"host-{row['host']}").find("h3").words.startswith(row["host"])
        for layer, v in row["layers"].items():
            if v["category"] in ("fail", "failopt", "expected"):
                assert " ".join(v["reason"].split()) in text, (row["host"], layer)


@pytest.mark.parametrize(
    ("query", "rows"),
    [
        ("?show=failed", ["lab-mixed", "gpu-a100"]),
        ("?show=problems&sort=name", ["gpu-a100", "lab-cpu", "lab-mixed"]),
        ("?host=m40", ["lab-m40"]),
        ("?show=%22%5D%3Cx", ["lab-mixed", "gpu-a100", "lab-cpu", "lab-k40m", "lab-m40"]),
    ],
    ids=["failed", "problems-by-name", "host-filter", "junk-ignored"],
)
def test_the_filter_and_order_from_the_url_apply(page, tmp_path, query, rows):
    proc = chromium(tmp_path, "--dump-dom", page[0].as_uri() + query)
    assert console(proc.stderr) == []
    root = parse(proc.stdout)
    assert root.find("html").attrs.get("data-js") == "ready"
    assert visible_rows(root) == rows
    articles = root.by_id("hostlist").find_all("article")
    assert [a.attrs["data-host"] for a in articles if "hidden" not in a.attrs] == rows


def test_screenshot(page, tmp_path):
    shot = Path(os.environ.get("GPUPROV_REPORT_SCREENSHOT") or tmp_path / "report-mixed.png")
    chromium(
        tmp_path,
        "--hide-scrollbars",
        "--window-size=1280,2400",
        f"--screenshot={shot}",
        page[0].as_uri(),
    )
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 50_000  # a rendered page, not a blank one (a blank one is ~14 kB)
