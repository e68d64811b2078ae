"""Evaluation: the verdict of one torch build (release, variant, channel) against a host.

Also the parsing of a host's description (GPUs, driver, Python, channel) and of torch pins.
"""

from __future__ import annotations

from compat import rules
from compat.branches import branch_runs, drives, driving_branches, not_driven_reason
from compat.data import Matrix
from compat.gpus import Target, targets
from compat.model import (
    CompatError,
    DriverVersion,
    Release,
    Toolkit,
    Variant,
    VersionKey,
    cc_key,
    cc_str,
    cmp_key,
    describe_driver,
    parse_driver,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

CHANNELS = ("pip", "conda")


def parse_python(text: str | None) -> str | None:
    if text is None or str(text).strip() == "":
        return None
    parts = str(text).strip().split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts):
        raise CompatError(f"malformed Python version {text!r}: expected X.Y such as 3.11")
    return f"{int(parts[0])}.{int(parts[1])}"


def parse_channel(text: str | None) -> str:
    channel = text or "pip"
    if channel not in CHANNELS:
        raise CompatError(f"unknown channel {channel!r}: allowed are {', '.join(CHANNELS)}")
    return channel


def parse_torch(m: Matrix, spec: str) -> tuple[Release, Variant | None]:
    """``2.5.1`` or ``2.5.1+cu124`` -> (release, variant or None)."""
    version, _, variant_name = str(spec).strip().partition("+")
    release = m.release(version)
    if release is None:
        import difflib

        known = [r.version for r in m.releases]
        close = difflib.get_close_matches(version, known, 3, 0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise CompatError(
            f"unknown torch version {version!r}: known are {known[0]} .. {known[-1]}{hint}"
        )
    if not variant_name:
        return release, None
    variant = release.variant(variant_name)
    if variant is None:
        allowed = ", ".join(v.name for v in release.variants)
        raise CompatError(f"torch {version} has no variant {variant_name!r}: allowed are {allowed}")
    return release, variant


def parse_host(
    m: Matrix,
    gpus: list[Any] | tuple[Any, ...],
    driver: str | None,
    python: str | None,
    channel: str | None,
) -> tuple[list[Target], DriverVersion | None, str | None, str]:
    """Parse and validate a host's description: GPUs, driver, Python, channel."""
    py = parse_python(python)
    if py is not None:
        known = sorted({p for r in m.releases for p in r.python}, key=lambda v: cc_key(v))
        if py not in known:
            raise CompatError(
                f"unknown Python version {python!r}: no torch release supports it; "
                f"known are {', '.join(known)}"
            )
    return (targets(m, list(gpus)), parse_driver(driver), py, parse_channel(channel))


class Evaluation:
    """The verdict of one (release, variant) against a host."""

    __slots__ = (
        "branches",
        "channel",
        "compat",
        "coverage",
        "failures",
        "notes",
        "ok",
        "reasons",
        "release",
        "toolkit",
        "unverified",
        "variant",
    )

    def __init__(self, release: Release, variant: Variant, channel: str) -> None:
        self.release = release
        self.variant = variant
        self.channel = channel
        self.ok = True
        self.reasons: list[str] = []
        self.failures: list[str] = []
        self.notes: list[str] = []
        self.coverage: list[tuple[Target, tuple[str, str] | None]] = []
        self.compat: str | None = None
        self.toolkit: Toolkit | None = None
        self.branches: list[int] = []
        # The `confidence: unverified` rows this verdict rests on ("torch_2.yaml: 2.7.1 cu118").
        self.unverified: list[str] = []

    def rests_on(self, row: object, what: str) -> None:
        if getattr(row, "confidence", None) == "unverified" and what not in self.unverified:
            self.unverified.append(what)

    def fail(self, reason: str) -> None:
        self.ok = False
        self.failures.append(reason)

    @property
    def all_sass(self) -> bool:
        return all(c is not None and c[0] == "sass" for _, c in self.coverage)

    def rank(self) -> tuple[int, int, int, int, VersionKey]:
        """Higher is better: full driver compatibility, SASS everywhere, no unverified row,
        the PyPI default, the newer CUDA."""
        return (
            1 if self.compat == rules.FULL else 0,
            1 if self.all_sass else 0,
            0 if self.unverified else 1,
            1 if self.variant.name == self.release.pypi_default else 0,
            cmp_key(self.variant.cuda or (0,)),
        )


def evaluate(
    m: Matrix,
    release: Release,
    variant: Variant,
    tgts: list[Target],
    driver: VersionKey | None,
    python: str | None,
    channel: str,
) -> Evaluation:
    ev = Evaluation(release, variant, channel)
    label = f"torch {release.version}+{variant.name}"
    ev.rests_on(variant, f"torch_*.yaml: {release.version} {variant.name}")
    for t in tgts:
        ev.rests_on(t.gpu, f"gpus.yaml: {t.label}")
    if channel not in variant.channels:
        ev.fail(f"{label} was not published as a {channel} package")
    if python is not None and python not in release.python:
        ev.fail(
            f"torch {release.version} supports Python {', '.join(release.python)}, not {python}"
        )
    if variant.cuda is None:
        if tgts:
            ev.fail(f"{label} is a CPU-only build: it runs no CUDA kernels on the GPUs")
        return ev
    sass, ptx = variant.archs(channel)
    for t in tgts:
        cov = rules.coverage(sass, ptx, t.cc)
        ev.coverage.append((t, cov))
        if cov is None:
            ev.fail(
                f"{label} ({channel}) has no kernel image for {t.label} "
                f"{rules.describe_cc(t.cc)}: it carries {' '.join(sass + ptx) or 'nothing'}"
            )
        elif cov[0] == "ptx":
            ev.notes.append(
                f"{t.label} runs {label} through PTX {cov[1]} (JIT-compiled: slower first launch)"
            )
        else:
            ev.reasons.append(f"{label} carries {cov[1]} for {t.label} ({cc_str(t.cc)})")
    toolkit = m.toolkit(variant.cuda)
    if toolkit is None:
        ev.fail(f"CUDA {variant.cuda_text} is not in the toolkit table")
        return ev
    ev.toolkit = toolkit
    ev.rests_on(toolkit, f"cuda.yaml: {toolkit.version_text}")
    if channel == "pip":
        _check_libraries(m, ev, tgts, label)
    for t, cov in ev.coverage:
        # A toolkit that predates (or dropped) the GPU's architecture ships CUDA libraries
        # (cuBLAS, cuDNN) without code for it, whatever PTX torch itself carries; a newer minor
        # of the toolkit's newest major runs the build's SASS of that major.
        if rules.toolkit_supports(toolkit, t.cc):
            continue
        if rules.toolkit_runs(toolkit, t.cc, cov):
            ev.notes.append(
                f"CUDA {toolkit.version_text} stops at compute capability "
                f"{cc_str(toolkit.max_cc)}, but {t.label} ({cc_str(t.cc)}) runs its "
                f"{cov[1] if cov else ''} SASS: a cubin runs on every GPU of its major with the "
                "same or a higher minor"
            )
            continue
        ev.fail(
            f"CUDA {toolkit.version_text} supports compute capabilities "
            f"{cc_str(toolkit.min_cc)} to {cc_str(toolkit.max_cc)}, not {t.label} "
            f"({cc_str(t.cc)})"
            + (
                f": a newer major reached only through PTX {cov[1]}; the toolkit's cuBLAS and "
                "cuDNN carry no code for it"
                if cov is not None and cov[0] == "ptx" and t.cc > toolkit.max_cc
                else ""
            )
        )
    if driver is not None:
        _check_driver(m, ev, toolkit, tgts, driver)
    else:
        _plan_driver(m, ev, toolkit, tgts)
    return ev


def _check_libraries(m: Matrix, ev: Evaluation, tgts: list[Target], label: str) -> None:
    """The CUDA library wheels the build pins (libraries.yaml) need a kernel image for every
    GPU: without one torch loads, but every operation of that library fails on the GPU."""
    found = m.libraries_of(ev.release.version, ev.variant.name)
    if found is None:
        _unmeasured_note(m, ev, tgts)
        return
    pin, builds = found
    ev.rests_on(pin, f"libraries.yaml: pin {ev.release.version}+{ev.variant.name}")
    for b in builds:
        ev.rests_on(b, f"libraries.yaml: {b.spec}")
        name = _LIBRARY_NAMES.get(b.library, b.library)
        for t in tgts:
            if rules.coverage(b.sass, b.ptx, t.cc) is None:
                ev.fail(
                    f"{label} pins {name} {b.version} ({b.package}), which has no kernel image "
                    f"for {t.label} {rules.describe_cc(t.cc)}: it carries "
                    f"{' '.join(b.sass + b.ptx)}; torch loads, but every {name} operation fails"
                )
    if builds and all(rules.coverage(b.sass, b.ptx, t.cc) for b in builds for t in tgts):
        names = ", ".join(f"{_LIBRARY_NAMES.get(b.library, b.library)} {b.version}" for b in builds)
        ev.reasons.append(f"its {names} carry kernels for every GPU (measured wheels)")


_LIBRARY_NAMES = {"cudnn": "cuDNN", "cublas": "cuBLAS", "nccl": "NCCL"}


def _unmeasured_note(m: Matrix, ev: Evaluation, tgts: list[Target]) -> None:
    """No pin of this build is in the data: say so where every measured wheel of a library for
    the same CUDA major lacks the GPU (its own wheel likely does too)."""
    major = ev.variant.cuda[0] if ev.variant.cuda else None
    same: dict[str, list[Any]] = {}
    for b in m.libraries.values():
        pkg_major = b.package.rsplit("-cu", 1)[-1] if "-cu" in b.package else ""
        if major is not None and pkg_major == str(major):
            same.setdefault(b.library, []).append(b)
    for lib, builds in sorted(same.items()):
        for t in tgts:
            if not any(rules.coverage(b.sass, b.ptx, t.cc) for b in builds):
                specs = ", ".join(b.spec for b in builds)
                ev.notes.append(
                    f"the {_LIBRARY_NAMES.get(lib, lib)} wheel this build pins was not measured; "
                    f"every measured one for CUDA {major} ({specs}) has no kernel image for "
                    f"{t.label} {rules.describe_cc(t.cc)}"
                )


def _uses_ptx(ev: Evaluation) -> bool:
    return any(c is not None and c[0] == "ptx" for _, c in ev.coverage)


def _check_driver(
    m: Matrix, ev: Evaluation, toolkit: Toolkit, tgts: list[Target], driver: VersionKey
) -> None:
    branch = driver[0]
    dtext = describe_driver(driver)
    for t in tgts:
        if not drives(branch, t):
            ev.fail(not_driven_reason(m, branch, t))
    ev.rests_on(m.branch(branch), f"drivers.yaml: branch {branch}")
    if isinstance(driver, DriverVersion) and driver.branch_only:
        if m.branch(branch) is None:
            known = ", ".join(str(b.branch) for b in m.branches)
            ev.fail(f"driver branch {branch} is not in the matrix: known are {known}")
            return
        compat = branch_runs(m, branch, toolkit)
    else:
        compat = rules.driver_compat(driver, toolkit)
    if compat is None:
        mc = toolkit.minor_compat_text
        extra = f" (minor-version compatibility needs >= {mc})" if mc else ""
        ev.fail(
            f"driver {dtext} is older than CUDA {toolkit.version_text}'s minimum "
            f"{toolkit.min_driver_text}{extra}"
        )
        return
    ev.compat = compat
    if compat == rules.MINOR:
        if _uses_ptx(ev):
            ev.fail(
                f"driver {dtext} runs CUDA {toolkit.version_text} only through minor-version "
                "compatibility, which cannot JIT-compile the PTX this GPU needs"
            )
        else:
            ev.notes.append(
                f"driver {dtext} is below CUDA {toolkit.version_text}'s toolkit driver "
                f"{toolkit.min_driver_text} but at least the minor-version-compatibility "
                f"minimum {toolkit.minor_compat_text}: supported, PTX JIT unavailable"
            )
    else:
        ev.reasons.append(
            f"driver {dtext} >= {toolkit.min_driver_text}, the minimum of CUDA "
            f"{toolkit.version_text}"
        )


def _plan_driver(m: Matrix, ev: Evaluation, toolkit: Toolkit, tgts: list[Target]) -> None:
    usable = driving_branches(m, tgts)
    if not usable:
        ev.fail("no driver branch drives all of: " + ", ".join(t.label for t in tgts))
        return
    full = [b for b in usable if branch_runs(m, b, toolkit) == rules.FULL]
    minor = [b for b in usable if branch_runs(m, b, toolkit) == rules.MINOR]
    if full:
        ev.compat = rules.FULL
        ev.branches = full
        ev.rests_on(m.branch(full[-1]), f"drivers.yaml: branch {full[-1]}")
        return
    if minor and not _uses_ptx(ev):
        ev.compat = rules.MINOR
        ev.branches = minor
        ev.rests_on(m.branch(minor[-1]), f"drivers.yaml: branch {minor[-1]}")
        ev.notes.append(
            f"CUDA {toolkit.version_text} needs driver {toolkit.min_driver_text}, newer than "
            f"any branch that drives these GPUs; branch {minor[-1]} runs it through "
            "minor-version compatibility"
        )
        return
    newest = usable[-1]
    b = m.branch(newest)
    top = ".".join(str(p) for p in b.max_cuda) if b else "?"
    ev.fail(
        f"CUDA {toolkit.version_text} needs driver >= {toolkit.min_driver_text}, but the "
        f"newest branch that drives these GPUs is {newest} (CUDA {top})"
    )
