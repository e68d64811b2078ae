"""Typed, immutable records of the compatibility matrix.

Plain ``__slots__`` classes rather than dataclasses: ``dataclasses`` imports ``inspect``,
which alone costs a quarter of the CLI's start-up budget (see ``scripts/bench_cli.py``).

Versions are held as tuples of ints (``VersionKey``) produced by :func:`version_key`, which
accepts only plain numeric versions and is checked against ``packaging.version.Version``
when the data is compiled (``compat.data``). Nothing compares versions as strings.
"""

from __future__ import annotations

# `typing` costs a few milliseconds of start-up; annotations only need it for mypy.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

VersionKey = tuple[int, ...]
CC = tuple[int, int]


class CompatError(ValueError):
    """Bad input from a user: the message names the bad value and what is allowed."""


class CompatDataError(CompatError):
    """The matrix data is malformed or unreadable."""


_VERSIONS: dict[str, VersionKey] = {}


def version_key(text: str, what: str = "version") -> VersionKey:
    """Parse a plain numeric version such as ``"470.223.02"`` or ``"11.8"`` (memoised: the
    matrix repeats a few dozen versions hundreds of times, and a resolve loads it all).

    >>> version_key("520.61.05")
    (520, 61, 5)
    """
    key = _VERSIONS.get(text)
    if key is not None:
        return key
    parts = text.strip().split(".")
    if not text.strip() or not all(map(str.isdigit, parts)):
        raise CompatError(
            f"malformed {what} {text!r}: expected dotted numbers such as 535.183.01 or 12.6"
        )
    key = _VERSIONS[text] = tuple(map(int, parts))
    return key


def cmp_key(key: VersionKey, width: int = 4) -> VersionKey:
    """Pad a version key so that (11, 8) and (11, 8, 0) compare equal."""
    return key + (0,) * (width - len(key)) if len(key) < width else key


def major_minor(key: VersionKey) -> tuple[int, int]:
    """The X.Y release of a version key: ``(12, 4, 1)`` -> ``(12, 4)``, ``(12,)`` -> ``(12, 0)``."""
    return key[0], key[1] if len(key) > 1 else 0


class ComputeCapability(tuple[int, int]):
    """A compute capability X.Y; compares as the tuple ``(X, Y)`` and knows its spellings."""

    __slots__ = ()

    def __new__(cls, major: int, minor: int) -> ComputeCapability:
        return super().__new__(cls, (major, minor))

    @classmethod
    def parse(cls, text: str) -> ComputeCapability:
        """``"8.6"`` -> ``ComputeCapability(8, 6)``."""
        major, _, minor = text.partition(".")
        if not (major.isdigit() and minor.isdigit()):
            raise CompatError(f"malformed compute capability {text!r}: expected X.Y such as 8.6")
        return cls(int(major), int(minor))

    @property
    def text(self) -> str:
        """``"8.6"``."""
        return f"{self[0]}.{self[1]}"

    @property
    def sm(self) -> str:
        """``"sm_86"``: the SASS entry and the name ``TORCH_CUDA_ARCH_LIST`` users know."""
        return f"sm_{self[0]}{self[1]}"

    def describe(self) -> str:
        """``"sm_86 (8.6)"``."""
        return f"{self.sm} ({self.text})"


_CCS: dict[str, ComputeCapability] = {}


def cc_key(text: str) -> ComputeCapability:
    """Parse a compute capability ``"8.6"`` into ``(8, 6)`` (memoised as :func:`version_key`)."""
    cc = _CCS.get(text)
    if cc is None:
        cc = _CCS[text] = ComputeCapability.parse(text)
    return cc


def cc_str(cc: CC) -> str:
    """``(8, 6)`` -> ``"8.6"``."""
    return ComputeCapability(*cc).text


def sm_name(cc: CC) -> str:
    """``(8, 6)`` -> ``"sm_86"``."""
    return ComputeCapability(*cc).sm


class DriverVersion(tuple[int, ...]):
    """A driver version's numeric key that remembers how the user wrote it (535.183.01).

    A bare branch (``550``) stands for "some release of that branch": it is judged by the
    branch table (the newest CUDA each branch runs) instead of an exact version."""

    text: str

    def __new__(cls, text: str) -> DriverVersion:
        obj = super().__new__(cls, version_key(text, "driver version"))
        obj.text = text.strip()
        return obj

    @property
    def branch_only(self) -> bool:
        return len(self) == 1

    @property
    def branch(self) -> int:
        return self[0]


def parse_driver(text: str | None) -> DriverVersion | None:
    """A user's driver version (``535.183.01``, ``550``), or None when not given."""
    if text is None or str(text).strip() == "":
        return None
    key = DriverVersion(str(text))
    if not 1 <= len(key) <= 3 or key[0] < 100:
        raise CompatError(
            f"malformed driver version {text!r}: expected BRANCH[.MINOR[.PATCH]] such as "
            "535.183.01, 470.256.02 or 550"
        )
    return key


def describe_driver(drv: VersionKey) -> str:
    """How a reason names a driver: ``branch 550`` for a bare branch, else its version."""
    if isinstance(drv, DriverVersion):
        return f"branch {drv.text}" if drv.branch_only else drv.text
    return ".".join(str(p) for p in drv)


class Architecture:
    __slots__ = (
        "compute_capabilities",
        "display",
        "last_driver_branch",
        "min_driver_branch",
        "name",
        "source",
    )

    def __init__(self, row: dict[str, Any]) -> None:
        self.name: str = row["name"]
        self.display: str = row.get("display") or row["name"].title()
        self.compute_capabilities: tuple[CC, ...] = tuple(
            cc_key(c) for c in row["compute_capabilities"]
        )
        self.min_driver_branch: int = int(row["min_driver_branch"])
        last = row.get("last_driver_branch")
        self.last_driver_branch: int | None = None if last is None else int(last)
        self.source: str = row["source"]

    def drives(self, branch: int) -> bool:
        """Whether driver branch ``branch`` drives this architecture."""
        if branch < self.min_driver_branch:
            return False
        return self.last_driver_branch is None or branch <= self.last_driver_branch


class GPU:
    __slots__ = (
        "aliases",
        "architecture",
        "compute_capability",
        "confidence",
        "memory_gib",
        "min_driver_branch",
        "name",
        "pci_ids",
        "segment",
        "source",
    )

    def __init__(self, row: dict[str, Any]) -> None:
        self.name: str = row["name"]
        self.aliases: tuple[str, ...] = tuple(row.get("aliases") or ())
        self.pci_ids: tuple[str, ...] = tuple(p.lower() for p in row.get("pci_ids") or ())
        self.compute_capability: ComputeCapability = cc_key(row["compute_capability"])
        self.architecture: str = row["architecture"]
        mem = row.get("memory_gib")
        self.memory_gib: float | None = None if mem is None else float(mem)
        self.segment: str = row.get("segment") or "datacenter"
        mdb = row.get("min_driver_branch")
        self.min_driver_branch: int | None = None if mdb is None else int(mdb)
        self.source: str = row["source"]
        self.confidence: str = row.get("confidence") or "sourced"

    @property
    def sm(self) -> str:
        return sm_name(self.compute_capability)

    def to_dict(self, arch: Architecture | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "aliases": list(self.aliases),
            "pci_ids": list(self.pci_ids),
            "compute_capability": cc_str(self.compute_capability),
            "sm": self.sm,
            "architecture": self.architecture,
            "memory_gib": self.memory_gib,
            "segment": self.segment,
            "source": self.source,
            "confidence": self.confidence,
        }
        if arch is not None:
            out["min_driver_branch"] = self.min_driver_branch or arch.min_driver_branch
            out["last_driver_branch"] = arch.last_driver_branch
        return out


class DriverBranch:
    __slots__ = ("branch", "confidence", "kind", "max_cuda", "released", "source")

    def __init__(self, row: dict[str, Any]) -> None:
        self.branch: int = int(row["branch"])
        self.max_cuda: VersionKey = version_key(str(row["max_cuda"]), "CUDA version")
        self.kind: str = row.get("kind") or "production"
        self.released: str = str(row.get("released") or "")
        self.source: str = row["source"]
        self.confidence: str = row.get("confidence") or "sourced"


class Toolkit:
    __slots__ = (
        "confidence",
        "max_cc",
        "min_cc",
        "min_driver",
        "min_driver_text",
        "minor_compat_driver",
        "minor_compat_text",
        "source",
        "version",
        "version_text",
    )

    def __init__(self, row: dict[str, Any]) -> None:
        self.version_text: str = str(row["version"])
        self.version: VersionKey = version_key(self.version_text, "CUDA version")
        self.min_driver_text: str = str(row["min_driver"])
        self.min_driver: VersionKey = version_key(self.min_driver_text, "driver version")
        mc = row.get("minor_compat_driver")
        self.minor_compat_text: str | None = None if mc is None else str(mc)
        self.minor_compat_driver: VersionKey | None = (
            None if mc is None else version_key(str(mc), "driver version")
        )
        self.min_cc: CC = cc_key(str(row["min_compute_capability"]))
        self.max_cc: CC = cc_key(str(row["max_compute_capability"]))
        self.source: str = row["source"]
        self.confidence: str = row.get("confidence") or "sourced"


class Variant:
    __slots__ = (
        "channels",
        "conda_ptx",
        "conda_sass",
        "confidence",
        "cuda",
        "cuda_text",
        "name",
        "ptx",
        "sass",
        "source",
    )

    def __init__(self, row: dict[str, Any]) -> None:
        self.name: str = row["name"]
        cuda = row.get("cuda")
        self.cuda_text: str | None = None if cuda is None else str(cuda)
        self.cuda: VersionKey | None = None if cuda is None else version_key(str(cuda), "CUDA")
        self.channels: tuple[str, ...] = tuple(row.get("channels") or ("pip",))
        self.sass: tuple[str, ...] = tuple(row.get("sass") or ())
        self.ptx: tuple[str, ...] = tuple(row.get("ptx") or ())
        conda = row.get("conda") or {}
        self.conda_sass: tuple[str, ...] = tuple(conda.get("sass", self.sass))
        self.conda_ptx: tuple[str, ...] = tuple(conda.get("ptx", self.ptx))
        self.source: str = row["source"]
        self.confidence: str = row.get("confidence") or "sourced"

    def archs(self, channel: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(SASS, PTX) entries of this variant's build for ``channel`` (pip or conda)."""
        if channel == "conda":
            return self.conda_sass, self.conda_ptx
        return self.sass, self.ptx


class Release:
    __slots__ = (
        "conda_style",
        "key",
        "pip_style",
        "pypi_default",
        "python",
        "released",
        "source",
        "torchaudio",
        "torchvision",
        "variants",
        "version",
    )

    def __init__(self, row: dict[str, Any]) -> None:
        self.version: str = str(row["version"])
        self.key: VersionKey = version_key(self.version, "torch version")
        self.released: str = str(row.get("released") or "")
        self.python: tuple[str, ...] = tuple(str(p) for p in row.get("python") or ())
        tv, ta = row.get("torchvision"), row.get("torchaudio")
        self.torchvision: str | None = None if tv is None else str(tv)
        self.torchaudio: str | None = None if ta is None else str(ta)
        self.pypi_default: str | None = row.get("pypi_default")
        self.pip_style: str = row.get("pip_style") or "index"
        self.conda_style: str | None = row.get("conda_style")
        self.source: str = row["source"]
        self.variants: tuple[Variant, ...] = tuple(Variant(v) for v in row.get("variants") or ())

    def variant(self, name: str) -> Variant | None:
        for v in self.variants:
            if v.name == name:
                return v
        return None


class Container:
    __slots__ = (
        "confidence",
        "cuda",
        "image",
        "min_cc",
        "min_cc_source",
        "min_driver",
        "source",
        "tag",
        "torch",
    )

    def __init__(self, row: dict[str, Any]) -> None:
        self.tag: str = str(row["tag"])
        self.image: str = row["image"]
        self.torch: str = str(row["torch"])
        self.cuda: str = str(row["cuda"])
        self.min_driver: str = str(row["min_driver"])
        self.min_cc: CC = cc_key(str(row["min_compute_capability"]))
        # Where a source confirms the GPU floor; None: the floor is unverified.
        self.min_cc_source: str | None = row.get("min_compute_capability_source")
        self.source: str = row["source"]
        self.confidence: str = row.get("confidence") or "sourced"


class LibraryBuild:
    """One measured CUDA library wheel (``nvidia-cudnn-cu12==9.5.1.17``): its arch set."""

    __slots__ = ("confidence", "library", "package", "ptx", "sass", "source", "version")

    def __init__(self, row: dict[str, Any]) -> None:
        self.library: str = str(row["library"])
        self.package: str = str(row["package"])
        self.version: str = str(row["version"])
        self.sass: tuple[str, ...] = tuple(row.get("sass") or ())
        self.ptx: tuple[str, ...] = tuple(row.get("ptx") or ())
        self.source: str = row["source"]
        self.confidence: str = row.get("confidence") or "sourced"

    @property
    def spec(self) -> str:
        return f"{self.package}=={self.version}"


class LibraryPin:
    """The CUDA library wheels one torch build pins (``Requires-Dist`` of its wheel)."""

    __slots__ = ("confidence", "packages", "source", "torch", "variant")

    def __init__(self, row: dict[str, Any]) -> None:
        self.torch: str = str(row["torch"])
        self.variant: str = str(row["variant"])
        self.packages: tuple[str, ...] = tuple(str(p) for p in row["packages"])
        self.source: str = row["source"]
        self.confidence: str = row.get("confidence") or "sourced"


class KnownError:
    __slots__ = ("causes", "checks", "fixes", "id", "patterns", "source", "title")

    def __init__(self, row: dict[str, Any]) -> None:
        self.id: str = row["id"]
        self.patterns: tuple[str, ...] = tuple(row["patterns"])
        self.title: str = row.get("title") or row["id"]
        cause = row.get("cause") or ""
        self.causes: str = cause
        self.checks: tuple[str, ...] = tuple(row.get("checks") or ())
        self.fixes: tuple[str, ...] = tuple(row.get("fixes") or ())
        self.source: str = row["source"]
