"""Horovod: where its PyTorch extension builds, from ``compat/data/horovod.yaml``.

Horovod is unmaintained since 0.28.1 (2023) and compiles against the installed torch;
gpuprov's supported path for multi-host training is torch.distributed (DDP) launched with
torchrun or mpirun. ``status(torch)`` answers whether Horovod builds against a torch
version, with the reason and the source; ``note(torch)`` is the one line that
``gpu-compat resolve`` adds to its notes; ``explain(text)`` answers a question or build
error that mentions Horovod.

The validated file is cached like the matrix (:func:`compat.data.cached`), with each row's
torch specifier as plain comparisons where it is one: the note that every resolve prints
reads no YAML and imports neither PyYAML nor ``packaging`` (``scripts/bench_cli.py``).
"""

from __future__ import annotations

import os

from compat.data import DATA_DIR, cached, data_file

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from compat.model import VersionKey

# gpuprov's own; os.path, not pathlib, on the start-up path (as in compat.data)
DATA_FILE = os.path.join(DATA_DIR, "horovod.yaml")  # noqa: PTH118
_OPERATORS = ("<", "<=", ">", ">=", "==", "!=")


def load(path: str | None = None) -> dict[str, Any]:
    """The validated ``horovod`` mapping of horovod.yaml (``path``, else GPU_COMPAT_DATA's or
    gpuprov's)."""
    data: dict[str, Any] = _compiled(path)["data"]
    return data


def _compiled(path: str | None = None) -> dict[str, Any]:
    """{"data": load()'s mapping, "clauses": per build row, its torch specifier as [[operator,
    release], ...], or None where only ``packaging`` can judge it}, cached."""
    # A data directory of its own (GPU_COMPAT_DATA) may hold no horovod.yaml: then gpuprov's.
    where = path or data_file("horovod.yaml")
    return cached("horovod", [where], lambda: _compile(where), code=__file__)


def _compile(path: str) -> dict[str, Any]:
    from pathlib import Path

    import yaml

    from compat.model import CompatDataError

    where = Path(path)
    try:
        doc = yaml.safe_load(where.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CompatDataError(f"cannot read {where}: {exc}") from exc
    data = (doc or {}).get("horovod")
    if not isinstance(data, dict) or not data.get("builds") or not data.get("source"):
        raise CompatDataError(f"{where}: 'horovod' needs 'source' and a non-empty 'builds' list")
    for i, row in enumerate(data["builds"]):
        missing = [k for k in ("horovod", "torch", "builds", "source") if row.get(k) in (None, "")]
        if missing:
            raise CompatDataError(f"{where}: builds[{i}] lacks {', '.join(missing)}")
    return {"data": dict(data), "clauses": [_clauses(str(r["torch"])) for r in data["builds"]]}


def _release(text: str) -> VersionKey | None:
    """``text`` as a plain release (digits and dots only), else None."""
    parts = text.split(".")
    return tuple(int(p) for p in parts) if all(p.isascii() and p.isdigit() for p in parts) else None


def _clauses(spec: str) -> list[list[Any]] | None:
    """A torch specifier as [[operator, release], ...] when every clause compares with a plain
    release (what :func:`_compare` decides as ``packaging`` does), else None."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        specifiers = SpecifierSet(spec)
    except InvalidSpecifier:
        return None  # status() raises it, as packaging does, when a row is looked at
    out: list[list[Any]] = []
    for s in specifiers:
        bound = _release(s.version)
        if s.operator not in _OPERATORS or bound is None:
            return None
        out.append([s.operator, list(bound)])
    return out


def _compare(release: VersionKey, operator: str, bound: VersionKey) -> bool:
    """``release OPERATOR bound`` for plain releases, zero-padded as ``packaging`` compares."""
    n = max(len(release), len(bound))
    a, b = release + (0,) * (n - len(release)), bound + (0,) * (n - len(bound))
    c = (a > b) - (a < b)
    return {"<": c < 0, "<=": c <= 0, ">": c > 0, ">=": c >= 0, "==": c == 0, "!=": c != 0}[
        operator
    ]


def _matches(torch: str, spec: str, clauses: list[list[Any]] | None) -> bool:
    """Whether torch version ``torch`` (no local part) is in ``spec``."""
    release = _release(torch)
    if release is not None and clauses is not None:
        return all(_compare(release, op, tuple(bound)) for op, bound in clauses)
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    return Version(torch) in SpecifierSet(spec)


def status(torch: str | None, data: dict[str, Any] | None = None) -> dict[str, Any]:
    """{"horovod", "torch", "builds": True/False/None, "reason", "source", "supported_path"}."""
    compiled: dict[str, Any] = {"data": data, "clauses": None} if data else _compiled()
    d: dict[str, Any] = compiled["data"]
    latest = str(d["latest"])
    out: dict[str, Any] = {
        "horovod": latest,
        "torch": torch,
        "builds": None,
        "maintained": bool(d.get("maintained")),
        "supported_path": d.get("supported_path"),
        "reason": "",
        "source": d["source"],
    }
    if not torch:
        out["reason"] = "no torch version given"
        return out
    version = str(torch).split("+")[0]
    if _release(version) is None:
        from packaging.version import InvalidVersion, Version

        try:
            Version(version)
        except InvalidVersion:
            out["reason"] = f"not a torch version: {torch!r}"
            return out
    clauses = compiled["clauses"] or [None] * len(d["builds"])
    for row, spec in zip(d["builds"], clauses, strict=True):
        if str(row["horovod"]) == latest and _matches(version, str(row["torch"]), spec):
            out["builds"] = bool(row["builds"])
            out["source"] = " ".join(str(row["source"]).split())
            how = row.get("confidence", "sourced")
            out["reason"] = (
                f"Horovod {latest} builds against torch {torch} ({how}; torch {row['torch']})"
                if row["builds"]
                else f"Horovod {latest} does not build against torch {torch} ({how}): "
                f"{row.get('error', 'see the source')}"
            )
            return out
    out["reason"] = f"no data on Horovod {latest} with torch {torch}"
    return out


def note(torch: str | None) -> str:
    """The note `gpu-compat resolve` prints about Horovod for a planned torch."""
    s = status(torch)
    return (
        f"{s['reason'].rstrip('.')}. Horovod is unmaintained since {s['horovod']}; "
        f"the supported path is {s['supported_path']}"
    )


_TORCH = r"torch[ =_-]*v?(\d+\.\d+(?:\.\d+)?)"


def explain(text: str, torch: str | None = None) -> dict[str, Any] | None:
    """An explain answer for a text that mentions Horovod, else None."""
    import re

    if not re.search("horovod", text, re.IGNORECASE):
        return None
    if torch is None:
        m = re.search(_TORCH, text, re.IGNORECASE)
        torch = m.group(1) if m else None
    s = status(torch) if torch else status(None)
    cause = (
        s["reason"]
        if s["builds"] is not None
        else f"Horovod {s['horovod']} compiles its PyTorch extension against the installed torch "
        "with C++14; torch 2.1 and newer require C++17"
    )
    return {
        "recognised": True,
        "id": "horovod",
        "title": f"Horovod (unmaintained since {s['horovod']})",
        "cause": cause,
        "checks": ["python -c 'import torch; print(torch.__version__)'"],
        "fixes": [
            f"use {s['supported_path']}",
            "Horovod only with torch < 2.1 (Horovod 0.28.1), built with HOROVOD_WITH_PYTORCH=1",
        ],
        "source": s["source"],
        "parsed": {"torch": torch} if torch else {},
        "matrix": [s["reason"]] if torch else [],
    }
