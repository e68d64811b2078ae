"""A Jinja '\\n' in a YAML block or single-quoted scalar reaches the file as a backslash and an
n under ansible-core 2.19 (seen: every authorized_keys entry of dist_launch on one line). In a
double-quoted YAML string the parser makes it a real newline first. This test finds any loaded
task value whose Jinja still holds a backslash-n."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted([*ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("roles/*/handlers/*.yml")])
FILES += sorted(ROOT.glob("playbooks/*.yml"))
JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.S)


def strings(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for v in node.values() for s in strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in strings(v)]
    return []


def escaped_newlines(text: str) -> list[str]:
    return [m for m in JINJA.findall(text) if "\\n" in m]


def test_the_check_sees_a_folded_block_and_spares_a_double_quoted_string() -> None:
    doc = yaml.safe_load(">-\n  {{ keys | join('\\n') }}\n")
    assert escaped_newlines(doc)
    assert not escaped_newlines(yaml.safe_load("\"{{ keys | join('\\n') }}\\n\""))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_escaped_newline_in_jinja(path: Path) -> None:
    found = [m for s in strings(yaml.safe_load(path.read_text())) for m in escaped_newlines(s)]
    assert not found, f"{path.relative_to(ROOT)}: use a double-quoted YAML string: {found}"
