"""The "what is where" tables of README.md (Layout) and docs/design.md name every plugin, role
and script the repository has: a new one that neither names fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def row(doc: str, first_cell: str) -> str:
    """The table row of ``doc`` whose first cell starts with ``first_cell``."""
    text = (ROOT / doc).read_text()
    rows = [line for line in text.splitlines() if line.startswith(f"| {first_cell}")]
    assert len(rows) == 1, f"{doc}: {len(rows)} rows start with {first_cell!r}"
    return rows[0]


def names(folder: str) -> list[str]:
    """The plugins of ``folder``: its Python files' names without ``.py``."""
    return sorted(p.stem for p in (ROOT / folder).glob("*.py") if not p.name.startswith("_"))


def missing(text: str, wanted: list[str]) -> list[str]:
    """The names of ``wanted`` that no backticked word of ``text`` starts with."""
    quoted = re.findall(r"`([^`]+)`", text)
    return [n for n in wanted if not any(q.startswith(n) for q in quoted)]


PLUGINS = ("filter", "modules", "action", "callback", "lookup", "module_utils")


@pytest.mark.parametrize("kind", PLUGINS)
def test_readme_layout_names_every_plugin(kind: str) -> None:
    folder = f"plugins/{kind}"
    assert names(folder), folder
    assert missing(row("README.md", f"`{folder}/`"), names(folder)) == []


@pytest.mark.parametrize("kind", PLUGINS)
def test_design_names_every_plugin(kind: str) -> None:
    folder = f"plugins/{kind}"
    first = (
        "`plugins/modules/`, `plugins/action/`" if kind in ("modules", "action") else f"`{folder}/`"
    )
    assert missing(row("docs/design.md", first), names(folder)) == []


def test_design_names_every_role() -> None:
    roles = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir())
    assert len(roles) > 10
    assert missing(row("docs/design.md", "`roles/<name>/`"), roles) == []


def test_layouts_name_every_script() -> None:
    # bench_*.py stands for the benchmarks, report_*.py for the fleet report's modules.
    scripts = sorted(
        p.name
        for p in (ROOT / "scripts").iterdir()
        if p.is_file() and not re.fullmatch(r"(bench|report)_\w+\.py", p.name)
    )
    assert "lab.py" in scripts
    assert "bench_floor.yml" in scripts
    for doc in ("README.md", "docs/design.md"):
        text = row(doc, "`scripts/`")
        assert "`bench_*.py`" in text, doc
        assert "`report_*.py`" in text, doc
        assert missing(text, scripts) == [], doc
