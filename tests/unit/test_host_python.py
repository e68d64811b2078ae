"""The Python that runs on hosts runs on their python3: 3.9 on EL9 and Debian 11, which the
roles support. Each such file parses as Python 3.9 and calls nothing 3.10 added as a keyword
(zip(strict=...)). Found missing 2026-12-06: run_all.py's zip(strict=True) would have failed
every smoke run on an EL9 host.

Files: the smoke scripts (gpu_smoke copies them; run_all.py runs under the host's python3),
the modules and their module_utils (AnsiballZ runs them there), and the roles' own scripts."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOST_FILES = sorted(
    [
        *ROOT.glob("scripts/smoke/*.py"),
        *ROOT.glob("plugins/modules/*.py"),
        *ROOT.glob("plugins/module_utils/*.py"),
        *ROOT.glob("roles/*/files/*.py"),
    ]
)


def newer_calls(tree: ast.AST) -> list[str]:
    """Calls with a keyword that Python 3.10 added (zip's strict)."""
    return [
        f"line {node.lineno}: zip(strict=...) needs Python 3.10"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "zip"
        and any(k.arg == "strict" for k in node.keywords)
    ]


def test_the_check_finds_what_it_looks_for() -> None:
    assert newer_calls(ast.parse("zip(a, b, strict=True)")) == [
        "line 1: zip(strict=...) needs Python 3.10"
    ]
    assert newer_calls(ast.parse("zip(a, b)")) == []
    with pytest.raises(SyntaxError):
        ast.parse("match x:\n    case 1:\n        pass\n", feature_version=(3, 9))


def test_there_are_host_files() -> None:
    names = {p.name for p in HOST_FILES}
    assert {"run_all.py", "layer_host.py", "gpuprov_state.py", "gpu_probe.py"} <= names


@pytest.mark.parametrize("path", HOST_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_runs_on_python_3_9(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"), feature_version=(3, 9))
    assert newer_calls(tree) == []
