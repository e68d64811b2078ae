#!/usr/bin/env python3
"""Time and peak RSS of the fatbin reader on the biggest libtorch_cuda.so available.

Candidates: the paths given, else the torch wheels in pip's local stores
(``/opt/wheels``, ``/opt/pypi/files``, ``/opt/pypi-more/files``) and an
installed torch of this interpreter (found without importing it).  The wheel
with the biggest ``libtorch_cuda.so`` member is chosen.

Each figure comes from a fresh child process, so peak RSS
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``) is its own:

* ``library``: scanning the extracted ``libtorch_cuda.so`` (mmap, headers only);
* ``wheel``: ``inspect_path`` on the whole wheel (streams every library).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# compat is the installed package (`make venv`: pip install -e .); no path juggling here.
from compat.inspect_torch import inspect_path

STORES = (Path("/opt/wheels"), Path("/opt/pypi/files"), Path("/opt/pypi-more/files"))
LIB = "torch/lib/libtorch_cuda.so"


def _lib_size(path: Path) -> int:
    """Size of the libtorch_cuda.so in ``path`` (wheel, torch dir or .so); 0 when none."""
    if path.is_file() and zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            try:
                return zf.getinfo(LIB).file_size
            except KeyError:
                return 0
    if path.is_dir():
        lib = path / "lib" / "libtorch_cuda.so"
        return lib.stat().st_size if lib.is_file() else 0
    return path.stat().st_size if path.is_file() else 0


def candidates(given: Sequence[str]) -> list[Path]:
    if given:
        return [Path(p) for p in given]
    found = [w for store in STORES if store.is_dir() for w in sorted(store.glob("torch-*.whl"))]
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.submodule_search_locations:
        found.extend(Path(p) for p in spec.submodule_search_locations)
    return found


def measure_child(path: Path) -> dict[str, Any]:
    """Run in the child: inspect ``path`` and report time and peak RSS."""
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    cpu0 = time.process_time()
    result = inspect_path(path)
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "path": str(path),
        "size_mib": round(path.stat().st_size / 2**20, 1),
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "peak_rss_mib": round(peak / 1024, 1),
        "rss_before_mib": round(base / 1024, 1),
        "containers": sum(lib.containers for lib in result.libraries),
        "sass": result.sass,
        "ptx": result.ptx,
    }


def _child(path: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", str(path)],
        check=True,
        capture_output=True,
        text=True,
    )
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Benchmark the fatbin reader.")
    parser.add_argument("paths", nargs="*", help="wheels, torch dirs or .so files")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure_child(Path(args.child))))
        return 0

    sized = [(p, _lib_size(p)) for p in candidates(args.paths)]
    sized = [(p, s) for p, s in sized if s]
    if not sized:
        print("no libtorch_cuda.so found (give a wheel, torch dir or .so)", file=sys.stderr)
        return 1
    target, lib_size = max(sized, key=lambda ps: ps[1])
    print(f"target: {target} (libtorch_cuda.so {lib_size / 2**20:.1f} MiB)")
    figures: dict[str, Any] = {}
    if target.is_file() and zipfile.is_zipfile(target):
        with tempfile.TemporaryDirectory(prefix="gpuprov-bench-") as tmp:
            lib = Path(tmp) / "libtorch_cuda.so"
            start = time.perf_counter()
            with zipfile.ZipFile(target) as zf, zf.open(LIB) as src, lib.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            figures["extract_s"] = round(time.perf_counter() - start, 3)
            figures["library"] = _child(lib)
        figures["wheel"] = _child(target)
    elif target.is_dir():
        figures["library"] = _child(target / "lib" / "libtorch_cuda.so")
        figures["install"] = _child(target)
    else:
        figures["library"] = _child(target)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    if "extract_s" in figures:
        print(f"extract libtorch_cuda.so from the wheel: {figures['extract_s']:.2f} s")
    for name in ("library", "wheel", "install"):
        if name in figures:
            f = figures[name]
            print(
                f"{name:8s} {f['size_mib']:8.1f} MiB  wall {f['wall_s']:6.2f} s  "
                f"cpu {f['cpu_s']:6.2f} s  peak RSS {f['peak_rss_mib']:6.1f} MiB "
                f"(interpreter + imports: {f['rss_before_mib']:.1f} MiB)  "
                f"containers {f['containers']}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
