"""docs/design.md documents the host plan and the install document; these tests read the
tables there and compare them with what the code returns, both ways."""

from __future__ import annotations

import re
from pathlib import Path

import compat
from compat.environment import environment

DESIGN = (Path(__file__).resolve().parents[2] / "docs" / "design.md").read_text()
K40M = {"index": 0, "pci_id": "10de:1023", "name": "Tesla K40m", "compute_capability": "3.5"}


def table(heading: str) -> dict[str, str]:
    """First-column keys (each backticked name) -> the row's meaning, of the table under
    ``heading``."""
    section = DESIGN.split(heading, 1)[1].split("\n#", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|", 1)]
        if len(cells) != 2 or not cells[0].startswith("`"):
            continue
        for key in re.findall(r"`([a-z_]+)`", cells[0]):
            rows[key] = cells[1]
    return rows


def test_plan_schema_is_documented_both_ways() -> None:
    doc = table("### The host plan")
    ok = compat.plan_host([K40M], packaged_branches=[470], host="n1")
    refused = compat.plan_host([], host="n1")
    assert ok["schema_version"] == 2
    assert "schema_version 2" in DESIGN
    for plan in (ok, refused):
        assert set(plan) == set(doc)
    driver_keys = set(re.findall(r"\{?`([a-z_]+)`", doc["driver"].split(" (full")[0]))
    driver_keys |= set(re.findall(r", `([a-z_]+)`", doc["driver"]))
    assert set(ok["driver"]) <= driver_keys, set(ok["driver"]) - driver_keys
    detected = set(re.findall(r"`([a-z_]+)`", doc["detected"]))
    assert set(ok["detected"][0]) == detected
    env = environment("pip", "/srv/torch", "/srv/conda", "", "k")
    assert set(env) == set(re.findall(r"[{,]\s*`([a-z_]+)` \(", doc["environment"]))


def test_install_document_is_documented_both_ways() -> None:
    doc = table("### The install document")
    plan = compat.resolve(["K40m"])
    assert set(plan["install"]) == set(doc)
    assert set(plan["install"]["pip"]) == set(re.findall(r"`([a-z_]+)`", doc["pip"]))


def test_no_stale_api_text() -> None:
    # The API returns dicts; the cache key is an FNV-1a of path/size/mtime, not a hash of content.
    for stale in ("-> `Plan`", "`Verdict`", "sha256"):
        assert stale not in DESIGN, stale
    assert "FNV-1a" in DESIGN
