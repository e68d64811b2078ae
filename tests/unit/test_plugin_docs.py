"""Every plugin's documentation blocks are YAML: ansible-doc reads them, and ansible-lint only
prints an error for a block it cannot parse (a ": " in a plain scalar) and still passes."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
BLOCKS = ("DOCUMENTATION", "EXAMPLES", "RETURN")
FILES = sorted(p for p in PLUGINS.glob("*/*.py") if p.parent.name != "module_utils")


def _blocks(path: Path) -> dict[str, str]:
    found = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in BLOCKS:
                    found[target.id] = str(node.value.value)
    return found


def test_the_plugins_are_found() -> None:
    assert len([p for p in FILES if "DOCUMENTATION" in _blocks(p)]) > 10


# What each block is once read: a mapping of options or return values; examples are a list
# of tasks (a module's) or text (a filter's).
SHAPES: dict[str, tuple[type, ...]] = {"DOCUMENTATION": (dict,), "RETURN": (dict,)}


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_documentation_blocks_are_yaml(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    blocks = _blocks(path)
    # A block assigned some other way (annotated, built) would be read as missing here.
    for name in BLOCKS:
        if re.search(rf"^{name}\b", source, re.M):
            assert name in blocks, f"{path.name}: {name} is not a plain string assignment"
    for name, text in blocks.items():
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            pytest.fail(f"{path.relative_to(PLUGINS.parent)} {name}: {exc}")
        if name in SHAPES and doc is not None:
            assert isinstance(doc, SHAPES[name]), f"{path.name}: {name} reads as {type(doc)}"
