"""Helpers for the synthetic matrix of conftest.py used by more than one test module."""

from __future__ import annotations

from typing import Any

from conftest import mini_tables

from compat.data import Matrix


def with_containers(containers: list[dict[str, Any]]) -> Matrix:
    tables = mini_tables()
    tables["containers"] = containers
    return Matrix(tables)
