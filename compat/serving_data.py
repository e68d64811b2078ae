# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""The serving tables: ``compat/data/{onnx,triton,tensorrt,torchserve}.yaml``, read and
validated (fields, sources, order, every capability and driver parseable), once per process.
The questions asked of them are in :mod:`compat.serving`."""

from __future__ import annotations

import os
from pathlib import Path

from compat.model import CompatDataError, CompatError, ComputeCapability, parse_driver

# Nothing heavy at import (typing, packaging load lazily, as in compat/data.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from packaging.version import Version

DATA_DIR = Path(__file__).resolve().parent / "data"
# File -> {top-level key: (required fields, sort field)}.
_TABLES: dict[str, dict[str, tuple[tuple[str, ...], str]]] = {
    "onnx.yaml": {
        "exporters": (("torch", "torchscript_default", "torchscript_max", "source"), "torch"),
        "runtimes": (("onnxruntime", "max_opset", "source"), "onnxruntime"),
    },
    "triton.yaml": {
        "triton": (
            ("tag", "image", "cuda", "min_driver", "min_compute_capability", "source"),
            "tag",
        ),
    },
    "tensorrt.yaml": {
        "tensorrt": (("version", "cuda", "min_compute_capability", "source"), "version"),
        "torch_tensorrt": (("version", "torch", "tensorrt", "cuda", "source"), "version"),
    },
    "torchserve.yaml": {
        "torchserve": (
            ("version", "torch_min", "java", "token_auth", "status", "source"),
            "version",
        ),
    },
}


def version(text: object, what: str) -> Version:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(str(text))
    except InvalidVersion as exc:
        raise CompatError(f"invalid {what} {text!r}: expected a version like 1.16.3") from exc


def base(text: object, what: str) -> Version:
    """The release without a local label (2.13.0+cpu -> 2.13.0)."""
    v = version(text, what)
    return version(v.base_version, what)


def major_minor(v: Version) -> tuple[int, int]:
    return (v.major, v.minor)


def cc(text: object) -> ComputeCapability:
    return ComputeCapability.parse(str(text).strip())


def branch(text: object) -> int:
    """A driver branch from a branch (535) or a driver version (535.183.01)."""
    drv = parse_driver(str(text))
    if drv is None:
        raise CompatError("empty driver: expected a branch (535) or a version (535.183.01)")
    return drv.branch


def validate(tables: dict[str, dict[str, list[dict[str, Any]]]]) -> None:
    """Raise :class:`CompatDataError` naming the first bad row: fields, sources, order."""
    for fname, keys in _TABLES.items():
        doc = tables.get(fname)
        if doc is None:
            raise CompatDataError(f"serving data file {fname} is missing")
        for key, (required, sort_field) in keys.items():
            rows = doc.get(key)
            if not isinstance(rows, list) or not rows:
                raise CompatDataError(f"{fname}: '{key}' must be a non-empty list")
            for i, row in enumerate(rows):
                if not isinstance(row, dict):
                    raise CompatDataError(f"{fname}: {key}[{i}] must be a mapping")
                missing = [f for f in required if row.get(f) in (None, "")]
                if missing:
                    raise CompatDataError(
                        f"{fname}: {key}[{i}] {row.get(sort_field, '')}: "
                        f"missing {', '.join(missing)}"
                    )
                if row.get("confidence") not in (None, "unverified"):
                    raise CompatDataError(
                        f"{fname}: {key}[{i}]: confidence is {row['confidence']!r}; "
                        "only 'unverified' is allowed"
                    )
                if row.get("confidence") == "unverified" and not row.get("notes"):
                    raise CompatDataError(
                        f"{fname}: {key}[{i}]: an unverified row needs notes: why"
                    )
            order = [version(r[sort_field], f"{fname} {key} {sort_field}") for r in rows]
            if order != sorted(order) or len(set(order)) != len(order):
                raise CompatDataError(
                    f"{fname}: '{key}' must be sorted by {sort_field}, no duplicates"
                )
    for fname, key, fields in (
        ("triton.yaml", "triton", ("min_compute_capability", "min_driver")),
        ("tensorrt.yaml", "tensorrt", ("min_compute_capability",)),
    ):
        for i, row in enumerate(tables[fname][key]):
            try:
                for f in fields:
                    (branch if f == "min_driver" else cc)(row[f])
            except CompatError as exc:
                raise CompatDataError(f"{fname}: {key}[{i}]: {exc}") from exc


def load_tables(root: str | None = None) -> dict[str, dict[str, list[dict[str, Any]]]]:
    import yaml

    base = root or os.environ.get("GPU_COMPAT_DATA") or DATA_DIR
    tables: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for fname in _TABLES:
        path = Path(base) / fname
        try:
            with path.open(encoding="utf-8") as fh:
                doc = yaml.safe_load(fh)
        except OSError as exc:
            raise CompatDataError(f"cannot read serving data {path}: {exc}") from exc
        except yaml.YAMLError as exc:
            raise CompatDataError(f"serving data {path} is not valid YAML: {exc}") from exc
        if not isinstance(doc, dict):
            raise CompatDataError(f"serving data {path} must hold a mapping")
        tables[fname] = doc
    validate(tables)
    return tables


_LOADED: dict[str, dict[str, dict[str, list[dict[str, Any]]]]] = {}


def load() -> dict[str, dict[str, list[dict[str, Any]]]]:
    """The validated serving tables (once per process)."""
    if "tables" not in _LOADED:
        _LOADED["tables"] = load_tables()
    return _LOADED["tables"]
