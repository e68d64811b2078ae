"""Helpers for the synthetic matrix of conftest.py used by more than one test module."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from compat.data import Matrix

# tests/unit/conftest.py by path: a plain `import conftest` finds tests/lab's when the whole
# suite runs.
_SPEC = importlib.util.spec_from_file_location(
    "unit_conftest", Path(__file__).with_name("conftest.py")
)
assert _SPEC is not None
assert _SPEC.loader is not None
_CONFTEST = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_CONFTEST)
mini_tables = _CONFTEST.mini_tables


def with_containers(containers: list[dict[str, Any]]) -> Matrix:
    tables = mini_tables()
    tables["containers"] = containers
    return Matrix(tables)


def with_libraries(
    libraries: list[dict[str, Any]], pins: list[dict[str, Any]], **changes: Any
) -> Matrix:
    """The synthetic matrix plus measured library rows and pins; ``changes`` edit variants:
    ``{"2.0.0 cu118": {"confidence": "unverified"}}`` style via the key ``variants``."""
    tables = mini_tables()
    tables["libraries"] = libraries
    tables["pins"] = pins
    for key, edit in changes.get("variants", {}).items():
        version, name = key.split()
        for rel in tables["releases"]:
            for v in rel["variants"]:
                if rel["version"] == version and v["name"] == name:
                    v.update(edit)
    for rel in changes.get("releases", []):
        tables["releases"].append(rel)
    return Matrix(tables)
