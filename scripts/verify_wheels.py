#!/usr/bin/env python3
"""Download torch wheels one at a time, measure their arch lists, compare with the matrix.

Each spec is a torch version (``2.14.1``, ``2.13.0+cpu``), optionally
``torch==`` prefixed, or the path of a wheel already on disk.  A spec is
downloaded with ``pip download --no-deps --only-binary=:all: torch==V`` into a
temporary directory, measured with :func:`compat.inspect_torch.inspect_path`
and deleted before the next one, so only one wheel is on disk at a time.

Without ``--index-url`` / ``--pytorch-index`` pip's own configuration decides
where wheels come from (on the build machine: find-links ``/opt/wheels`` and
the local indexes ``/opt/pypi``, ``/opt/pypi-more``).  ``--pytorch-index``
uses ``https://download.pytorch.org/whl/<variant>`` for specs with a
``+variant``.

Every disagreement between the measured SASS/PTX lists and the matrix
(``compat.load().release(V).variant(NAME)``; the YAML files
``compat/data/torch_*.yaml`` directly when the matrix cannot be loaded) is
printed.  Exit 0: all agree; 1: disagreements; 2: a download or read failed.

A spec naming an NVIDIA CUDA library wheel (``nvidia-cudnn-cu12==9.5.1.17``,
``nvidia-cublas==13.1.1.3``) is downloaded for manylinux x86_64 from pip's
indexes (PyPI serves them), measured per library (the union of the entries of
every fatbin container in its shared objects, ``.nv_fatbin`` and data sections) and
compared with its row in ``compat/data/libraries.yaml``; ``--print-rows`` prints the
measured rows in that file's YAML form instead of comparing.

Not part of the test run (it downloads hundreds of MB per wheel).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# compat is the installed package (`make venv`: pip install -e .); no path juggling here.
from compat.cudalibs import CudaLibrary, LibraryError, inspect_libraries
from compat.fatbin import FatbinError
from compat.inspect_torch import InspectError, InspectResult, inspect_path

DEFAULT_SPECS = ("2.14.1", "2.13.0+cpu")
PYTORCH_INDEX = "https://download.pytorch.org/whl/{variant}"


def _run_pip_download(cmd: list[str], what: str, dest: Path, pattern: str, kind: str) -> Path:
    """Run a `pip download` command and return the one wheel matching `pattern` it left in dest."""
    print(f"$ {' '.join(cmd)}", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"pip download {what} failed:\n{proc.stderr[-2000:]}")
    wheels = sorted(dest.glob(pattern))
    if len(wheels) != 1:
        raise RuntimeError(f"pip download {what} left {len(wheels)} {kind}")
    return wheels[0]


def _requirement(spec: str) -> str:
    return spec if spec.startswith("torch") else f"torch=={spec}"


def download(
    spec: str,
    dest: Path,
    index_url: str | None,
    pytorch_index: bool,
    python_version: str | None = None,
) -> Path:
    """``pip download`` the wheel of ``spec`` into ``dest``; its path."""
    requirement = _requirement(spec)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--dest",
        str(dest),
        requirement,
    ]
    version = requirement.split("==", 1)[-1]
    if python_version:
        # Old releases have no wheel for this interpreter: ask pip for another one's.
        cmd += ["--python-version", python_version, "--platform", "manylinux1_x86_64"]
    if index_url:
        cmd += ["--index-url", index_url]
    elif pytorch_index and "+" in version:
        cmd += ["--index-url", PYTORCH_INDEX.format(variant=version.split("+", 1)[1])]
    return _run_pip_download(cmd, requirement, dest, "torch-*.whl", "torch wheels")


# ---------------------------------------------------------------- the matrix


def _matrix_archs_api(version: str, variant: str) -> tuple[list[str], list[str]] | None:
    # imported here: the matrix package may be incomplete while the reader works
    import compat
    from compat import data

    load: Callable[[], Any] = getattr(compat, "load", data.load)
    release = load().release(version)
    if release is None:
        return None
    v = release.variant(variant)
    if v is None:
        return None
    return list(v.sass), list(v.ptx)


def _matrix_archs_yaml(version: str, variant: str) -> tuple[list[str], list[str]] | None:
    import yaml

    from compat.data import DATA_DIR

    for path in sorted(Path(DATA_DIR).glob("torch_*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        for row in data.get("releases") or ():
            if str(row.get("version")) != version:
                continue
            for v in row.get("variants") or ():
                if v.get("name") == variant:
                    return list(v.get("sass") or ()), list(v.get("ptx") or ())
            return None
    return None


def matrix_archs(version: str, variant: str) -> tuple[tuple[list[str], list[str]] | None, str]:
    """The matrix's (sass, ptx) for ``version``/``variant`` and where they were read."""
    try:
        return _matrix_archs_api(version, variant), "compat.load()"
    except (ImportError, AttributeError, KeyError, ValueError, OSError) as exc:
        print(f"note: compat.load() unavailable ({exc}); reading YAML", file=sys.stderr)
        return _matrix_archs_yaml(version, variant), "compat/data/torch_*.yaml"


def compare(result: InspectResult) -> list[str]:
    """Disagreements between a measured wheel and the matrix."""
    if result.torch_version is None:
        return [f"{result.path}: no torch/version.py: cannot name the release"]
    version = result.torch_version.split("+", 1)[0]
    variant = result.variant or "cpu"
    where = f"torch {version} {variant}"
    found, source = matrix_archs(version, variant)
    if found is None:
        return [f"{where}: not in the matrix ({source})"]
    sass, ptx = found
    problems = []
    if result.cpu_only and (sass or ptx):
        problems.append(f"{where}: the wheel is CPU-only but the matrix lists archs")
    for kind, matrix, measured in (("sass", sass, result.sass), ("ptx", ptx, result.ptx)):
        extra = sorted(set(measured) - set(matrix))
        missing = sorted(set(matrix) - set(measured))
        if extra:
            problems.append(f"{where}: {kind} measured but not in the matrix: {extra}")
        if missing:
            problems.append(f"{where}: {kind} in the matrix but not in the build: {missing}")
    return problems


def is_library_spec(spec: str) -> bool:
    return Path(spec).name.replace("_", "-").startswith("nvidia-")


def download_library(spec: str, dest: Path, index_url: str | None) -> Path:
    """``pip download`` one NVIDIA library wheel (manylinux x86_64) into ``dest``."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir"]
    cmd += ["--only-binary=:all:", "--dest", str(dest), spec]
    for platform in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux2014_x86_64"):
        cmd += ["--platform", platform]
    if index_url:
        cmd += ["--index-url", index_url]
    return _run_pip_download(cmd, spec, dest, "*.whl", "wheels")


def library_rows(libs: list[CudaLibrary]) -> list[dict[str, Any]]:
    """The measured libraries of an nvidia-* wheel as rows of ``libraries.yaml``."""
    return [
        {
            "library": lib.name,
            "package": lib.package,
            "version": lib.version,
            "sass": list(lib.sass),
            "ptx": list(lib.ptx),
        }
        for lib in libs
        if lib.containers
    ]


def compare_library(path: str, libs: list[CudaLibrary]) -> list[str]:
    """Disagreements between a measured library wheel and ``compat/data/libraries.yaml``."""
    import yaml

    from compat.data import DATA_DIR

    data = yaml.safe_load((Path(DATA_DIR) / "libraries.yaml").read_text(encoding="utf-8"))
    rows = {(r["package"], str(r["version"])): r for r in (data or {}).get("libraries") or ()}
    problems = []
    measured = library_rows(libs)
    if not measured:
        return [f"{path}: no CUDA library with kernels found"]
    for m in measured:
        where = f"{m['package']}=={m['version']}"
        row = rows.get((m["package"], str(m["version"])))
        if row is None:
            problems.append(f"{where}: not in compat/data/libraries.yaml")
            continue
        for kind in ("sass", "ptx"):
            if list(row.get(kind) or []) != m[kind]:
                problems.append(f"{where}: {kind} {row.get(kind)} in the data, measured {m[kind]}")
    return problems


def measure_library(spec: str, args: argparse.Namespace) -> list[CudaLibrary]:
    path = Path(spec)
    if path.is_file():
        return inspect_libraries(path)
    with tempfile.TemporaryDirectory(prefix="gpuprov-wheel-") as tmp:
        wheel = download_library(spec, Path(tmp), args.index_url)
        print(f"measuring {wheel.name} ({wheel.stat().st_size >> 20} MiB)", file=sys.stderr)
        return inspect_libraries(wheel)


def measure(spec: str, args: argparse.Namespace) -> InspectResult:
    path = Path(spec)
    if path.is_file():
        return inspect_path(path)
    with tempfile.TemporaryDirectory(prefix="gpuprov-wheel-") as tmp:
        wheel = download(spec, Path(tmp), args.index_url, args.pytorch_index, args.python_version)
        print(f"measuring {wheel.name} ({wheel.stat().st_size >> 20} MiB)", file=sys.stderr)
        return inspect_path(wheel)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("specs", nargs="*", default=list(DEFAULT_SPECS))
    parser.add_argument("--index-url", help="pass --index-url to pip for every spec")
    parser.add_argument(
        "--pytorch-index",
        action="store_true",
        help="use download.pytorch.org/whl/<variant> for VERSION+variant specs",
    )
    parser.add_argument(
        "--python-version",
        metavar="X.Y",
        help="download wheels built for this Python (e.g. 3.7 for torch 1.x)",
    )
    parser.add_argument("--json", action="store_true", help="print measurements as JSON")
    parser.add_argument(
        "--print-rows",
        action="store_true",
        help="for nvidia-* library wheels: print the measured libraries.yaml rows, compare nothing",
    )
    args = parser.parse_args(argv)

    status = 0
    report: list[dict[str, Any]] = []
    for spec in args.specs:
        if is_library_spec(spec):
            try:
                libs = measure_library(spec, args)
            except (RuntimeError, LibraryError, OSError) as exc:
                print(f"error: {spec}: {exc}", file=sys.stderr)
                status = 2
                continue
            problems = [] if args.print_rows else compare_library(spec, libs)
            for row in library_rows(libs):
                print(
                    f"{spec}: {row['library']} {row['package']} {row['version']} "
                    f"sass={' '.join(row['sass']) or '-'} ptx={' '.join(row['ptx']) or '-'}"
                )
                if args.print_rows:
                    import yaml

                    print(yaml.safe_dump([row], sort_keys=False, width=100), end="")
            measured: dict[str, Any] = {"libraries": [lib.to_dict() for lib in libs]}
        else:
            try:
                result = measure(spec, args)
            except (RuntimeError, InspectError, FatbinError, OSError) as exc:
                print(f"error: {spec}: {exc}", file=sys.stderr)
                status = 2
                continue
            problems = compare(result)
            print(
                f"{spec}: torch {result.torch_version} ({result.variant}) "
                f"sass={' '.join(result.sass) or '-'} ptx={' '.join(result.ptx) or '-'}"
            )
            for arch, where in result.extras.items():
                print(f"  extra {arch}: {'; '.join(where)}")
            measured = result.to_dict()
        report.append({"spec": spec, "measured": measured, "disagreements": problems})
        for problem in problems:
            print(f"  DISAGREES: {problem}")
        if problems and status == 0:
            status = 1
    if args.json:
        print(json.dumps(report, indent=2))
    return status


if __name__ == "__main__":
    sys.exit(main())
