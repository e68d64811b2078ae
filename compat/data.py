"""Loading, validating and caching the matrix data in ``compat/data/*.yaml``.

The YAML files are the single source of truth. Parsing and validating them costs tens of
milliseconds, so the validated tables are kept, compiled with :mod:`marshal`, in the user's
cache directory, keyed by the interpreter, gpuprov's version and the name, size and
modification time of every YAML file and of the module that compiles them; any edit makes a
new key (:func:`cached`, also for ``compat.horovod``). Only data that passed validation is
ever written to the cache; where it cannot be written, the data is parsed on every run. The
start-up path avoids ``pathlib``, ``json``, ``typing``, PyYAML and ``packaging`` (each costs
milliseconds; see ``scripts/bench_cli.py``).
"""

from __future__ import annotations

import marshal
import os
import sys

from compat import __version__
from compat.model import (
    GPU,
    Architecture,
    CompatDataError,
    Container,
    DriverBranch,
    KnownError,
    LibraryBuild,
    LibraryPin,
    Release,
    Toolkit,
    VersionKey,
    cc_key,
    cmp_key,
    major_minor,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path
    from typing import Any, TypeVar

    T = TypeVar("T")

CACHE_FORMAT = 5
DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")

# Table name -> (top-level key, required fields, file glob). The one list of the data's tables:
# tests/unit/test_data.py and docs/design.md are checked against it.
TABLES: dict[str, tuple[str, tuple[str, ...], str]] = {
    "architectures": (
        "architectures",
        ("name", "compute_capabilities", "min_driver_branch", "source"),
        "architectures.yaml",
    ),
    "gpus": (
        "gpus",
        ("name", "pci_ids", "compute_capability", "architecture", "source"),
        "gpus.yaml",
    ),
    "branches": ("branches", ("branch", "max_cuda", "source"), "drivers.yaml"),
    "debian": ("debian", ("release", "version", "branch", "packages", "source"), "drivers.yaml"),
    "toolkits": (
        "toolkits",
        ("version", "min_driver", "min_compute_capability", "max_compute_capability", "source"),
        "cuda.yaml",
    ),
    "releases": ("releases", ("version", "python", "variants", "source"), "torch_*.yaml"),
    "containers": (
        "containers",
        ("tag", "image", "torch", "cuda", "min_driver", "source"),
        "ngc.yaml",
    ),
    "errors": ("errors", ("id", "patterns", "source"), "errors.yaml"),
    "libraries": (
        "libraries",
        ("library", "package", "version", "source"),
        "libraries.yaml",
    ),
    "pins": ("pins", ("torch", "variant", "packages", "source"), "libraries.yaml"),
    "floors": ("floors", ("gpu", "source"), "perf.yaml"),
}
OPTIONAL_TABLES = {"debian", "containers", "floors", "libraries", "pins"}
_VARIANT_FIELDS = ("name", "channels", "source")


def data_dir() -> str:
    return os.environ.get("GPU_COMPAT_DATA") or DATA_DIR


def data_file(name: str) -> str:
    """The file ``name`` of the data directory: GPU_COMPAT_DATA's when it holds one, else
    gpuprov's."""
    own = os.path.join(data_dir(), name)
    return own if os.path.exists(own) else os.path.join(DATA_DIR, name)


def _yaml_files(root: str) -> list[str]:
    try:
        names = os.listdir(root)
    except OSError as exc:
        raise CompatDataError(f"cannot read the matrix data directory {root}: {exc}") from exc
    return sorted(os.path.join(root, n) for n in names if n.endswith(".yaml"))


def _stamp(files: Sequence[str | Path], kind: str, code: str) -> str | None:
    """What a cache entry is valid for: the cache format, gpuprov's version, the interpreter,
    and the name, size and modification time of each file and of ``code``; None: no cache."""
    if os.environ.get("GPU_COMPAT_NO_CACHE"):
        return None
    stamp = [str(CACHE_FORMAT), kind, __version__, sys.implementation.cache_tag or sys.version]
    for f in (*files, code):
        try:
            st = os.stat(f)
        except OSError:
            return None
        stamp.append(f"{os.fspath(f)}:{st.st_size}:{st.st_mtime_ns}")
    return "\n".join(stamp)


def _fnv1a(text: str) -> int:
    """32-bit FNV-1a of ``text``: the cache file's name. Pure Python on purpose: importing
    zlib for its crc32 (an extension module) cost more start-up than hashing a stamp of a few
    hundred bytes here (scripts/bench_cli.py)."""
    value = 0x811C9DC5
    for byte in text.encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def cache_dir() -> str:
    """gpuprov's cache directory: $XDG_CACHE_HOME/gpuprov (~/.cache/gpuprov without it), for the
    matrix's compiled tables here and the lab's installed packages (scripts/gpuprov_lab)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gpuprov")


def _path(kind: str, stamp: str) -> str:
    # The entry holds its whole stamp, so that two stamps with one key are only a miss.
    key = _fnv1a(stamp)
    return os.path.join(cache_dir(), f"{kind}-{key:08x}.marshal")


def _cache_path(
    files: Sequence[str | Path], kind: str = "matrix", code: str = __file__
) -> str | None:
    """The cache file of what ``code`` compiles from ``files``; None when not cached."""
    stamp = _stamp(files, kind, code)
    return None if stamp is None else _path(kind, stamp)


def cached(kind: str, files: Sequence[str], build: Callable[[], T], code: str = __file__) -> T:
    """``build()``, or what it returned on an earlier run for the same ``files`` (names, sizes,
    modification times) and the same ``code`` (the module of ``build``). ``build`` reads and
    validates ``files``; what it returns must be plain data (dicts, lists, strings, numbers)."""
    stamp = _stamp(files, kind, code)
    if stamp is not None:
        try:
            with open(_path(kind, stamp), "rb") as fh:
                # marshal.load(fh) reads object by object from the file: ten times slower.
                doc = marshal.loads(fh.read())
            if isinstance(doc, dict) and doc.get("stamp") == stamp:
                value: T = doc["value"]
                return value
        except (OSError, ValueError, EOFError, TypeError, KeyError):
            pass
    value = build()
    if stamp is not None:
        _write_cache(_path(kind, stamp), stamp, value)
    return value


def load_raw(root: str | Path | None = None) -> dict[str, list[dict[str, Any]]]:
    """Return the validated tables as plain dicts, from the cache when it is fresh."""
    files = _yaml_files(os.fspath(root) if root is not None else data_dir())
    return cached("matrix", files, lambda: compile_tables(files))


def _write_cache(cache: str, stamp: str, value: object) -> None:
    try:
        doc = {"format": CACHE_FORMAT, "stamp": stamp, "value": _interned(value)}
        blob = marshal.dumps(doc)
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        tmp = f"{cache}.{os.getpid()}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(blob)
        os.replace(tmp, cache)
    except (OSError, ValueError):
        pass  # a read-only home (or data marshal cannot hold) only costs speed


def _interned(obj: Any) -> Any:
    """Intern every short string, so that marshal writes each repeated one (sm_80, keys) once;
    a long one (a source, a note) is rarely repeated, and loads faster as it is."""
    if isinstance(obj, dict):
        return {sys.intern(k): _interned(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_interned(x) for x in obj]
    return sys.intern(obj) if isinstance(obj, str) and len(obj) <= 40 else obj


def _read_yaml(path: str | Path) -> dict[str, Any]:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        doc = yaml.load(text, Loader=loader)  # noqa: S506 - safe loader
    except (OSError, UnicodeDecodeError) as exc:
        raise CompatDataError(f"cannot read matrix file {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
        raise CompatDataError(f"matrix file {path} is not valid YAML: {problem}{where}") from exc
    if not isinstance(doc, dict):
        raise CompatDataError(f"matrix file {path} must hold a mapping at the top level")
    return doc


def compile_tables(files: Sequence[str | Path]) -> dict[str, list[dict[str, Any]]]:
    """Parse and validate every table; raise :class:`CompatDataError` naming the bad row."""
    from fnmatch import fnmatch

    docs = {os.path.basename(f): _read_yaml(f) for f in files}
    tables: dict[str, list[dict[str, Any]]] = {}
    for table, (key, required, pattern) in TABLES.items():
        rows: list[dict[str, Any]] = []
        found = False
        for fname, doc in docs.items():
            if not fnmatch(fname, pattern) or key not in doc:
                continue
            found = True
            value = doc[key]
            if not isinstance(value, list):
                raise CompatDataError(f"{fname}: '{key}' must be a list")
            for i, row in enumerate(value):
                where = f"{fname}: {key}[{i}]"
                _require(row, required, where)
                rows.append(row)
        if not found and table not in OPTIONAL_TABLES:
            raise CompatDataError(f"matrix data has no '{key}' table (expected in {pattern})")
        tables[table] = rows
    tables["releases"].sort(key=lambda r: version_of(str(r["version"]), "torch version"))
    _validate(tables)
    return tables


def _require(row: object, required: tuple[str, ...], where: str) -> None:
    if not isinstance(row, dict):
        raise CompatDataError(f"{where}: expected a mapping, got {type(row).__name__}")
    missing = [k for k in required if row.get(k) in (None, "")]
    if missing:
        name = row.get("name") or row.get("version") or row.get("id") or ""
        raise CompatDataError(f"{where} {name}: missing required field(s) {', '.join(missing)}")


def version_of(text: str, what: str) -> VersionKey:
    """Validate a data version with ``packaging`` and return its numeric key."""
    from packaging.version import InvalidVersion, Version

    try:
        v = Version(text)
    except InvalidVersion as exc:
        raise CompatDataError(f"invalid {what} {text!r} in the matrix data") from exc
    if v.pre or v.post or v.dev or v.local or v.epoch:
        raise CompatDataError(f"{what} {text!r} in the matrix data must be a plain release")
    return tuple(int(p) for p in text.split("."))


def _validate(tables: dict[str, list[dict[str, Any]]]) -> None:
    for row in tables["toolkits"]:
        for field in ("version", "min_driver", "minor_compat_driver"):
            if row.get(field) is not None:
                version_of(str(row[field]), f"CUDA {field}")
    for row in tables["branches"]:
        version_of(str(row["max_cuda"]), "branch max_cuda")
    for row in tables["gpus"]:
        cc_key(str(row["compute_capability"]))
    for rel in tables["releases"]:
        where = f"torch {rel['version']}"
        if not isinstance(rel["variants"], list) or not rel["variants"]:
            raise CompatDataError(f"{where}: 'variants' must be a non-empty list")
        for v in rel["variants"]:
            _require(v, _VARIANT_FIELDS, f"{where} variant")
            if v.get("cuda") is not None:
                version_of(str(v["cuda"]), f"{where} {v['name']} CUDA version")
            for entry in list(v.get("sass") or []) + list((v.get("conda") or {}).get("sass", [])):
                if not str(entry).startswith("sm_"):
                    raise CompatDataError(f"{where} {v['name']}: SASS entry {entry!r} is not sm_XY")
            for entry in list(v.get("ptx") or []) + list((v.get("conda") or {}).get("ptx", [])):
                if not str(entry).startswith("compute_"):
                    raise CompatDataError(
                        f"{where} {v['name']}: PTX entry {entry!r} is not compute_XY"
                    )
    _validate_libraries(tables)


def _validate_libraries(tables: dict[str, list[dict[str, Any]]]) -> None:
    builds = set()
    for row in tables.get("libraries", ()):
        where = f"libraries.yaml: {row['package']}=={row['version']}"
        for entry in row.get("sass") or ():
            if not str(entry).startswith("sm_"):
                raise CompatDataError(f"{where}: SASS entry {entry!r} is not sm_XY")
        for entry in row.get("ptx") or ():
            if not str(entry).startswith("compute_"):
                raise CompatDataError(f"{where}: PTX entry {entry!r} is not compute_XY")
        builds.add(f"{row['package']}=={row['version']}")
    releases = {str(r["version"]): r for r in tables["releases"]}
    for pin in tables.get("pins", ()):
        where = f"libraries.yaml: pin torch {pin['torch']}+{pin['variant']}"
        rel = releases.get(str(pin["torch"]))
        if rel is None or not any(v["name"] == pin["variant"] for v in rel["variants"]):
            raise CompatDataError(f"{where}: no such release and variant in torch_*.yaml")
        for package in pin["packages"]:
            if package not in builds:
                raise CompatDataError(f"{where}: {package} has no measured row in 'libraries'")


class Matrix:
    """The whole matrix, indexed for the queries in :mod:`compat.resolution` and its neighbours."""

    def __init__(self, tables: dict[str, list[dict[str, Any]]]) -> None:
        self.architectures: dict[str, Architecture] = {
            r["name"]: Architecture(r) for r in tables["architectures"]
        }
        self.gpus: tuple[GPU, ...] = tuple(GPU(r) for r in tables["gpus"])
        self.branches: tuple[DriverBranch, ...] = tuple(
            sorted((DriverBranch(r) for r in tables["branches"]), key=lambda b: b.branch)
        )
        self.debian: tuple[dict[str, Any], ...] = tuple(tables.get("debian", ()))
        self.toolkits: tuple[Toolkit, ...] = tuple(
            sorted((Toolkit(r) for r in tables["toolkits"]), key=lambda t: cmp_key(t.version))
        )
        self.releases: tuple[Release, ...] = tuple(Release(r) for r in tables["releases"])
        self.containers: tuple[Container, ...] = tuple(
            Container(r) for r in tables.get("containers", ())
        )
        self.errors: tuple[KnownError, ...] = tuple(KnownError(r) for r in tables["errors"])
        self.libraries: dict[str, LibraryBuild] = {
            b.spec: b for b in (LibraryBuild(r) for r in tables.get("libraries", ()))
        }
        self.pins: dict[tuple[str, str], LibraryPin] = {
            (p.torch, p.variant): p for p in (LibraryPin(r) for r in tables.get("pins", ()))
        }
        self._pci: dict[str, GPU] = {}
        for g in self.gpus:
            for pci in g.pci_ids:
                self._pci.setdefault(pci, g)

    def gpu_by_pci(self, pci_id: str) -> GPU | None:
        """The GPU with PCI ID ``10de:xxxx`` (also ``0x1023``, ``1023``), or None."""
        dev = pci_id.lower().strip()
        if ":" in dev:
            vendor, _, dev = dev.partition(":")
            if vendor.removeprefix("0x") != "10de":
                return None
        dev = dev.removeprefix("0x")
        return self._pci.get(f"10de:{dev.zfill(4)}")

    def architecture_of(self, gpu: GPU) -> Architecture:
        try:
            return self.architectures[gpu.architecture]
        except KeyError:
            raise CompatDataError(
                f"GPU {gpu.name!r} names unknown architecture {gpu.architecture!r}"
            ) from None

    def architecture_for_cc(self, cc: tuple[int, int]) -> Architecture | None:
        for arch in self.architectures.values():
            if cc in arch.compute_capabilities:
                return arch
        return None

    def toolkit(self, cuda: VersionKey) -> Toolkit | None:
        want = major_minor(cuda)
        for t in self.toolkits:
            if major_minor(t.version) == want:
                return t
        return None

    def release(self, version: str) -> Release | None:
        for r in self.releases:
            if r.version == version:
                return r
        return None

    def libraries_of(
        self, release: str, variant: str
    ) -> tuple[LibraryPin, list[LibraryBuild]] | None:
        """The measured CUDA library wheels that torch ``release``+``variant`` pins, or None
        when no pin of that build is in the data."""
        pin = self.pins.get((release, variant))
        if pin is None:
            return None
        return pin, [self.libraries[p] for p in pin.packages if p in self.libraries]

    def branch(self, number: int) -> DriverBranch | None:
        for b in self.branches:
            if b.branch == number:
                return b
        return None


_MATRIX: Matrix | None = None


def load(root: str | Path | None = None) -> Matrix:
    """The matrix (loaded once per process unless ``root`` is given)."""
    global _MATRIX
    if root is not None:
        return Matrix(load_raw(root))
    if _MATRIX is None:
        _MATRIX = Matrix(load_raw())
    return _MATRIX
