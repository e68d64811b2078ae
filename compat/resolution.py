"""Resolution: the newest official build that runs on a host (``resolve``), the verdict on a
given build (``check``, ``check_measured``) and the builds that cover one capability."""

from __future__ import annotations

from compat import rules
from compat.branches import drives, driving_branches
from compat.containers import container_for
from compat.data import Matrix
from compat.evaluation import CHANNELS, Evaluation, evaluate, parse_host, parse_torch
from compat.gpus import Target
from compat.install import install_data, pypi_install
from compat.model import (
    CompatError,
    Release,
    Variant,
    VersionKey,
    cc_str,
    cmp_key,
    describe_driver,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _variants_for(release: Release, tgts: list[Target]) -> tuple[Variant, ...]:
    """Variants worth evaluating: GPU builds for GPU hosts, the CPU build for others."""
    if tgts:
        return tuple(v for v in release.variants if v.cuda is not None)
    return tuple(v for v in release.variants if v.cuda is None)


def _best(evs: list[Evaluation]) -> Evaluation | None:
    ok = [e for e in evs if e.ok]
    return max(ok, key=lambda e: e.rank()) if ok else None


def check(
    m: Matrix,
    gpus: list[Any] | tuple[Any, ...],
    torch: str,
    driver: str | None = None,
    python: str | None = None,
    channel: str | None = None,
) -> dict[str, Any]:
    """Whether ``torch`` (``V`` or ``V+VARIANT``) runs on a host with these GPUs."""
    tgts, drv, py, ch = parse_host(m, gpus, driver, python, channel)
    release, variant = parse_torch(m, torch)
    candidates = (variant,) if variant is not None else release.variants
    evs = [evaluate(m, release, v, tgts, drv, py, ch) for v in candidates]
    best = _best(evs)
    if best is not None:
        return _verdict(m, best, tgts, drv, True, best.reasons + best.notes, best.unverified)
    # Without +VARIANT the CPU build's "runs no CUDA kernels" says nothing useful.
    relevant = [e for e in evs if variant is not None or e.variant.cuda is not None or not tgts]
    reasons = list(dict.fromkeys(r for e in relevant or evs for r in e.failures))
    unverified = list(dict.fromkeys(u for e in relevant or evs for u in e.unverified))
    out = _verdict(m, evs[0], tgts, drv, False, reasons, unverified)
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
    unverified: list[str],
) -> dict[str, Any]:
    """The answer; ``unverified`` names every ``confidence: unverified`` row it rests on."""
    return {
        "compatible": ok,
        "torch": ev.release.version,
        "variant": ev.variant.name,
        "cuda": ev.variant.cuda_text,
        "channel": ev.channel,
        "gpus": [_target_cov(t, ev) for t in tgts],
        "driver": _driver_info(m, ev, tgts, drv),
        "reasons": _candidates_reason(tgts) + reasons + _unverified_reason(unverified),
        "unverified": list(unverified),
    }


def _candidates_reason(tgts: list[Target]) -> list[str]:
    """Partial names that matched several GPUs the rules judge alike: name them all."""
    out = []
    for t in tgts:
        if t.candidates:
            out.append(
                f"{t.query!r} matches {', '.join(t.candidates)}: the same compute capability "
                f"{cc_str(t.cc)} and driver branches, so this answer holds for each"
            )
    return out


def _unverified_reason(unverified: list[str]) -> list[str]:
    if not unverified:
        return []
    return [
        "this answer rests on data rows no source confirmed (confidence: unverified): "
        + "; ".join(unverified)
    ]


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
        "given": describe_driver(drv) if drv else None,
        "compatibility": ev.compat,
        "min_version": tk.min_driver_text if tk else None,
        "minor_compat_min_version": tk.minor_compat_text if tk else None,
        "branches": ev.branches if drv is None else [],
        "branch": (drv[0] if drv else (ev.branches[-1] if ev.branches else None)),
        "newest_branch_for_gpus": usable[-1] if usable else None,
        "oldest_branch_for_gpus": usable[0] if usable else None,
    }
    return info


def resolve(
    m: Matrix,
    gpus: list[Any] | tuple[Any, ...],
    driver: str | None = None,
    python: str | None = None,
    channel: str | None = None,
) -> dict[str, Any]:
    """The newest official build that runs on every GPU of a host, and why."""
    tgts, drv, py, ch = parse_host(m, gpus, driver, python, channel)
    for release in reversed(m.releases):
        if py is not None and py not in release.python:
            continue
        # Cheap filter first: only builds with a kernel image for every GPU get evaluated.
        cands = [v for v in _variants_for(release, tgts) if _covers_all(v, tgts, ch)]
        evs = [evaluate(m, release, v, tgts, drv, py, ch) for v in cands]
        best = _best(evs)
        if best is not None:
            return _plan(m, best, tgts, drv, evs)
    return _no_plan(m, tgts, drv, py, ch)


def _covers_all(variant: Variant, tgts: list[Target], channel: str) -> bool:
    if channel not in variant.channels:
        return False
    sass, ptx = variant.archs(channel)
    return all(rules.coverage(sass, ptx, t.cc) is not None for t in tgts)


def _runs_on_all(m: Matrix, rel: Release, var: Variant, tgts: list[Target], channel: str) -> bool:
    """Whether the build runs on every GPU by the rules `check` applies with no driver or Python
    given; the cheap kernel check first."""
    return _covers_all(var, tgts, channel) and evaluate(m, rel, var, tgts, None, None, channel).ok


# Why a build beat the PyPI default, by the first part of Evaluation.rank() that told them apart.
_RANK_WHY = (
    "full driver compatibility (the default runs only through minor-version compatibility)",
    "SASS for every GPU (the default reaches one only through PTX)",
    "its data is verified (the default rests on unverified rows: {})",
)


def _why_not_default(best: Evaluation, evs: list[Evaluation]) -> str:
    rel = best.release
    head = f"{best.variant.name} chosen over the PyPI default {rel.pypi_default}: "
    default = next((e for e in evs if e.variant.name == rel.pypi_default), None)
    if default is None:
        return head + "the default carries no kernel image for every GPU"
    if not default.ok:
        return head + f"the default does not run here ({default.failures[0]})"
    for why, ours, its in zip(_RANK_WHY, best.rank(), default.rank(), strict=False):
        if ours != its:
            return head + why.format(", ".join(default.unverified))
    return head + "a newer CUDA"


def _plan(
    m: Matrix,
    ev: Evaluation,
    tgts: list[Target],
    drv: VersionKey | None,
    evs: list[Evaluation],
) -> dict[str, Any]:
    rel, var = ev.release, ev.variant
    container = container_for(m, tgts, drv, ev.branches)
    unverified = list(ev.unverified)
    if container is not None and container["confidence"] == "unverified":
        unverified.append(f"ngc.yaml: {container['tag']}")
    plan = _verdict(m, ev, tgts, drv, True, [], unverified)
    plan.pop("compatible")
    newest = f"torch {rel.version} is the newest release with a build for every GPU" + (
        f" ({', '.join(t.label for t in tgts)})" if tgts else " (no GPU: CPU build)"
    )
    reasons = [*_candidates_reason(tgts), newest]
    reasons += ev.reasons
    if tgts and var.name != rel.pypi_default:
        reasons.append(_why_not_default(ev, evs))
    if drv is None and ev.branches:
        reasons.append(
            f"driver branches {ev.branches[0]}..{ev.branches[-1]} drive every GPU and run CUDA "
            f"{var.cuda_text}; newest: {ev.branches[-1]}"
        )
    install = install_data(rel, var)
    install["container"] = image_ref(container["image"]) if container else None
    reasons += _unverified_reason(unverified)
    plan.update(
        {
            "ok": True,
            "torchvision": rel.torchvision,
            "torchaudio": rel.torchaudio,
            "python": list(rel.python),
            "install": install,
            "container": container,
            "reasons": reasons,
            "notes": ev.notes,
        }
    )
    return plan


def _no_plan(
    m: Matrix, tgts: list[Target], drv: VersionKey | None, py: str | None, ch: str
) -> dict[str, Any]:
    reasons: list[str] = []
    hints: list[str] = []
    for t in tgts:
        last = last_covering(m, t, ch)
        if last is None:
            reasons.append(
                f"no official torch {ch} build runs on {t.label} {rules.describe_cc(t.cc)}"
            )
            hints.append(
                f"build torch from source with TORCH_CUDA_ARCH_LIST={cc_str(t.cc)}, or use a "
                "community build"
            )
            continue
        rel, var = last
        reasons.append(
            f"the newest official {ch} build that runs on {t.label} is torch "
            f"{rel.version}+{var.name}"
        )
        if py is not None and py not in rel.python:
            hints.append(
                f"torch {rel.version} needs Python {', '.join(rel.python)}: use a conda or venv "
                f"environment with that Python (asked for {py})"
            )
        if ch == "pip":
            conda_last = last_covering(m, t, "conda")
            if conda_last is not None and conda_last[0].key > rel.key:
                hints.append(
                    f"the conda build of torch {conda_last[0].version}+{conda_last[1].name} "
                    f"also covers {t.label}: try --channel conda"
                )
        if drv is not None:
            ev = evaluate(m, rel, var, [t], drv, None, ch)
            hints.extend(r for r in ev.failures if r.startswith(("driver", "CUDA")))
            # The branches (of the data's table) that drive the GPU and run that build's CUDA;
            # the failure above names the architecture's whole range, older branches too.
            runs = evaluate(m, rel, var, [t], None, None, ch).branches
            if runs and not drives(drv[0], t):
                hints.append(
                    f"use a driver of branch {runs[0]}..{runs[-1]}: they drive {t.label} and run "
                    f"CUDA {var.cuda_text} of torch {rel.version}+{var.name}"
                )
    if len(tgts) > 1 and not any(  # no build runs on them all, whatever the driver or Python
        _runs_on_all(m, rel, var, tgts, ch)
        for rel in m.releases
        for var in _variants_for(rel, tgts)
    ):
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
            "given": describe_driver(drv) if drv else None,
            "newest_branch_for_gpus": usable[-1] if usable else None,
            "oldest_branch_for_gpus": usable[0] if usable else None,
        },
        "reasons": reasons,
        "notes": list(dict.fromkeys(hints)),
        "unverified": [],
    }


def last_covering(m: Matrix, t: Target, channel: str) -> tuple[Release, Variant] | None:
    """The newest release with a build that runs on ``t`` (releases_for), and its best variant:
    the PyPI default when it runs, else the newest CUDA."""
    for rel, variants in reversed(releases_for(m, t, channel)):
        best = max(variants, key=lambda v: (v.name == rel.pypi_default, cmp_key(v.cuda or (0,))))
        return rel, best
    return None


def releases_for(m: Matrix, t: Target, channel: str) -> list[tuple[Release, list[Variant]]]:
    """Every release with the variants whose build runs on ``t`` by the rules `gpu-compat check`
    applies with no driver or Python given (kernels of the build and of the CUDA libraries it
    pins, the toolkit's range, a driver branch that drives the GPU and runs the CUDA)."""
    out = []
    for rel in m.releases:
        ok = [v for v in _variants_for(rel, [t]) if _runs_on_all(m, rel, v, [t], channel)]
        if ok:
            out.append((rel, ok))
    return out


def check_measured(
    m: Matrix,
    gpus: list[Any] | tuple[Any, ...],
    measured: dict[str, Any],
    driver: str | None = None,
    python: str | None = None,
) -> dict[str, Any]:
    """The rules applied to an arch list measured from a binary (``gpu-compat inspect``)
    instead of the table's."""
    tgts, drv, py, _ = parse_host(m, gpus, driver, python, None)
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
    out = _verdict(
        m, ev, tgts, drv, ev.ok, ev.reasons + ev.notes if ev.ok else ev.failures, ev.unverified
    )
    out["torch"] = full or None
    out["measured"] = True
    return out


def pinned_install(m: Matrix, spec: str) -> dict[str, Any]:
    """The install document of a pinned build: ``V+VARIANT`` from its index or find-links,
    a bare ``V`` from PyPI (its default build)."""
    release, variant = parse_torch(m, spec)
    if variant is not None:
        return install_data(release, variant)
    default = release.variant(release.pypi_default or "")
    if default is None:
        raise CompatError(
            f"torch {release.version} has no PyPI default build in the matrix: pin a variant "
            f"({', '.join(v.name for v in release.variants)})"
        )
    return pypi_install(release, default)


def image_ref(image: str) -> dict[str, str]:
    """``nvcr.io/nvidia/pytorch:24.05-py3`` -> image, registry (``nvcr.io``) and path
    (``nvidia/pytorch:24.05-py3``), so that a registry mirror replaces a field, not text."""
    registry, _, path = image.partition("/")
    if "." not in registry and ":" not in registry:  # Docker Hub: no registry host
        registry, path = "docker.io", image
    return {"image": image, "registry": registry, "path": path}
