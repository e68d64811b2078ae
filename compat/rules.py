"""The compatibility rules: pure functions over matrix records, no I/O.

- A SASS entry ``sm_XY`` runs on compute capability X.Z when the major matches and Z >= Y.
  ``sm_XYa`` (arch-specific) runs only on exactly X.Y; ``sm_XYf`` (family-specific) on the
  same major at minor >= Y.
- A PTX entry ``compute_XY`` is JIT-compiled by the driver for any capability >= X.Y (slower
  first launch), but not under CUDA minor-version compatibility, where the driver's JIT is
  older than the PTX.
- The driver must be at least the CUDA toolkit's driver, or at least the minor-version
  compatibility minimum of that CUDA major (CUDA 11 and later), which counts as compatible
  with a note.
- The CUDA toolkit of the build must know the GPU's architecture: its range of compute
  capabilities holds the GPU's, or the GPU is a newer minor of the toolkit's newest major and
  the build carries SASS of that major (a cubin runs on every GPU of its major with the same or
  a higher minor: NVIDIA's Ampere/Ada/Hopper compatibility guides, section 1.2; PyTorch's
  ``_check_cubins``). A newer major reached only through PTX is refused: the toolkit's own
  libraries (cuBLAS, cuDNN) then carry no code for it.
- The driver branch must still drive every GPU in the host.
"""

from __future__ import annotations

from compat.model import CC, GPU, Architecture, ComputeCapability, Toolkit, VersionKey, cmp_key

FULL = "full"
MINOR = "minor-version-compatibility"


_PARSED: dict[str, tuple[str, CC, str]] = {}


def parse_arch(entry: str) -> tuple[str, CC, str]:
    """Split ``sm_90a`` into ``("sm", (9, 0), "a")`` (memoised: a resolve checks thousands of
    entries drawn from a few dozen distinct ones)."""
    parsed = _PARSED.get(entry)
    if parsed is None:
        parsed = _PARSED[entry] = _parse_arch(entry)
    return parsed


def _parse_arch(entry: str) -> tuple[str, CC, str]:
    """Split ``sm_90a`` into ``("sm", (9, 0), "a")``; ``compute_75`` into ``("compute", ...)``.

    Two-digit numbers are X.Y (``sm_86`` = 8.6); three digits are XX.Y (``sm_100`` = 10.0).
    Suffixes: ``a`` (arch-specific) and ``f`` (family-specific).
    """
    kind, _, rest = entry.strip().partition("_")
    suffix = rest[-1:] if rest[-1:] in ("a", "f") else ""
    digits = rest[: len(rest) - len(suffix)]
    if kind not in ("sm", "compute") or not digits.isdigit() or len(digits) < 2:
        raise ValueError(f"not a CUDA arch entry: {entry!r} (expected sm_XY or compute_XY)")
    return kind, (int(digits[:-1]), int(digits[-1])), suffix


def sass_runs_on(entry: str, cc: CC) -> bool:
    """Whether the SASS (cubin) entry ``sm_XY[a|f]`` runs on a GPU of capability ``cc``."""
    kind, (major, minor), suffix = parse_arch(entry)
    if kind != "sm":
        raise ValueError(f"not a SASS entry: {entry!r}")
    if suffix == "a":
        return cc == (major, minor)
    return cc[0] == major and cc[1] >= minor


def ptx_runs_on(entry: str, cc: CC) -> bool:
    """Whether the PTX entry ``compute_XY[a|f]`` can be JIT-compiled for capability ``cc``."""
    kind, (major, minor), suffix = parse_arch(entry)
    if kind != "compute":
        raise ValueError(f"not a PTX entry: {entry!r}")
    if suffix == "a":
        return cc == (major, minor)
    if suffix == "f":
        return cc[0] == major and cc[1] >= minor
    return cc >= (major, minor)


_COVERAGE: dict[tuple[tuple[str, ...], tuple[str, ...], CC], tuple[str, str] | None] = {}


def coverage(sass: tuple[str, ...], ptx: tuple[str, ...], cc: CC) -> tuple[str, str] | None:
    """How a build with these entries runs on ``cc``: ``("sass", entry)``, ``("ptx", entry)``
    or None when it carries no kernel image for it. SASS wins over PTX; the best SASS is the
    one closest to the GPU's capability. (Memoised: planning a fleet asks about the same few
    hundred builds and capabilities again and again.)"""
    key = (sass, ptx, cc)
    try:
        return _COVERAGE[key]
    except KeyError:
        if len(_COVERAGE) >= 4096:
            _COVERAGE.clear()
        found = _COVERAGE[key] = _coverage(sass, ptx, cc)
        return found
    except TypeError:  # lists instead of tuples: not hashable, nothing remembered
        return _coverage(sass, ptx, cc)


def _coverage(sass: tuple[str, ...], ptx: tuple[str, ...], cc: CC) -> tuple[str, str] | None:
    runs = [e for e in sass if sass_runs_on(e, cc)]
    if runs:
        return "sass", max(runs, key=lambda e: parse_arch(e)[1])
    jit = [e for e in ptx if ptx_runs_on(e, cc)]
    if jit:
        return "ptx", max(jit, key=lambda e: parse_arch(e)[1])
    return None


def driver_compat(driver: VersionKey, toolkit: Toolkit) -> str | None:
    """``FULL``, ``MINOR`` or None: whether a driver runs this CUDA toolkit's runtime."""
    if cmp_key(driver) >= cmp_key(toolkit.min_driver):
        return FULL
    mc = toolkit.minor_compat_driver
    if mc is not None and toolkit.version[0] >= 11 and cmp_key(driver) >= cmp_key(mc):
        return MINOR
    return None


def branch_drives(branch: int, gpu: GPU, arch: Architecture) -> bool:
    """Whether driver branch ``branch`` drives ``gpu`` (its architecture's range, or the
    GPU's own later first branch)."""
    if gpu.min_driver_branch is not None and branch < gpu.min_driver_branch:
        return False
    return arch.drives(branch)


def toolkit_supports(toolkit: Toolkit, cc: CC) -> bool:
    """Whether ``cc`` lies in the toolkit's range of compute capabilities."""
    return toolkit.min_cc <= cc <= toolkit.max_cc


def toolkit_runs(toolkit: Toolkit, cc: CC, cov: tuple[str, str] | None) -> bool:
    """Whether a build of ``toolkit`` whose kernels reach ``cc`` through ``cov`` (see
    :func:`coverage`) runs there: inside the toolkit's range, or above it within the same major
    as its newest capability through SASS (a cubin of X.Y runs on X.Z, Z >= Y). A higher major,
    PTX-only coverage and a GPU below the range are refused."""
    if toolkit_supports(toolkit, cc):
        return True
    if cc < toolkit.min_cc or cov is None or cov[0] != "sass":
        return False
    return cc[0] == toolkit.max_cc[0]


def describe_cc(cc: CC) -> str:
    return ComputeCapability(*cc).describe()
