"""Every module's DOCUMENTATION, EXAMPLES and RETURN is YAML that Ansible can read: a broken
block only shows as "[ERROR]: Unable to parse documentation" in a playbook's output (it did
once, for gpuprov_files, in a CI run that still passed)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted((ROOT / "plugins" / "modules").glob("*.py"))


def _blocks(path: Path) -> dict[str, str]:
    found = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in (
                    "DOCUMENTATION",
                    "EXAMPLES",
                    "RETURN",
                ):
                    found[target.id] = str(node.value.value)
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_module_documentation_is_yaml(path: Path) -> None:
    blocks = _blocks(path)
    assert sorted(blocks) == ["DOCUMENTATION", "EXAMPLES", "RETURN"], path.name
    for name, text in blocks.items():
        assert yaml.safe_load(text) is not None, (path.name, name)
    doc = yaml.safe_load(blocks["DOCUMENTATION"])
    assert doc["module"] == path.stem


PLUGINS = sorted(
    p
    for kind in ("filter", "action", "callback")
    for p in (ROOT / "plugins" / kind).glob("*.py")
    if _blocks(p)
)


@pytest.mark.parametrize("path", PLUGINS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_plugin_documentation_is_yaml(path: Path) -> None:
    """ansible-lint printed "[ERROR]: Unable to parse documentation" for a filter's block."""
    for name, text in _blocks(path).items():
        assert yaml.safe_load(text) is not None, (path.name, name)
