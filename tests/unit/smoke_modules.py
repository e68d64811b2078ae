"""Import the standalone smoke scripts (scripts/smoke/, a directory, not a package) in tests."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

SMOKE = Path(__file__).resolve().parents[2] / "scripts" / "smoke"


def smoke(name: str) -> ModuleType:
    """The smoke module ``name`` (``smokelib``, ``l3_cuda``, ...), as the scripts import it."""
    return importlib.import_module(name)  # scripts/smoke is on pytest's pythonpath
