"""Queries over the matrix: lookup, check, resolve, explain and the support table.

Every function here is pure over a :class:`compat.data.Matrix`; none touches the host.
"""

from __future__ import annotations

from compat import rules
from compat.data import Matrix
from compat.model import (
    CC,
    GPU,
    Architecture,
    CompatError,
    Release,
    Toolkit,
    Variant,
    VersionKey,
    cc_str,
    cmp_key,
    version_key,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

CHANNELS = ("pip", "conda")
PIP_INDEX = "https://download.pytorch.org/whl"
FIND_LINKS = "https://download.pytorch.org/whl/torch_stable.html"


# --------------------------------------------------------------------------- lookup


def _norm(text: str) -> str:
    text = text.lower().replace("-", " ").replace("_", " ")
    for word in ("nvidia ", "tesla ", "geforce ", "quadro "):
        text = text.replace(word, "")
    return " ".join(text.split())


def _parse_cc_query(q: str) -> CC | None:
    text = q.strip().lower()
    for prefix in ("sm_", "sm", "compute_"):
        if text.startswith(prefix) and text[len(prefix) :].isdigit():
            digits = text[len(prefix) :]
            if len(digits) >= 2:
                return int(digits[:-1]), int(digits[-1])
    major, dot, minor = text.partition(".")
    if dot and major.isdigit() and minor.isdigit() and len(minor) == 1:
        return int(major), int(minor)
    return None


def _parse_pci_query(q: str) -> tuple[str, bool] | None:
    """(``10de:xxxx``, explicit) when ``q`` looks like a PCI device ID."""
    text = q.strip().lower()
    explicit = text.startswith(("0x", "10de:"))
    dev = text.removeprefix("10de:").removeprefix("0x")
    if len(dev) == 4 and all(c in "0123456789abcdef" for c in dev):
        return f"10de:{dev}", explicit
    return None


def lookup(m: Matrix, query: str) -> list[GPU]:
    """GPUs matching a name (case-insensitive, partial), a PCI ID or a compute capability."""
    if not query.strip():
        raise CompatError("empty GPU query: give a name (K40m), a PCI ID (10de:1023) or sm_35")
    pci = _parse_pci_query(query)
    if pci is not None:
        gpu = m.gpu_by_pci(pci[0])
        if gpu is not None:
            return [gpu]
        if pci[1]:
            return []
    cc = _parse_cc_query(query)
    if cc is not None:
        return [g for g in m.gpus if g.compute_capability == cc]
    q = _norm(query)
    # An exact product name (as NVML reports it) wins over a family alias: nvidia-smi calls
    # the 94 GB H100 plain "H100", which is also every H100's alias.
    exact = [g for g in m.gpus if _norm(g.name) == q]
    if exact:
        return exact
    alias = [g for g in m.gpus if q in (_norm(n) for n in g.aliases)]
    if alias:
        return alias
    words = q.split()
    return [
        g for g in m.gpus if any(all(w in _norm(n) for w in words) for n in (g.name, *g.aliases))
    ]


def suggestions(m: Matrix, query: str, n: int = 3) -> list[str]:
    import difflib

    names = {_norm(x): x for g in m.gpus for x in (g.name, *g.aliases)}
    return [names[k] for k in difflib.get_close_matches(_norm(query), list(names), n, 0.5)]


class Target:
    """One GPU of a host, as the rules see it: a capability and its architecture."""

    __slots__ = ("arch", "cc", "gpu", "label", "query")

    def __init__(
        self, query: str, label: str, cc: CC, arch: Architecture | None, gpu: GPU | None
    ) -> None:
        self.query = query
        self.label = label
        self.cc = cc
        self.arch = arch
        self.gpu = gpu

    def to_dict(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "name": self.label,
            "compute_capability": cc_str(self.cc),
            "architecture": self.arch.name if self.arch else None,
            "pci_ids": list(self.gpu.pci_ids) if self.gpu else [],
        }


def target(m: Matrix, query: str | dict[str, Any]) -> Target:
    """Turn one ``--gpu`` query (or a facts dict with pci_id/name) into a :class:`Target`."""
    if isinstance(query, dict):
        text = str(query.get("pci_id") or query.get("name") or "")
        if query.get("compute_capability") and not text:
            text = str(query["compute_capability"])
    else:
        text = str(query)
    cc = _parse_cc_query(text)
    if cc is not None and _parse_pci_query(text) is None:
        arch = m.architecture_for_cc(cc)
        if arch is None:
            known = sorted({c for a in m.architectures.values() for c in a.compute_capabilities})
            raise CompatError(
                f"unknown compute capability {text!r}: known are "
                + ", ".join(cc_str(c) for c in known)
            )
        return Target(text, f"sm_{cc[0]}{cc[1]}", cc, arch, None)
    found = lookup(m, text)
    if not found:
        hint = suggestions(m, text)
        extra = f"; did you mean {', '.join(repr(h) for h in hint)}?" if hint else ""
        raise CompatError(
            f"unknown GPU {text!r}: give a name (K40m), a PCI ID (10de:1023) or a compute "
            f"capability (sm_35){extra}"
        )
    ccs = {g.compute_capability for g in found}
    if len(ccs) > 1:
        names = ", ".join(f"{g.name} ({cc_str(g.compute_capability)})" for g in found[:8])
        raise CompatError(f"GPU {text!r} is ambiguous: it matches {names}; be more specific")
    gpu = found[0]
    return Target(text, gpu.name, gpu.compute_capability, m.architecture_of(gpu), gpu)


def targets(m: Matrix, queries: list[Any] | tuple[Any, ...]) -> list[Target]:
    return [target(m, q) for q in queries]


# --------------------------------------------------------------------------- parsing input


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


def parse_driver(text: str | None) -> DriverVersion | None:
    if text is None or str(text).strip() == "":
        return None
    key = DriverVersion(str(text))
    if not 1 <= len(key) <= 3 or key[0] < 100:
        raise CompatError(
            f"malformed driver version {text!r}: expected BRANCH[.MINOR[.PATCH]] such as "
            "535.183.01, 470.256.02 or 550"
        )
    return key


def _dtext(drv: VersionKey) -> str:
    if isinstance(drv, DriverVersion):
        return f"branch {drv.text}" if drv.branch_only else drv.text
    return ".".join(str(p) for p in drv)


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


# --------------------------------------------------------------------------- evaluation


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

    def fail(self, reason: str) -> None:
        self.ok = False
        self.failures.append(reason)

    @property
    def all_sass(self) -> bool:
        return all(c is not None and c[0] == "sass" for _, c in self.coverage)

    def rank(self) -> tuple[int, int, int, VersionKey]:
        return (
            1 if self.compat == rules.FULL else 0,
            1 if self.all_sass else 0,
            1 if self.variant.name == self.release.pypi_default else 0,
            cmp_key(self.variant.cuda or (0,)),
        )


def driving_branches(m: Matrix, tgts: list[Target]) -> list[int]:
    """Driver branches in the data that drive every target GPU."""
    out = []
    for b in m.branches:
        if all(t.arch is None or drives(b.branch, t) for t in tgts):
            out.append(b.branch)
    return out


def drives(branch: int, t: Target) -> bool:
    if t.arch is None:
        return True
    if t.gpu is not None:
        return rules.branch_drives(branch, t.gpu, t.arch)
    return t.arch.drives(branch)


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
    for t in tgts:
        # A toolkit that predates (or dropped) the GPU's architecture ships CUDA libraries
        # (cuBLAS, cuDNN) without code for it, whatever PTX torch itself carries.
        if not rules.toolkit_supports(toolkit, t.cc):
            ev.fail(
                f"CUDA {toolkit.version_text} supports compute capabilities "
                f"{cc_str(toolkit.min_cc)} to {cc_str(toolkit.max_cc)}, not {t.label} "
                f"({cc_str(t.cc)})"
            )
    if driver is not None:
        _check_driver(m, ev, toolkit, tgts, driver)
    else:
        _plan_driver(m, ev, toolkit, tgts)
    return ev


def _uses_ptx(ev: Evaluation) -> bool:
    return any(c is not None and c[0] == "ptx" for _, c in ev.coverage)


def _check_driver(
    m: Matrix, ev: Evaluation, toolkit: Toolkit, tgts: list[Target], driver: VersionKey
) -> None:
    branch = driver[0]
    dtext = _dtext(driver)
    for t in tgts:
        if not drives(branch, t):
            ev.fail(not_driven_reason(m, branch, t))
    if isinstance(driver, DriverVersion) and driver.branch_only:
        if m.branch(branch) is None:
            known = ", ".join(str(b.branch) for b in m.branches)
            ev.fail(f"driver branch {branch} is not in the matrix: known are {known}")
            return
        compat = _branch_runs(m, branch, toolkit)
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


def not_driven_reason(m: Matrix, branch: int, t: Target) -> str:
    arch = t.arch
    if arch is None:
        return f"driver branch {branch}: the architecture of {t.label} is unknown"
    usable = driving_branches(m, [t])
    if not usable:
        span = "none in the matrix"
    elif arch.last_driver_branch is not None:
        span = f"branches {usable[0]} to {usable[-1]}"
    else:
        span = f"branch {usable[0]} and newer"
    return f"driver branch {branch} does not drive {t.label} ({arch.display}): allowed are {span}"


def _branch_runs(m: Matrix, branch: int, toolkit: Toolkit) -> str | None:
    b = m.branch(branch)
    if b is None:
        return None
    if cmp_key(b.max_cuda[:2]) >= cmp_key(toolkit.version[:2]):
        return rules.FULL
    mc = toolkit.minor_compat_driver
    # A driver of this branch runs the toolkit through minor-version compatibility when the
    # branch serves the same CUDA major and is at least the minimum's branch.
    if (
        mc is not None
        and toolkit.version[0] >= 11
        and b.max_cuda[0] == toolkit.version[0]
        and branch >= mc[0]
    ):
        return rules.MINOR
    return None


def _plan_driver(m: Matrix, ev: Evaluation, toolkit: Toolkit, tgts: list[Target]) -> None:
    usable = driving_branches(m, tgts)
    if not usable:
        ev.fail("no driver branch drives all of: " + ", ".join(t.label for t in tgts))
        return
    full = [b for b in usable if _branch_runs(m, b, toolkit) == rules.FULL]
    minor = [b for b in usable if _branch_runs(m, b, toolkit) == rules.MINOR]
    if full:
        ev.compat = rules.FULL
        ev.branches = full
        return
    if minor and not _uses_ptx(ev):
        ev.compat = rules.MINOR
        ev.branches = minor
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


# --------------------------------------------------------------------------- check / resolve


def _variants_for(release: Release, tgts: list[Target]) -> tuple[Variant, ...]:
    """Variants worth evaluating: GPU builds for GPU hosts, the CPU build for others."""
    if tgts:
        return tuple(v for v in release.variants if v.cuda is not None)
    return tuple(v for v in release.variants if v.cuda is None)


def _best(evs: list[Evaluation]) -> Evaluation | None:
    ok = [e for e in evs if e.ok]
    return max(ok, key=lambda e: e.rank()) if ok else None


def _host(
    m: Matrix,
    gpus: list[Any] | tuple[Any, ...],
    driver: str | None,
    python: str | None,
    channel: str | None,
) -> tuple[list[Target], DriverVersion | None, str | None, str]:
    """Parse and validate a host's description: GPUs, driver, Python, channel."""
    return (
        targets(m, list(gpus)),
        parse_driver(driver),
        parse_python(python),
        parse_channel(channel),
    )


def check(
    m: Matrix,
    gpus: list[Any] | tuple[Any, ...],
    torch: str,
    driver: str | None = None,
    python: str | None = None,
    channel: str | None = None,
) -> dict[str, Any]:
    """Whether ``torch`` (``V`` or ``V+VARIANT``) runs on a host with these GPUs."""
    tgts, drv, py, ch = _host(m, gpus, driver, python, channel)
    release, variant = parse_torch(m, torch)
    candidates = (variant,) if variant is not None else release.variants
    evs = [evaluate(m, release, v, tgts, drv, py, ch) for v in candidates]
    best = _best(evs)
    if best is not None:
        return _verdict(m, best, tgts, drv, True, best.reasons + best.notes)
    # Without +VARIANT the CPU build's "runs no CUDA kernels" says nothing useful.
    relevant = [e for e in evs if variant is not None or e.variant.cuda is not None or not tgts]
    reasons = list(dict.fromkeys(r for e in relevant or evs for r in e.failures))
    out = _verdict(m, evs[0], tgts, drv, False, reasons)
    out["variant"] = variant.name if variant is not None else None
    out["cuda"] = variant.cuda_text if variant is not None else None
    return out


def _verdict(
    m: Matrix,
    ev: Evaluation,
    tgts: list[Target],
    drv: VersionKey | None,
    ok: bool,
    reasons: list[str],
) -> dict[str, Any]:
    return {
        "compatible": ok,
        "torch": ev.release.version,
        "variant": ev.variant.name,
        "cuda": ev.variant.cuda_text,
        "channel": ev.channel,
        "gpus": [_target_cov(t, ev) for t in tgts],
        "driver": _driver_info(m, ev, tgts, drv),
        "reasons": reasons,
    }


def _target_cov(t: Target, ev: Evaluation) -> dict[str, Any]:
    d = t.to_dict()
    cov = next((c for tt, c in ev.coverage if tt is t), None)
    d["covered_by"] = cov[1] if cov else None
    d["via"] = cov[0] if cov else None
    return d


def _driver_info(
    m: Matrix, ev: Evaluation, tgts: list[Target], drv: VersionKey | None
) -> dict[str, Any]:
    usable = driving_branches(m, tgts) if tgts else [b.branch for b in m.branches]
    tk = ev.toolkit
    info: dict[str, Any] = {
        "given": _dtext(drv) if drv else None,
        "compatibility": ev.compat,
        "min_version": tk.min_driver_text if tk else None,
        "minor_compat_min_version": tk.minor_compat_text if tk else None,
        "branches": ev.branches if drv is None else [],
        "branch": (drv[0] if drv else (ev.branches[-1] if ev.branches else None)),
        "newest_branch_for_gpus": usable[-1] if usable else None,
        "oldest_branch_for_gpus": usable[0] if usable else None,
    }
    return info


def install_commands(release: Release, variant: Variant) -> dict[str, Any]:
    """The pip and conda commands that install this build."""
    pkgs = [f"torch=={release.version}"]
    if release.torchvision:
        pkgs.append(f"torchvision=={release.torchvision}")
    if release.torchaudio:
        pkgs.append(f"torchaudio=={release.torchaudio}")
    out: dict[str, Any] = {"packages": pkgs}
    if release.pip_style == "find_links":
        if variant.name == release.pypi_default:
            out["pip"] = "pip install " + " ".join(pkgs)
            out["index_url"] = None
        else:
            local = [p if p.startswith("torchaudio") else f"{p}+{variant.name}" for p in pkgs]
            out["pip"] = f"pip install {' '.join(local)} -f {FIND_LINKS}"
            out["index_url"] = None
        out["find_links"] = FIND_LINKS
    else:
        out["index_url"] = f"{PIP_INDEX}/{variant.name}"
        out["find_links"] = None
        out["pip"] = f"pip install {' '.join(pkgs)} --index-url {out['index_url']}"
    out["conda"] = _conda_command(release, variant)
    return out


def _conda_command(release: Release, variant: Variant) -> str | None:
    if release.conda_style is None or "conda" not in variant.channels:
        return None
    pkgs = [f"pytorch=={release.version}"]
    if release.torchvision:
        pkgs.append(f"torchvision=={release.torchvision}")
    if release.torchaudio:
        pkgs.append(f"torchaudio=={release.torchaudio}")
    if variant.cuda_text is None:
        return f"conda install {' '.join(pkgs)} cpuonly -c pytorch"
    if release.conda_style == "cudatoolkit":
        return f"conda install {' '.join(pkgs)} cudatoolkit={variant.cuda_text} -c pytorch"
    return f"conda install {' '.join(pkgs)} pytorch-cuda={variant.cuda_text} -c pytorch -c nvidia"


def resolve(
    m: Matrix,
    gpus: list[Any] | tuple[Any, ...],
    driver: str | None = None,
    python: str | None = None,
    channel: str | None = None,
) -> dict[str, Any]:
    """The newest official build that runs on every GPU of a host, and why."""
    tgts, drv, py, ch = _host(m, gpus, driver, python, channel)
    for release in reversed(m.releases):
        if py is not None and py not in release.python:
            continue
        # Cheap filter first: only builds with a kernel image for every GPU get evaluated.
        cands = [v for v in _variants_for(release, tgts) if _covers_all(v, tgts, ch)]
        evs = [evaluate(m, release, v, tgts, drv, py, ch) for v in cands]
        best = _best(evs)
        if best is not None:
            return _plan(m, best, tgts, drv)
    return _no_plan(m, tgts, drv, py, ch)


def _covers_all(variant: Variant, tgts: list[Target], channel: str) -> bool:
    if channel not in variant.channels:
        return False
    sass, ptx = variant.archs(channel)
    return all(rules.coverage(sass, ptx, t.cc) is not None for t in tgts)


def _plan(m: Matrix, ev: Evaluation, tgts: list[Target], drv: VersionKey | None) -> dict[str, Any]:
    rel, var = ev.release, ev.variant
    plan = _verdict(m, ev, tgts, drv, True, [])
    plan.pop("compatible")
    reasons = [
        f"torch {rel.version} is the newest release with a build for every GPU"
        + (f" ({', '.join(t.label for t in tgts)})" if tgts else " (no GPU: CPU build)")
    ]
    reasons += ev.reasons
    if tgts and var.name != rel.pypi_default:
        reasons.append(
            f"{var.name} chosen over the PyPI default {rel.pypi_default}: "
            "better driver compatibility or kernel coverage"
        )
    if drv is None and ev.branches:
        reasons.append(
            f"driver branches {ev.branches[0]}..{ev.branches[-1]} drive every GPU and run CUDA "
            f"{var.cuda_text}; newest: {ev.branches[-1]}"
        )
    plan.update(
        {
            "ok": True,
            "torchvision": rel.torchvision,
            "torchaudio": rel.torchaudio,
            "python": list(rel.python),
            "install": install_commands(rel, var),
            "container": _container_for(m, tgts, drv, ev),
            "reasons": reasons,
            "notes": ev.notes,
        }
    )
    return plan


def _container_for(
    m: Matrix, tgts: list[Target], drv: VersionKey | None, ev: Evaluation
) -> dict[str, Any] | None:
    """The newest NGC PyTorch container whose CUDA supports every GPU and the driver."""
    if not tgts:
        return None
    top_branch = drv[0] if drv else (ev.branches[-1] if ev.branches else None)
    if top_branch is None:
        return None
    for c in sorted(m.containers, key=lambda c: c.tag, reverse=True):
        try:
            cuda = version_key(c.cuda, "CUDA")
            need = version_key(c.min_driver, "driver")
        except CompatError:
            continue
        tk = m.toolkit(cuda)
        if tk is None or not all(
            rules.toolkit_supports(tk, t.cc) and t.cc >= c.min_cc for t in tgts
        ):
            continue
        if top_branch < need[0] or (drv is not None and cmp_key(drv) < cmp_key(need)):
            continue
        return {
            "image": c.image,
            "tag": c.tag,
            "torch": c.torch,
            "cuda": c.cuda,
            "min_driver": c.min_driver,
            "source": c.source,
        }
    return None


def _no_plan(
    m: Matrix, tgts: list[Target], drv: VersionKey | None, py: str | None, ch: str
) -> dict[str, Any]:
    reasons: list[str] = []
    hints: list[str] = []
    for t in tgts:
        last = _last_covering(m, t.cc, ch)
        if last is None:
            reasons.append(
                f"no official torch {ch} build carries kernels for {t.label} "
                f"{rules.describe_cc(t.cc)}"
            )
            hints.append(
                f"build torch from source with TORCH_CUDA_ARCH_LIST={cc_str(t.cc)}, or use a "
                "community build"
            )
            continue
        rel, var = last
        reasons.append(
            f"the newest official {ch} build with kernels for {t.label} is torch "
            f"{rel.version}+{var.name}"
        )
        if py is not None and py not in rel.python:
            hints.append(
                f"torch {rel.version} needs Python {', '.join(rel.python)}: use a conda or venv "
                f"environment with that Python (asked for {py})"
            )
        if ch == "pip":
            conda_last = _last_covering(m, t.cc, "conda")
            if conda_last is not None and conda_last[0].key > rel.key:
                hints.append(
                    f"the conda build of torch {conda_last[0].version}+{conda_last[1].name} "
                    f"also covers {t.label}: try --channel conda"
                )
        if drv is not None:
            ev = evaluate(m, rel, var, [t], drv, None, ch)
            hints.extend(r for r in ev.failures if r.startswith(("driver", "CUDA")))
            usable = driving_branches(m, [t])
            if usable and not drives(drv[0], t):
                hints.append(f"use a driver of branch {usable[0]}..{usable[-1]}")
    if len(tgts) > 1 and not hints:
        hints.append(
            "no single official build covers all these GPUs together: split them across "
            "hosts or containers, or build from source for all of their capabilities"
        )
    if len(tgts) > 1:
        reasons.append(
            "a build must cover every GPU of the host: "
            + ", ".join(f"{t.label} ({cc_str(t.cc)})" for t in tgts)
        )
    usable = driving_branches(m, tgts)
    if tgts and not usable:
        reasons.append("no driver branch drives all of: " + ", ".join(t.label for t in tgts))
    return {
        "ok": False,
        "torch": None,
        "variant": None,
        "cuda": None,
        "torchvision": None,
        "torchaudio": None,
        "channel": ch,
        "gpus": [t.to_dict() for t in tgts],
        "install": None,
        "container": None,
        "driver": {
            "given": _dtext(drv) if drv else None,
            "newest_branch_for_gpus": usable[-1] if usable else None,
            "oldest_branch_for_gpus": usable[0] if usable else None,
        },
        "reasons": reasons,
        "notes": list(dict.fromkeys(hints)),
    }


def _last_covering(m: Matrix, cc: CC, channel: str) -> tuple[Release, Variant] | None:
    """The newest release with a build for ``cc`` (driver not considered), and its best variant:
    the PyPI default when it covers, else the newest CUDA."""
    for rel, variants in reversed(releases_for(m, cc, channel)):
        best = max(variants, key=lambda v: (v.name == rel.pypi_default, cmp_key(v.cuda or (0,))))
        return rel, best
    return None


def releases_for(m: Matrix, cc: CC, channel: str) -> list[tuple[Release, list[Variant]]]:
    """Every release with the variants whose build runs on ``cc`` (driver not considered)."""
    out = []
    for rel in m.releases:
        ok = [
            v
            for v in rel.variants
            if v.cuda is not None
            and channel in v.channels
            and rules.coverage(*v.archs(channel), cc) is not None
        ]
        if ok:
            out.append((rel, ok))
    return out


# --------------------------------------------------------------------------- explain


def explain(
    m: Matrix,
    text: str,
    gpus: list[Any] | tuple[Any, ...] = (),
    driver: str | None = None,
) -> dict[str, Any]:
    """Recognise an error message and answer its cause and fix from the matrix."""
    import re

    tgts = targets(m, list(gpus))
    drv = parse_driver(driver)
    for err in m.errors:
        for pattern in err.patterns:
            match = re.search(pattern, text, re.IGNORECASE | re.DOTALL)
            if match is None:
                continue
            answer: dict[str, Any] = {
                "recognised": True,
                "id": err.id,
                "title": err.title,
                "cause": err.causes,
                "checks": list(err.checks),
                "fixes": list(err.fixes),
                "source": err.source,
                "parsed": {k: v for k, v in match.groupdict().items() if v is not None},
                "matrix": [],
            }
            _explain_with_matrix(m, answer, tgts, drv, driver)
            return answer
    return {
        "recognised": False,
        "id": None,
        "title": None,
        "matrix": [],
        "cause": "not a known error message",
        "checks": [],
        "fixes": [],
        "parsed": {},
    }


def _explain_with_matrix(
    m: Matrix,
    answer: dict[str, Any],
    tgts: list[Target],
    drv: VersionKey | None,
    driver: str | None,
) -> None:
    parsed: dict[str, str] = answer["parsed"]
    lines: list[str] = answer["matrix"]
    if not tgts and parsed.get("capability"):
        cap = parsed["capability"]
        try:
            by_name = target(m, parsed["gpu"]) if parsed.get("gpu") else None
        except CompatError:
            by_name = None
        tgts = [by_name] if by_name is not None else [target(m, cap)]
    if parsed.get("archs"):
        entries = [a for a in parsed["archs"].replace(",", " ").split() if "_" in a]
        sass = tuple(e for e in entries if e.startswith("sm_"))
        ptx = tuple(e for e in entries if e.startswith("compute_"))
        answer["parsed"]["arch_list"] = entries
        for t in tgts:
            if rules.coverage(sass, ptx, t.cc) is None:
                lines.append(
                    f"the installed build carries {' '.join(entries)}: nothing there runs on "
                    f"{t.label} {rules.describe_cc(t.cc)}"
                )
    if answer["id"] in ("no-kernel-image", "capability-not-compatible") or (
        tgts and answer["id"] in ("driver-insufficient",)
    ):
        for t in tgts:
            for ch in CHANNELS:
                last = _last_covering(m, t.cc, ch)
                if last is None:
                    lines.append(f"no official {ch} build carries kernels for {t.label}")
                else:
                    rel, var = last
                    cmd = install_commands(rel, var)["pip" if ch == "pip" else "conda"]
                    lines.append(
                        f"newest official {ch} build for {t.label}: torch {rel.version}+"
                        f"{var.name} (CUDA {var.cuda_text}, Python {', '.join(rel.python)})"
                        + (f": {cmd}" if cmd else "")
                    )
            if t.arch is not None and t.arch.last_driver_branch is not None:
                lines.append(
                    f"keep the driver on branch {t.arch.last_driver_branch} or older: it is the "
                    f"last branch that drives {t.arch.display} GPUs such as {t.label}"
                )
    if tgts and answer["id"] != "capability-not-compatible":
        plan = resolve(m, [t.query for t in tgts], driver=driver)
        answer["plan"] = plan
        if plan["ok"]:
            lines.append(
                f"what runs here: torch {plan['torch']}+{plan['variant']}: {plan['install']['pip']}"
            )
        else:
            lines.extend(plan["reasons"] + plan["notes"])
    if drv is not None and answer["id"] == "driver-insufficient":
        b = m.branch(drv[0])
        if b is not None:
            top = ".".join(str(p) for p in b.max_cuda)
            lines.append(
                f"driver branch {drv[0]} runs CUDA up to {top} (and later 11.x/12.x minors "
                "through minor-version compatibility from the minimums in the toolkit table)"
            )


# --------------------------------------------------------------------------- support table


def support_rows(m: Matrix) -> list[dict[str, Any]]:
    """One row per compute capability that has GPUs in the data: the newest stack for it."""
    rows = []
    seen: set[CC] = set()
    for g in m.gpus:
        cc = g.compute_capability
        if cc in seen:
            continue
        seen.add(cc)
        arch = m.architecture_of(g)
        examples = [x.name for x in m.gpus if x.compute_capability == cc][:3]
        q = f"sm_{cc[0]}{cc[1]}"
        pip = resolve(m, [q], channel="pip")
        conda = resolve(m, [q], channel="conda")
        last = arch.last_driver_branch
        first = min(
            x.min_driver_branch or arch.min_driver_branch
            for x in m.gpus
            if x.compute_capability == cc
        )
        rows.append(
            {
                "compute_capability": cc_str(cc),
                "architecture": arch.display,
                "gpus": examples,
                "driver_branches": f"{first}-{last}" if last else f"{first}+",
                "newest_cuda": _newest_cuda(m, q),
                "pip": f"{pip['torch']}+{pip['variant']}" if pip["ok"] else "none",
                "conda": f"{conda['torch']}+{conda['variant']}" if conda["ok"] else "none",
            }
        )
    return rows


def _newest_cuda(m: Matrix, query: str) -> str | None:
    t = target(m, query)
    usable = driving_branches(m, [t])
    if not usable:
        return None
    b = m.branch(usable[-1])
    cuda = [tk for tk in m.toolkits if rules.toolkit_supports(tk, t.cc)]
    if b is None or not cuda:
        return None
    fits = [tk for tk in cuda if cmp_key(tk.version[:2]) <= cmp_key(b.max_cuda[:2])]
    return fits[-1].version_text if fits else None


def check_measured(
    m: Matrix,
    gpus: list[Any] | tuple[Any, ...],
    measured: dict[str, Any],
    driver: str | None = None,
    python: str | None = None,
) -> dict[str, Any]:
    """The rules applied to an arch list measured from a binary (``gpu-compat inspect``)
    instead of the table's."""
    tgts, drv, py, _ = _host(m, gpus, driver, python, None)
    full = str(measured.get("torch_version") or "")
    version, _, local = full.partition("+")
    cuda = measured.get("cuda")
    if measured.get("cpu_only") or not cuda:
        cuda = None
    name = local or (f"cu{str(cuda).replace('.', '')}" if cuda else "cpu")
    row = {
        "name": name,
        "cuda": cuda,
        "channels": list(CHANNELS),
        "sass": list(measured.get("sass") or []),
        "ptx": list(measured.get("ptx") or []),
        "source": f"measured: {measured.get('path', 'binary')}",
    }
    known = m.release(version) if version else None
    release = known or Release(
        {
            "version": version or "0",
            "python": [],
            "variants": [row],
            "source": "measured",
            "pypi_default": name,
        }
    )
    variant = Variant(row)
    ev = evaluate(m, release, variant, tgts, drv, py if known else None, "pip")
    out = _verdict(m, ev, tgts, drv, ev.ok, ev.reasons + ev.notes if ev.ok else ev.failures)
    out["torch"] = full or None
    out["measured"] = True
    return out
