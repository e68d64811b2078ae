"""The shape of the compat package: modules by concept, each small, and one public API that
the CLI and the Ansible filter plugin use (they import no compat module but ``compat``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import compat
from compat.model import ComputeCapability, DriverVersion, describe_driver, major_minor

ROOT = Path(__file__).resolve().parents[2]
# The largest module (compat/model.py) has 417 lines: a split by concept is due above this.
MAX_LINES = 420


@pytest.mark.parametrize("path", sorted((ROOT / "compat").glob("*.py")), ids=lambda p: p.name)
def test_no_compat_module_is_over_420_lines(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.name}: {lines} lines, over {MAX_LINES}: split it by concept"


@pytest.mark.parametrize("path", ["compat/cli.py", "plugins/filter/gpu_compat.py"])
def test_front_ends_import_only_the_public_api(path: Path) -> None:
    tree = ast.parse((ROOT / path).read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("compat"):
            imported.add(node.module)
            if node.module == "compat":
                for alias in node.names:
                    assert alias.name in compat.__all__, f"{path}: compat.{alias.name}"
        elif isinstance(node, ast.Import):
            imported.update(a.name for a in node.names if a.name.startswith("compat"))
    # inspect_torch reads binaries; it is a tool of its own, not the matrix API. cliargs is the
    # CLI's own command-line grammar (its hot path without argparse), not the matrix API either.
    allowed = {"compat", "compat.inspect_torch"} | (
        {"compat.cliargs"} if path == "compat/cli.py" else set()
    )
    assert imported <= allowed, f"{path}: {sorted(imported)}"


def test_compute_capability_spellings() -> None:
    cc = ComputeCapability.parse("8.6")
    assert cc == (8, 6)
    assert (cc.text, cc.sm, cc.describe()) == ("8.6", "sm_86", "sm_86 (8.6)")
    assert ComputeCapability(10, 0).sm == "sm_100"
    assert ComputeCapability(3, 7) < cc
    with pytest.raises(compat.CompatError, match="'8'"):
        ComputeCapability.parse("8")


def test_driver_version_and_release_keys() -> None:
    full = DriverVersion("535.183.01")
    assert (full.branch, full.branch_only, describe_driver(full)) == (535, False, "535.183.01")
    assert describe_driver(DriverVersion("550")) == "branch 550"
    assert describe_driver((470, 256, 2)) == "470.256.2"
    assert major_minor((12, 4, 1)) == (12, 4)
    assert major_minor((12,)) == (12, 0)
    assert compat.parse_driver(" ") is None


def test_public_api_beyond_resolve() -> None:
    assert compat.suggestions("K40n")[0].startswith("K40")
    k80 = compat.releases_for_gpu("K80")
    assert k80["gpu"]["compute_capability"] == "3.7"
    assert {"torch": "1.12.1", "python": ["3.7", "3.8", "3.9", "3.10"]}.items() <= next(
        r for r in k80["releases"] if r["torch"] == "1.12.1"
    ).items()
    rows = {r["compute_capability"]: r for r in compat.support_rows()}
    assert rows["3.5"]["driver_branches"].endswith("-470")
    # Kepler's last branch is 470 (NVIDIA's Kepler end-of-support notice).
    assert compat.allowed_branches(["K40m"])[-1] == 470
    bad = compat.branch_check("535", ["K40m"])
    assert bad["ok"] is False
    assert "does not drive" in bad["reasons"][0]
    assert compat.branch_check("535.183.01", ["A100"])["ok"] is True
    with pytest.raises(compat.CompatError, match="'x'"):
        compat.branch_check("x", ["A100"])
