"""Horovod: where its PyTorch extension builds, from ``compat/data/horovod.yaml``.

Horovod is unmaintained since 0.28.1 (2023) and compiles against the installed torch;
gpuprov's supported path for multi-host training is torch.distributed (DDP) launched with
torchrun or mpirun. ``status(torch)`` answers whether Horovod builds against a torch
version, with the reason and the source; ``note(torch)`` is the one line that
``gpu-compat resolve`` adds to its notes; ``explain(text)`` answers a question or build
error that mentions Horovod.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

DATA_FILE = Path(__file__).resolve().parent / "data" / "horovod.yaml"


def load(path: str | None = None) -> dict[str, Any]:
    import yaml

    from compat.model import CompatDataError

    root = os.environ.get("GPU_COMPAT_DATA")
    # A data directory of its own (GPU_COMPAT_DATA) may hold no horovod.yaml: then gpuprov's.
    own = Path(root) / "horovod.yaml" if root else DATA_FILE
    where = Path(path) if path else (own if own.exists() else DATA_FILE)
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
    return dict(data)


def status(torch: str | None, data: dict[str, Any] | None = None) -> dict[str, Any]:
    """{"horovod", "torch", "builds": True/False/None, "reason", "source", "supported_path"}."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    d = data or load()
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
    try:
        version = Version(str(torch).split("+")[0])
    except InvalidVersion:
        out["reason"] = f"not a torch version: {torch!r}"
        return out
    for row in d["builds"]:
        if str(row["horovod"]) == latest and version in SpecifierSet(str(row["torch"])):
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


_MENTION = re.compile(r"horovod", re.IGNORECASE)
_TORCH = re.compile(r"torch[ =_-]*v?(\d+\.\d+(?:\.\d+)?)", re.IGNORECASE)


def explain(text: str, torch: str | None = None) -> dict[str, Any] | None:
    """An explain answer for a text that mentions Horovod, else None."""
    if not _MENTION.search(text):
        return None
    if torch is None:
        m = _TORCH.search(text)
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
