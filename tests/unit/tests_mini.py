"""Helpers for the synthetic matrix of conftest.py used by more than one test module."""

from __future__ import annotations

from typing import Any

from conftest import mini_tables

from compat.data import Matrix


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
