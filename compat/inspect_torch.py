"""Measure the CUDA arch list of a PyTorch build from its binaries.

``inspect_path(path)`` accepts a wheel (``.whl``), an installed ``torch``
package directory, a site-packages directory or a virtual environment holding
``torch``, or a single shared object.  It reads the ``.nv_fatbin`` containers
of every shared object (see :mod:`compat.fatbin`); nothing is imported.

The build's real arch list is the most common set of archs among the
containers of the main torch library (``libtorch_cuda.so``; older builds: the
torch library with the most containers). nvcc writes one container per
translation unit with an entry for every arch of TORCH_CUDA_ARCH_LIST, so
torch's own kernels share one arch set, while statically linked or vendored
code (cuDNN, cuBLAS, MAGMA, cusparseLt, NVSHMEM, hand-tuned kernels) carries
sets of its own. Measured on PyPI's torch 1.10.2+cu102 wheel: 435 of 999
containers carry exactly sm_37 sm_50 sm_60 sm_70 (its TORCH_CUDA_ARCH_LIST, and
the whole of the torch-only libcaffe2_detectron_ops_gpu.so), while the
statically linked libraries add 443 containers with sm_35 ... sm_75; counting
per-arch shares instead would call sm_75 (470 containers) real and sm_37 (435)
not. Archs outside that set are reported as ``extras``, never as coverage.

The CUDA libraries a build runs with (cuDNN, cuBLAS, NCCL, cuFFT, ...) are
measured too (``InspectResult.cuda_libraries``): bundled in ``torch/lib`` (older
wheels) or installed from NVIDIA's ``nvidia-*`` wheels (``nvidia/<lib>/lib`` in
site-packages).  A library's arch set is the union over all containers of all
its files: a kernel image for the GPU anywhere in it is what lets it load, and
the GPU a library has no image for fails in that library's operations.
:func:`library_coverage` judges each library for a GPU with the one coverage
rule (:func:`compat.rules.coverage`) and names the weakest link.  The path may
also be an ``nvidia-*`` wheel, or a directory of wheels (a wheel set).

Wheels are streamed: each library member is copied in chunks to a temporary
file, mmapped, scanned and deleted, so memory stays bounded.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import sys
import tempfile
import zipfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compat import rules
from compat.fatbin import Container, FatbinError, parse_arch, scan_file

__all__ = [
    "CudaLibrary",
    "InspectError",
    "InspectResult",
    "LibraryCoverage",
    "LibraryInfo",
    "arch_sort_key",
    "cuda_library_name",
    "inspect_path",
    "library_coverage",
    "parse_version_py",
    "weakest_link",
]

MAIN_LIBRARIES = ("libtorch_cuda.so", "libtorch_cuda_cu.so", "libcaffe2_gpu.so")
_CHUNK = 1 << 20
_ELF_MAGIC = b"\x7fELF"
_LIB_RE = re.compile(r"\.so(\.\d+)*$")
_TORCH_OWN_RE = re.compile(r"^(lib)?(torch|caffe2|c10|_C)")

# File name prefix (after "lib") -> the CUDA library it belongs to. Longest prefix first, so
# libcusparseLt is not taken for libcusparse and libcublasLt joins cublas.
_CUDA_LIBRARY_PREFIXES = (
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
_CUDA_LIBRARY_DISPLAY = {
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
_DIST_INFO_RE = re.compile(r"^([^/]+)\.dist-info/(METADATA|RECORD)$")


class InspectError(ValueError):
    """The path is not a wheel, a torch installation or a shared object."""


@dataclass(frozen=True)
class LibraryInfo:
    """One shared object with a ``.nv_fatbin`` section."""

    name: str
    containers: int
    archs: list[str]
    counts: dict[str, int]
    modal_archs: list[str] = field(default_factory=list)
    modal_containers: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "containers": self.containers,
            "archs": list(self.archs),
            "counts": dict(self.counts),
            "modal_archs": list(self.modal_archs),
            "modal_containers": self.modal_containers,
        }


def cuda_library_name(file_name: str) -> str | None:
    """The CUDA library a shared object belongs to (``libcublasLt.so.12`` -> ``cublas``),
    or None for anything else (torch's own libraries, MAGMA, ...)."""
    base = file_name.rsplit("/", 1)[-1]
    if not base.startswith("lib") or not _LIB_RE.search(base):
        return None
    stem = base[3:]
    for prefix, name in _CUDA_LIBRARY_PREFIXES:
        if stem.startswith(prefix):
            return name
    return None


@dataclass(frozen=True)
class CudaLibrary:
    """One CUDA library of an install: all its files' kernels together."""

    name: str  # cudnn, cublas, nccl, ...
    package: str  # the nvidia-* distribution, or "torch (bundled)"
    version: str | None
    files: list[str]
    containers: int
    sass: list[str]
    ptx: list[str]

    @property
    def display(self) -> str:
        return _CUDA_LIBRARY_DISPLAY.get(self.name, self.name)

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
            "package": self.library.package,
            "version": self.library.version,
            "compute_capability": f"{self.compute_capability[0]}.{self.compute_capability[1]}",
            "result": self.kind,
            "covered_by": self.entry,
        }


def library_coverage(libs: Sequence[CudaLibrary], cc: tuple[int, int]) -> list[LibraryCoverage]:
    """Judge every library that carries kernels for a GPU of capability ``cc``."""
    out = []
    for lib in libs:
        if not lib.containers:
            continue
        found = rules.coverage(tuple(lib.sass), tuple(lib.ptx), cc)
        kind, entry = found if found is not None else ("none", None)
        out.append(LibraryCoverage(lib, cc, kind, entry))
    return out


_RANK = {"none": 0, "ptx": 1, "sass": 2}


def weakest_link(coverages: Sequence[LibraryCoverage]) -> LibraryCoverage | None:
    """The library that serves the GPU worst: no kernel image before PTX-only before SASS;
    among equals the one whose best entry is furthest below the GPU. None when no library
    carries kernels."""
    if not coverages:
        return None

    def key(c: LibraryCoverage) -> tuple[int, tuple[int, int]]:
        got = parse_arch(c.entry)[1:3] if c.entry else (0, 0)
        return _RANK[c.kind], (got[0], got[1])

    return min(coverages, key=key)


@dataclass
class InspectResult:
    """What a torch build holds.  ``cpu_only`` means no NVIDIA fatbin at all (a ROCm
    build, whose kernels live in ``.hip_fatbin``, reads as ``cpu_only`` too; its
    ``variant`` says ``rocmX.Y``)."""

    path: str
    torch_version: str | None = None
    cuda: str | None = None
    variant: str | None = None
    sass: list[str] = field(default_factory=list)
    ptx: list[str] = field(default_factory=list)
    extras: dict[str, list[str]] = field(default_factory=dict)
    libraries: list[LibraryInfo] = field(default_factory=list)
    main_library: str | None = None
    cpu_only: bool = True
    cuda_libraries: list[CudaLibrary] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "torch_version": self.torch_version,
            "cuda": self.cuda,
            "variant": self.variant,
            "sass": list(self.sass),
            "ptx": list(self.ptx),
            "extras": {k: list(v) for k, v in self.extras.items()},
            "libraries": [lib.to_dict() for lib in self.libraries],
            "main_library": self.main_library,
            "cpu_only": self.cpu_only,
            "cuda_libraries": [lib.to_dict() for lib in self.cuda_libraries],
        }


def arch_sort_key(name: str) -> tuple[int, int, int, str]:
    """Sort ``sm_90`` before ``sm_90a`` before ``sm_100``; PTX after SASS."""
    kind, major, minor, suffix = parse_arch(name)
    return (0 if kind == "sass" else 1, major, minor, suffix)


# ---------------------------------------------------------------- version.py

_VERSION_RE = re.compile(r"""^__version__\s*(?::[^=]*)?=\s*['"]([^'"]+)['"]""", re.M)
_CUDA_RE = re.compile(r"""^cuda\s*(?::[^=]*)?=\s*(?:['"]([^'"]*)['"]|None)""", re.M)


def parse_version_py(text: str) -> tuple[str | None, str | None]:
    """``(__version__, cuda)`` of a ``torch/version.py``, read as text (not imported)."""
    values: dict[str, str | None] = {}
    try:
        tree = ast.parse(text)
    except SyntaxError:
        m = _VERSION_RE.search(text)
        c = _CUDA_RE.search(text)
        return (m.group(1) if m else None, c.group(1) if c and c.group(1) else None)
    for node in tree.body:
        target: ast.expr | None = None
        value: ast.expr | None = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if (
            isinstance(target, ast.Name)
            and target.id in ("__version__", "cuda")
            and isinstance(value, ast.Constant)
        ):
            values[target.id] = value.value if isinstance(value.value, str) else None
    return values.get("__version__"), values.get("cuda")


def _variant(version: str | None, cuda: str | None) -> str | None:
    if version and "+" in version:
        return version.split("+", 1)[1]
    if cuda:
        return "cu" + "".join(cuda.split(".")[:2])
    return "cpu" if version else None


# ---------------------------------------------------------------- scanning


@dataclass
class _Scan:
    path: str
    version_text: str | None = None
    libs: list[tuple[str, list[Container]]] = field(default_factory=list)
    # library path (as in ``libs``) -> (distribution name, version) where known
    owners: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    # Some of the files belong to a torch build (a torch wheel, a torch install).
    has_torch: bool = False


def _metadata_name_version(text: str) -> tuple[str | None, str | None]:
    name = version = None
    for line in text.splitlines():
        if not line.strip():
            break  # the headers end at the first empty line
        key, _, value = line.partition(":")
        if key == "Name":
            name = value.strip()
        elif key == "Version":
            version = value.strip()
    return name, version


def _scan_one(name: str, path: Path) -> list[Container] | None:
    try:
        return scan_file(path)
    except FatbinError as exc:
        err = FatbinError(f"{name}: {exc}")
        err.offset = exc.offset
        raise err from exc


def _is_elf(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(4) == _ELF_MAGIC


def _scan_wheel(path: Path) -> _Scan:
    scan = _Scan(str(path))
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        names = {i.filename for i in infos}
        scan.has_torch = any(n.startswith("torch/") for n in names)
        if not scan.has_torch and not any(n.startswith("nvidia/") for n in names):
            raise InspectError(
                f"{path}: the archive holds no torch/ package and no nvidia/ CUDA library"
            )
        if "torch/version.py" in names:
            scan.version_text = zf.read("torch/version.py").decode("utf-8", "replace")
        owner: tuple[str, str | None] | None = None
        for n in sorted(names):
            m = _DIST_INFO_RE.match(n)
            if m and m.group(2) == "METADATA":
                dist, version = _metadata_name_version(zf.read(n).decode("utf-8", "replace"))
                if dist:
                    owner = (dist, version)
        with tempfile.TemporaryDirectory(prefix="gpuprov-inspect-") as tmpdir:
            tmp = Path(tmpdir) / "member.so"
            for info in infos:
                member = info.filename
                if info.is_dir() or not _is_lib_member(member):
                    continue
                with zf.open(info) as src:
                    head = src.read(4)
                    if head != _ELF_MAGIC:
                        continue
                    with tmp.open("wb") as dst:
                        dst.write(head)
                        shutil.copyfileobj(src, dst, _CHUNK)
                try:
                    containers = _scan_one(member, tmp)
                finally:
                    tmp.unlink()
                if containers is not None:
                    scan.libs.append((member, containers))
                    if owner is not None:
                        scan.owners[member] = owner
    return scan


def _is_lib_member(member: str) -> bool:
    top = member.split("/", 1)[0]
    return top in ("torch", "torch.libs", "nvidia") and bool(_LIB_RE.search(member))


def _find_torch_dir(path: Path) -> Path | None:
    if (path / "version.py").is_file() and (path / "__init__.py").is_file():
        return path
    if (path / "torch" / "__init__.py").is_file():
        return path / "torch"
    patterns = (
        "lib/python*/site-packages/torch",
        "lib64/python*/site-packages/torch",
        "lib/python*/dist-packages/torch",
        "local/lib/python*/dist-packages/torch",
        "Lib/site-packages/torch",
    )
    for pattern in patterns:
        for candidate in sorted(path.glob(pattern)):
            if (candidate / "__init__.py").is_file():
                return candidate
    return None


def _find_site_packages(path: Path) -> Path | None:
    """A directory holding ``nvidia/`` CUDA library packages (and no torch)."""
    if (path / "nvidia").is_dir():
        return path
    for pattern in (
        "lib/python*/site-packages",
        "lib64/python*/site-packages",
        "lib/python*/dist-packages",
        "local/lib/python*/dist-packages",
        "Lib/site-packages",
    ):
        for candidate in sorted(path.glob(pattern)):
            if (candidate / "nvidia").is_dir():
                return candidate
    return None


def _iter_libs(roots: Sequence[Path]) -> Iterable[Path]:
    for root in roots:
        if not root.is_dir():
            continue
        for lib in sorted(root.rglob("*.so*")):
            if lib.is_symlink() or not lib.is_file() or not _LIB_RE.search(lib.name):
                continue
            if _is_elf(lib):
                yield lib


def _dist_owners(site: Path) -> dict[str, tuple[str, str | None]]:
    """Installed file (relative to ``site``) -> (distribution, version), from the RECORD of
    every NVIDIA distribution (``nvidia_*.dist-info``) in ``site``."""
    owners: dict[str, tuple[str, str | None]] = {}
    for info in sorted(site.glob("nvidia_*.dist-info")):
        try:
            meta = (info / "METADATA").read_text(encoding="utf-8", errors="replace")
            record = (info / "RECORD").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        dist, version = _metadata_name_version(meta)
        if not dist:
            continue
        for line in record.splitlines():
            rel = line.split(",", 1)[0]
            if _LIB_RE.search(rel):
                owners[rel] = (dist, version)
    return owners


def _scan_dir(path: Path) -> _Scan:
    torch_dir = _find_torch_dir(path)
    site = torch_dir.parent if torch_dir is not None else _find_site_packages(path)
    if site is None:
        wheels = sorted(path.glob("*.whl"))
        if wheels:
            return _scan_wheel_set(path, wheels)
        raise InspectError(
            f"{path}: no torch package found (expected a torch/ package directory, "
            "a site-packages holding torch/ or nvidia/, a virtual environment, "
            "or a directory of wheels)"
        )
    scan = _Scan(str(path))
    roots = [site / "nvidia"]
    if torch_dir is not None:
        scan.has_torch = True
        version_py = torch_dir / "version.py"
        if version_py.is_file():
            scan.version_text = version_py.read_text(encoding="utf-8", errors="replace")
        roots = [torch_dir, site / "torch.libs", site / "nvidia"]
    owners = _dist_owners(site)
    for lib in _iter_libs(roots):
        name = lib.relative_to(site).as_posix()
        containers = _scan_one(name, lib)
        if containers is not None:
            scan.libs.append((name, containers))
            if name in owners:
                scan.owners[name] = owners[name]
    return scan


def _scan_wheel_set(path: Path, wheels: Sequence[Path]) -> _Scan:
    """A directory of wheels (torch and/or nvidia-*), measured one after another."""
    scan = _Scan(str(path))
    for wheel in wheels:
        if not zipfile.is_zipfile(wheel):
            continue
        try:
            one = _scan_wheel(wheel)
        except InspectError:
            continue  # a wheel of something else (numpy, triton, ...)
        scan.has_torch = scan.has_torch or one.has_torch
        if one.version_text is not None:
            scan.version_text = one.version_text
        scan.libs.extend(one.libs)
        scan.owners.update(one.owners)
    if not scan.libs and scan.version_text is None:
        raise InspectError(f"{path}: none of its wheels holds torch/ or an nvidia/ CUDA library")
    return scan


def _scan_path(path: Path) -> _Scan:
    if path.is_dir():
        return _scan_dir(path)
    if not path.is_file():
        raise InspectError(f"{path}: no such file or directory")
    if zipfile.is_zipfile(path):
        return _scan_wheel(path)
    if _is_elf(path):
        scan = _Scan(str(path))
        containers = _scan_one(path.name, path)
        if containers is not None:
            scan.libs.append((path.name, containers))
        return scan
    raise InspectError(
        f"{path}: not a wheel, a torch installation, a site-packages, "
        "a virtual environment or an ELF shared object"
    )


# ---------------------------------------------------------------- analysis


def _library_info(name: str, containers: Sequence[Container]) -> LibraryInfo:
    counts: Counter[str] = Counter()
    sets: Counter[frozenset[str]] = Counter()
    for container in containers:
        archs_of = frozenset(container.archs)
        counts.update(archs_of)
        if archs_of:
            sets[archs_of] += 1
    archs = sorted(counts, key=arch_sort_key)
    # The most common arch set; on a tie, the larger set (a build's full list over a subset).
    modal, modal_n = max(sets.items(), key=lambda kv: (kv[1], len(kv[0])), default=((), 0))
    return LibraryInfo(
        name=name,
        containers=len(containers),
        archs=archs,
        counts={a: counts[a] for a in archs},
        modal_archs=sorted(modal, key=arch_sort_key),
        modal_containers=modal_n,
    )


def _basename(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def _pick_main(libs: Sequence[LibraryInfo], single: bool) -> LibraryInfo | None:
    with_containers = [lib for lib in libs if lib.containers]
    if not with_containers:
        return None
    if single:
        return with_containers[0]
    for wanted in MAIN_LIBRARIES:
        for lib in with_containers:
            if _basename(lib.name) == wanted:
                return lib
    own = [
        lib
        for lib in with_containers
        if not lib.name.startswith("torch.libs/") and _TORCH_OWN_RE.match(_basename(lib.name))
    ]
    if not own:
        return None
    return max(own, key=lambda lib: lib.containers)


def inspect_path(path: str | Path) -> InspectResult:
    """Measure the arch list of the torch build at ``path`` (see the module doc)."""
    p = Path(path)
    scan = _scan_path(p)
    result = InspectResult(path=scan.path)
    if scan.version_text is not None:
        result.torch_version, result.cuda = parse_version_py(scan.version_text)
        result.variant = _variant(result.torch_version, result.cuda)

    libs = [_library_info(name, containers) for name, containers in scan.libs]
    result.libraries = libs
    result.cpu_only = not libs
    main = _pick_main(libs, single=p.is_file() and not zipfile.is_zipfile(p))
    real: set[str] = set()
    if main is not None:
        result.main_library = main.name
        real = set(main.modal_archs)
    result.sass = sorted((a for a in real if a.startswith("sm_")), key=arch_sort_key)
    result.ptx = sorted((a for a in real if a.startswith("compute_")), key=arch_sort_key)

    extras: dict[str, list[str]] = {}
    for lib in libs:
        for arch in lib.archs:
            if arch in real:
                continue
            extras.setdefault(arch, []).append(
                f"{_basename(lib.name)} ({lib.counts[arch]} of {lib.containers} containers)"
            )
    result.extras = {a: extras[a] for a in sorted(extras, key=arch_sort_key)}
    result.cuda_libraries = _cuda_libraries(scan)
    return result


def _cuda_libraries(scan: _Scan) -> list[CudaLibrary]:
    groups: dict[tuple[str, str, str | None], list[tuple[str, list[Container]]]] = {}
    for name, containers in scan.libs:
        lib = cuda_library_name(name)
        if lib is None:
            continue
        if name in scan.owners:
            package, version = scan.owners[name]
        elif name.startswith(("torch/", "torch.libs/")):
            package, version = "torch (bundled)", None
        else:
            package, version = "unknown", None
        groups.setdefault((lib, package, version), []).append((name, containers))
    out = []
    for (lib, package, version), members in groups.items():
        archs: set[str] = set()
        count = 0
        for _, containers in members:
            count += len(containers)
            for container in containers:
                archs.update(container.archs)
        ordered = sorted(archs, key=arch_sort_key)
        out.append(
            CudaLibrary(
                name=lib,
                package=package,
                version=version,
                files=sorted(n for n, _ in members),
                containers=count,
                sass=[a for a in ordered if a.startswith("sm_")],
                ptx=[a for a in ordered if a.startswith("compute_")],
            )
        )
    return sorted(out, key=lambda lib: (lib.name, lib.package))


# ---------------------------------------------------------------- CLI


def format_libraries(libs: Sequence[CudaLibrary], ccs: Sequence[tuple[int, int]]) -> list[str]:
    """Human lines: one per CUDA library (its package, SASS and PTX), then per GPU capability
    each library's coverage and the weakest link."""
    lines = []
    for lib in libs:
        version = f" {lib.version}" if lib.version else ""
        if not lib.containers:
            lines.append(f"library {lib.display} ({lib.package}{version}): no kernels")
            continue
        lines.append(
            f"library {lib.display} ({lib.package}{version}): "
            f"sass {' '.join(lib.sass) or '-'}; ptx {' '.join(lib.ptx) or '-'}"
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
    parser = argparse.ArgumentParser(
        prog="python -m compat.inspect_torch",
        description="Measure the CUDA arch list of a torch wheel, install or library.",
    )
    parser.add_argument("paths", nargs="+", help="wheel, torch dir, site-packages, venv or .so")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument(
        "--cc",
        action="append",
        default=[],
        metavar="X.Y",
        help="judge every CUDA library for a GPU of this compute capability (repeatable)",
    )
    args = parser.parse_args(argv)
    ccs = []
    for text in args.cc:
        major, _, minor = text.partition(".")
        if not (major.isdigit() and minor.isdigit()):
            parser.error(f"--cc {text!r}: expected a compute capability X.Y such as 8.6")
        ccs.append((int(major), int(minor)))
    status = 0
    out: list[dict[str, Any]] = []
    for path in args.paths:
        try:
            result = inspect_path(path)
        except (InspectError, FatbinError, OSError, zipfile.BadZipFile) as exc:
            print(f"error: {exc}", file=sys.stderr)
            status = 2
            continue
        if args.json:
            d = result.to_dict()
            if ccs:
                d["library_coverage"] = [
                    c.to_dict() for cc in ccs for c in library_coverage(result.cuda_libraries, cc)
                ]
            out.append(d)
            continue
        print(f"{result.path}: torch {result.torch_version} ({result.variant})")
        if result.cpu_only:
            print("  cpu only: no .nv_fatbin section")
            continue
        if result.main_library:
            print(f"  main library: {result.main_library}")
            print(f"  sass:   {' '.join(result.sass) or '-'}")
            print(f"  ptx:    {' '.join(result.ptx) or '-'}")
            for arch, where in result.extras.items():
                print(f"  extra:  {arch}: {'; '.join(where)}")
        for line in format_libraries(result.cuda_libraries, ccs):
            print(f"  {line}")
    if args.json:
        print(json.dumps(out if len(out) != 1 else out[0], indent=2))
    return status


if __name__ == "__main__":
    sys.exit(main())
