"""The fleet report's memory: the last runs of each host, kept by scripts/report.py itself.

reports/smoke/<host>.json is rewritten on every smoke run, so report.py appends each host's
verdicts to <DIR>/history/<host>.json when their time is new ({"host", "runs": [...]}, oldest
first, at most `keep` runs; written atomically). A report run that sees the same smoke run
again adds nothing, so `make report` can be run any number of times.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from report_inputs import ReportError

KEEP = 20
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def entry(row: Mapping[str, Any]) -> dict[str, Any]:
    """One run of a host as history keeps it: when, passed or not, and which layers did not
    pass (required ones, expected ones, others)."""
    by: dict[str, list[str]] = {"fail": [], "expected": [], "failopt": []}
    for layer, v in row["layers"].items():
        if v.get("category") in by:
            by[str(v["category"])].append(layer)
    return {
        "time": row["smoke_time"],
        "ok": bool(row["ok"]),
        "failed": by["fail"],
        "expected": by["expected"],
        "failed_not_required": by["failopt"],
    }


def _path(directory: Path, host: str) -> Path:
    name = _UNSAFE.sub("_", host).lstrip(".") or "_"
    return directory / f"{name}.json"


def read(directory: Path, host: str) -> list[dict[str, Any]]:
    path = _path(directory, host)
    if not path.is_file():
        return []
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}: not JSON ({exc}); remove it to start the history anew") from exc
    runs = doc.get("runs") if isinstance(doc, dict) else None
    if not isinstance(runs, list):
        raise ReportError(f"{path}: expected {{'host', 'runs': [...]}}")
    return [r for r in runs if isinstance(r, dict)]


def _write(path: Path, doc: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(doc, indent=1) + "\n")
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def record(
    directory: Path, rows: Sequence[Mapping[str, Any]], keep: int = KEEP
) -> dict[str, list[dict[str, Any]]]:
    """Append each host's run when it is new; host -> its last `keep` runs, oldest first
    (keep 0: nothing is read or written). A host without a smoke time (no verdicts, or a
    report from before smoke runs were timed) adds nothing."""
    if keep <= 0:
        return {}
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        host = str(row["host"])
        runs = read(directory, host)
        new = not runs or runs[-1].get("time") != row.get("smoke_time")
        if row.get("smoked") and row.get("smoke_time") and new:
            runs = [*runs, entry(row)][-keep:]
            _write(_path(directory, host), {"host": host, "runs": runs})
        out[host] = runs[-keep:]
    return out
