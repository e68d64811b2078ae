"""Measure the CUDA libraries a torch build runs with: cuDNN, cuBLAS, NCCL, cuFFT, ...

A torch build runs on a GPU only if its CUDA libraries do too. They come bundled in
``torch/lib`` (older wheels) or as NVIDIA's own ``nvidia-*`` wheels (``nvidia/<lib>/lib`` or,
for CUDA 13, ``nvidia/cu13/lib`` in site-packages). ``inspect_libraries(path)`` accepts an
``nvidia-*`` or torch wheel, a directory of wheels (a wheel set), a virtual environment, a
site-packages, a torch package directory or a single shared object, and reads the fatbin
containers (``.nv_fatbin`` and data sections) of every CUDA library in it (:mod:`compat.fatbin`:
those with a kernel image; nothing is imported or decompressed, wheel members are streamed
through a temporary file).

A library's arch set is the union over all containers of all its files: a GPU for which the
union holds neither SASS of its major at or below its minor nor PTX at or below its capability
has no kernel image in that library, and that library's operations fail on it.
:func:`library_coverage` judges each library for one GPU with :func:`compat.rules.coverage`,
:func:`weakest_link` names the one that serves it worst.

Standard library only (with :mod:`compat.fatbin` and :mod:`compat.rules`).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compat import rules
from compat.fatbin import Container, FatbinError, scan_file

__all__ = [
    "CudaLibrary",
    "LibraryCoverage",
    "LibraryError",
    "cuda_library_name",
    "format_libraries",
    "inspect_libraries",
    "library_coverage",
    "weakest_link",
]

# File name prefix (after "lib") -> the library. Longest prefix first: libcusparseLt is not
# libcusparse, and libcublasLt joins cublas.
_PREFIXES = (
    ("cusparseLt", "cusparselt"),
    ("cudnn", "cudnn"),
    ("cublas", "cublas"),
    ("nccl", "nccl"),
    ("cufft", "cufft"),
    ("cusparse", "cusparse"),
    ("cusolver", "cusolver"),
    ("curand", "curand"),
    ("nvshmem", "nvshmem"),
    ("cufile", "cufile"),
    ("nvrtc", "nvrtc"),
    ("nvJitLink", "nvjitlink"),
    ("cupti", "cupti"),
    ("cudart", "cudart"),
    ("nvToolsExt", "nvtx"),
)
_DISPLAY = {
    "cudnn": "cuDNN",
    "cublas": "cuBLAS",
    "nccl": "NCCL",
    "cufft": "cuFFT",
    "cusparse": "cuSPARSE",
    "cusparselt": "cuSPARSELt",
    "cusolver": "cuSOLVER",
    "curand": "cuRAND",
    "nvshmem": "NVSHMEM",
    "cufile": "cuFile",
    "nvrtc": "NVRTC",
    "nvjitlink": "nvJitLink",
    "cupti": "CUPTI",
    "cudart": "CUDA runtime",
    "nvtx": "NVTX",
}
BUNDLED = "torch (bundled)"
# Listed with their kernels but never judged: CUPTI's kernels serve profiling (PC and PM
# sampling, range profiling); a GPU it lacks fails a profiler, not torch's operations.
# (Its kernels sit in .rodata, found since 2026-12-04: sm_75 ... sm_121 in CUPTI 13.0.85.)
PROFILING_ONLY = frozenset({"cupti"})
_LIB_RE = re.compile(r"\.so(\.\d+)*$")
_ELF_MAGIC = b"\x7fELF"
_CHUNK = 1 << 20
_ROOTS = ("nvidia", "torch", "torch.libs")
_SITE_GLOBS = (
    "lib/python*/site-packages",
    "lib64/python*/site-packages",
    "lib/python*/dist-packages",
    "local/lib/python*/dist-packages",
    "Lib/site-packages",
)


class LibraryError(ValueError):
    """The path holds no CUDA library (or is not a wheel, install or shared object)."""


def cuda_library_name(file_name: str) -> str | None:
    """The CUDA library a shared object belongs to (``libcublasLt.so.12`` -> ``cublas``),
    or None for anything else (torch's own libraries, MAGMA, ...)."""
    base = file_name.rsplit("/", 1)[-1]
    if not base.startswith("lib") or not _LIB_RE.search(base):
        return None
    for prefix, name in _PREFIXES:
        if base[3:].startswith(prefix):
            return name
    return None


def _arch_key(name: str) -> tuple[int, int, int, str]:
    prefix, (major, minor), suffix = rules.parse_arch(name)
    return (0 if prefix == "sm" else 1, major, minor, suffix)


@dataclass(frozen=True)
class CudaLibrary:
    """One CUDA library of an install: all its files' kernels together."""

    name: str  # cudnn, cublas, nccl, ...
    package: str  # the nvidia-* distribution, BUNDLED, or "unknown"
    version: str | None
    files: list[str]
    containers: int
    sass: list[str]
    ptx: list[str]

    @property
    def display(self) -> str:
        return _DISPLAY.get(self.name, self.name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "display": self.display,
            "package": self.package,
            "version": self.version,
            "files": list(self.files),
            "containers": self.containers,
            "sass": list(self.sass),
            "ptx": list(self.ptx),
        }


@dataclass(frozen=True)
class LibraryCoverage:
    """How one library runs on one GPU: ``kind`` sass | ptx | none (no kernel image)."""

    library: CudaLibrary
    compute_capability: tuple[int, int]
    kind: str
    entry: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "library": self.library.name,
            "display": self.library.display,
            "package": self.library.package,
            "version": self.library.version,
            "compute_capability": f"{self.compute_capability[0]}.{self.compute_capability[1]}",
            "result": self.kind,
            "covered_by": self.entry,
        }


def library_coverage(libs: Sequence[CudaLibrary], cc: tuple[int, int]) -> list[LibraryCoverage]:
    """Judge every library that carries kernels (SASS or PTX) for a GPU of capability ``cc``,
    except the profiling-only ones (``PROFILING_ONLY``)."""
    out = []
    for lib in libs:
        if lib.name in PROFILING_ONLY or not lib.containers:
            continue
        found = rules.coverage(tuple(lib.sass), tuple(lib.ptx), cc)
        kind, entry = found if found is not None else ("none", None)
        out.append(LibraryCoverage(lib, cc, kind, entry))
    return out


_RANK = {"none": 0, "ptx": 1, "sass": 2}


def weakest_link(coverages: Sequence[LibraryCoverage]) -> LibraryCoverage | None:
    """The library that serves the GPU worst: no kernel image before PTX-only before SASS;
    among equals the one whose best entry is furthest below the GPU. None when empty."""
    if not coverages:
        return None

    def key(c: LibraryCoverage) -> tuple[int, tuple[int, int]]:
        got = rules.parse_arch(c.entry)[1] if c.entry else (0, 0)
        return _RANK[c.kind], (got[0], got[1])

    return min(coverages, key=key)


# ---------------------------------------------------------------- scanning


def _metadata(text: str) -> tuple[str | None, str | None]:
    """``(Name, Version)`` from the headers of a METADATA file."""
    name = version = None
    for line in text.splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        if key == "Name":
            name = value.strip()
        elif key == "Version":
            version = value.strip()
    return name, version


def _scan(name: str, path: Path) -> list[Container]:
    try:
        return scan_file(path) or []
    except FatbinError as exc:
        raise LibraryError(f"{name}: {exc}") from exc


Found = list[tuple[str, list[Container], tuple[str, str | None]]]


def _scan_wheel(path: Path) -> Found:
    found: Found = []
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        owner: tuple[str, str | None] = ("unknown", None)
        for info in infos:
            if info.filename.endswith(".dist-info/METADATA"):
                dist, version = _metadata(zf.read(info).decode("utf-8", "replace"))
                if dist:
                    owner = (BUNDLED, None) if dist == "torch" else (dist, version)
        with tempfile.TemporaryDirectory(prefix="gpuprov-cudalibs-") as tmpdir:
            tmp = Path(tmpdir) / "member.so"
            for info in infos:
                member = info.filename
                if member.split("/", 1)[0] not in _ROOTS or not cuda_library_name(member):
                    continue
                with zf.open(info) as src, tmp.open("wb") as dst:
                    shutil.copyfileobj(src, dst, _CHUNK)
                try:
                    with tmp.open("rb") as f:
                        elf = f.read(4) == _ELF_MAGIC
                    if elf:
                        found.append((member, _scan(member, tmp), owner))
                finally:
                    tmp.unlink()
    return found


def _site_of(path: Path) -> Path | None:
    if (path / "version.py").is_file() and (path / "__init__.py").is_file():
        return path.parent  # a torch package directory
    if any((path / root).is_dir() for root in _ROOTS):
        return path
    for pattern in _SITE_GLOBS:
        for candidate in sorted(path.glob(pattern)):
            if any((candidate / root).is_dir() for root in _ROOTS):
                return candidate
    return None


def _owners(site: Path) -> dict[str, tuple[str, str | None]]:
    """Installed file (relative to ``site``) -> (distribution, version), from the RECORD of
    every NVIDIA distribution in ``site``."""
    owners: dict[str, tuple[str, str | None]] = {}
    for info in sorted(site.glob("nvidia_*.dist-info")):
        try:
            dist, version = _metadata((info / "METADATA").read_text(errors="replace"))
            record = (info / "RECORD").read_text(errors="replace")
        except OSError:
            continue
        for line in record.splitlines():
            rel = line.split(",", 1)[0]
            if dist and _LIB_RE.search(rel):
                owners[rel] = (dist, version)
    return owners


def _iter_libs(site: Path) -> Iterable[Path]:
    for root in _ROOTS:
        for lib in sorted((site / root).rglob("*.so*")):
            if lib.is_file() and not lib.is_symlink() and cuda_library_name(lib.name):
                with lib.open("rb") as f:
                    if f.read(4) == _ELF_MAGIC:
                        yield lib


def _scan_dir(path: Path) -> Found:
    site = _site_of(path)
    if site is None:
        wheels = sorted(p for p in path.glob("*.whl") if zipfile.is_zipfile(p))
        return [x for w in wheels for x in _scan_wheel(w)]
    owners = _owners(site)
    found: Found = []
    for lib in _iter_libs(site):
        rel = lib.relative_to(site).as_posix()
        bundled = (BUNDLED, None) if rel.startswith("torch") else ("unknown", None)
        found.append((rel, _scan(rel, lib), owners.get(rel, bundled)))
    return found


def _group(found: Found) -> list[CudaLibrary]:
    groups: dict[tuple[str, str, str | None], list[tuple[str, list[Container]]]] = {}
    for member, containers, (package, version) in found:
        lib = cuda_library_name(member)
        if lib is not None:
            groups.setdefault((lib, package, version), []).append((member, containers))
    out = []
    for (lib, package, version), members in groups.items():
        archs = {a for _, cs in members for c in cs for a in c.archs}
        ordered = sorted(archs, key=_arch_key)
        out.append(
            CudaLibrary(
                name=lib,
                package=package,
                version=version,
                files=sorted(m for m, _ in members),
                containers=sum(len(cs) for _, cs in members),
                sass=[a for a in ordered if a.startswith("sm_")],
                ptx=[a for a in ordered if a.startswith("compute_")],
            )
        )
    return sorted(out, key=lambda lib: (lib.name, lib.package))


def inspect_libraries(path: str | Path) -> list[CudaLibrary]:
    """The CUDA libraries at ``path`` (see the module doc); [] when it holds none."""
    p = Path(path)
    if p.is_dir():
        return _group(_scan_dir(p))
    if not p.is_file():
        raise LibraryError(f"{p}: no such file or directory")
    if zipfile.is_zipfile(p):
        return _group(_scan_wheel(p))
    with p.open("rb") as f:
        if f.read(4) != _ELF_MAGIC:
            raise LibraryError(f"{p}: not a wheel, an install or an ELF shared object")
    return _group([(p.name, _scan(p.name, p), ("unknown", None))])


# ---------------------------------------------------------------- output


def format_libraries(libs: Sequence[CudaLibrary], ccs: Sequence[tuple[int, int]]) -> list[str]:
    """Human lines: one per library (package, SASS, PTX), then per capability each library's
    coverage and the weakest link."""
    lines = []
    for lib in libs:
        version = f" {lib.version}" if lib.version else ""
        kernels = f"sass {' '.join(lib.sass) or '-'}; ptx {' '.join(lib.ptx) or '-'}"
        lines.append(
            f"library {lib.display} ({lib.package}{version}): "
            + (kernels if lib.containers else "no kernels")
        )
    for cc in ccs:
        covs = library_coverage(libs, cc)
        sm = f"sm_{cc[0]}{cc[1]}"
        for c in covs:
            how = f"{c.kind} {c.entry}" if c.entry else "NO kernel image"
            lines.append(f"{sm}: {c.library.display}: {how}")
        weak = weakest_link(covs)
        if weak is not None:
            how = f"{weak.kind} {weak.entry}" if weak.entry else "no kernel image"
            lines.append(f"{sm}: weakest link: {weak.library.display} ({how})")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0 when every library has a kernel image for every ``--cc``, 1 when one has none
    (as ``gpu-compat inspect --gpu``), 2 when a path cannot be read."""
    parser = argparse.ArgumentParser(
        prog="python -m compat.cudalibs",
        description="Measure the CUDA libraries (cuDNN, cuBLAS, ...) of a wheel or install.",
    )
    parser.add_argument("paths", nargs="+", help="wheel, wheel directory, venv, site-packages, .so")
    parser.add_argument("--cc", action="append", default=[], metavar="X.Y", help="judge for X.Y")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    ccs = []
    for text in args.cc:
        major, _, minor = text.partition(".")
        if not (major.isdigit() and minor.isdigit()):
            parser.error(f"--cc {text!r}: expected a compute capability X.Y such as 8.6")
        ccs.append((int(major), int(minor)))
    status = 0
    for path in args.paths:
        try:
            libs = inspect_libraries(path)
        except (LibraryError, OSError, zipfile.BadZipFile) as exc:
            print(f"error: {exc}", file=sys.stderr)
            status = 2
            continue
        covs = [c for cc in ccs for c in library_coverage(libs, cc)]
        if status == 0 and any(c.entry is None for c in covs):
            status = 1  # a library has no kernel image for an asked capability
        if args.json:
            out = {
                "path": str(path),
                "libraries": [x.to_dict() for x in libs],
                "coverage": [c.to_dict() for c in covs],
            }
            print(json.dumps(out, indent=2))
            continue
        print(f"{path}:")
        for line in format_libraries(libs, ccs) or ["no CUDA library found"]:
            print(f"  {line}")
    return status


if __name__ == "__main__":
    sys.exit(main())
