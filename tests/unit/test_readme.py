"""The README stays true: its support table is the one the data generates, and the CLI
examples it shows exit as it says."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_support_table_is_generated_from_the_data() -> None:
    import readme_table as mod  # scripts/ is on pytest's pythonpath

    text = (ROOT / "README.md").read_text()
    assert mod.render(text) == text, "README table is stale: run `make readme-table`"


def test_readme_names_the_two_setup_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert re.search(r"^make lab$", text, re.MULTILINE)
    assert re.search(r"^make test$", text, re.MULTILINE)
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.rstrip().endswith("make test")
