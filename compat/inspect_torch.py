"""Measure the CUDA arch list of a PyTorch build from its binaries.

``inspect_path(path)`` accepts a wheel (``.whl``), an installed ``torch``
package directory, a site-packages directory or a virtual environment holding
``torch``, or a single shared object.  It reads the fatbin containers (``.nv_fatbin``
and data sections) of every shared object (see :mod:`compat.fatbin`); nothing is imported.

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
from compat.fatbin import Container, FatbinError, scan_file

__all__ = [
    "InspectError",
    "InspectResult",
    "LibraryInfo",
    "arch_sort_key",
    "inspect_path",
    "parse_version_py",
]

MAIN_LIBRARIES = ("libtorch_cuda.so", "libtorch_cuda_cu.so", "libcaffe2_gpu.so")
_CHUNK = 1 << 20
_ELF_MAGIC = b"\x7fELF"
_LIB_RE = re.compile(r"\.so(\.\d+)*$")
_TORCH_OWN_RE = re.compile(r"^(lib)?(torch|caffe2|c10|_C)")


class InspectError(ValueError):
    """The path is not a wheel, a torch installation or a shared object."""


@dataclass(frozen=True)
class LibraryInfo:
    """One shared object with fatbin containers (``compat.fatbin.scan_file``)."""

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
        }


def arch_sort_key(name: str) -> tuple[int, int, int, str]:
    """Sort ``sm_90`` before ``sm_90a`` before ``sm_100``; PTX after SASS."""
    prefix, (major, minor), suffix = rules.parse_arch(name)
    return (0 if prefix == "sm" else 1, major, minor, suffix)


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
        if not any(n.startswith("torch/") for n in names):
            raise InspectError(f"{path}: the archive holds no torch/ package")
        if "torch/version.py" in names:
            scan.version_text = zf.read("torch/version.py").decode("utf-8", "replace")
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
    return scan


def _is_lib_member(member: str) -> bool:
    top = member.split("/", 1)[0]
    return top in ("torch", "torch.libs") and bool(_LIB_RE.search(member))


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


def _iter_dir_libs(torch_dir: Path) -> Iterable[Path]:
    roots = [torch_dir, torch_dir.parent / "torch.libs"]
    for root in roots:
        if not root.is_dir():
            continue
        for lib in sorted(root.rglob("*.so*")):
            if lib.is_symlink() or not lib.is_file() or not _LIB_RE.search(lib.name):
                continue
            if _is_elf(lib):
                yield lib


def _scan_dir(path: Path) -> _Scan:
    torch_dir = _find_torch_dir(path)
    if torch_dir is None:
        raise InspectError(
            f"{path}: no torch package found (expected a torch/ package directory, "
            "a site-packages holding torch/, or a virtual environment)"
        )
    scan = _Scan(str(path))
    version_py = torch_dir / "version.py"
    if version_py.is_file():
        scan.version_text = version_py.read_text(encoding="utf-8", errors="replace")
    base = torch_dir.parent
    for lib in _iter_dir_libs(torch_dir):
        name = lib.relative_to(base).as_posix()
        containers = _scan_one(name, lib)
        if containers is not None:
            scan.libs.append((name, containers))
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
    return result


# ---------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compat.inspect_torch",
        description="Measure the CUDA arch list of a torch wheel, install or library.",
    )
    parser.add_argument("paths", nargs="+", help="wheel, torch dir, site-packages, venv or .so")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
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
            out.append(result.to_dict())
            continue
        print(f"{result.path}: torch {result.torch_version} ({result.variant})")
        if result.cpu_only:
            print("  cpu only: no .nv_fatbin section")
            continue
        print(f"  main library: {result.main_library}")
        print(f"  sass:   {' '.join(result.sass) or '-'}")
        print(f"  ptx:    {' '.join(result.ptx) or '-'}")
        for arch, where in result.extras.items():
            print(f"  extra:  {arch}: {'; '.join(where)}")
    if args.json:
        print(json.dumps(out if len(out) != 1 else out[0], indent=2))
    return status


if __name__ == "__main__":
    sys.exit(main())
