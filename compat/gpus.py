"""GPU queries: a name, PCI ID or compute capability (or a ``gpu_info`` dict) to matrix GPUs.

Pure over a :class:`compat.data.Matrix`; nothing here touches the host.
"""

from __future__ import annotations

from compat.data import Matrix
from compat.model import CC, GPU, Architecture, CompatError, ComputeCapability, cc_str

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _norm(text: str) -> str:
    text = text.lower().replace("-", " ").replace("_", " ")
    for word in ("nvidia ", "tesla ", "geforce ", "quadro "):
        text = text.replace(word, "")
    return " ".join(text.split())


def _parse_cc_query(q: str) -> ComputeCapability | None:
    text = q.strip().lower()
    for prefix in ("sm_", "sm", "compute_"):
        if text.startswith(prefix) and text[len(prefix) :].isdigit():
            digits = text[len(prefix) :]
            if len(digits) >= 2:
                return ComputeCapability(int(digits[:-1]), int(digits[-1]))
    major, dot, minor = text.partition(".")
    if dot and major.isdigit() and minor.isdigit() and len(minor) == 1:
        return ComputeCapability(int(major), int(minor))
    return None


def _parse_pci_query(q: str) -> tuple[str, bool] | None:
    """(``10de:xxxx``, explicit) when ``q`` looks like a PCI device ID."""
    text = q.strip().lower()
    explicit = text.startswith(("0x", "10de:"))
    dev = text.removeprefix("10de:").removeprefix("0x")
    if len(dev) == 4 and all(c in "0123456789abcdef" for c in dev):
        return f"10de:{dev}", explicit
    return None


def lookup(m: Matrix, query: str, every: bool = False) -> list[GPU]:
    """GPUs matching a name (case-insensitive, partial), a PCI ID or a compute capability.

    An exact product name (as NVML reports it) wins over family aliases and partial matches;
    with ``every`` (``gpu-compat lookup``) the exact match comes first, followed by every other
    GPU the query matches (``P4`` lists the P40 too)."""
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
    names = [(g, _norm(g.name), [_norm(n) for n in g.aliases]) for g in m.gpus]  # each once
    # nvidia-smi calls the 94 GB H100 plain "H100", which is also every H100's alias.
    exact = [g for g, name, _ in names if name == q]
    alias = [g for g, _, aliases in names if q in aliases]
    words = q.split()
    partial = [
        g for g, name, aliases in names if any(all(w in n for w in words) for n in (name, *aliases))
    ]
    if not (exact or alias or partial):  # "RTX3090", "GTX 1080Ti": the name without its spaces
        flat = q.replace(" ", "")
        exact = [g for g, n, a in names if flat in (x.replace(" ", "") for x in (n, *a))]
        partial = [g for g, n, a in names if any(flat in x.replace(" ", "") for x in (n, *a))]
    if every:
        return list(dict.fromkeys([*exact, *alias, *partial]))
    return exact or list(dict.fromkeys([*alias, *partial]))


def _judged_alike(m: Matrix, gpus: list[GPU]) -> bool:
    """Whether the rules cannot tell these GPUs apart: one compute capability, one range of
    driver branches."""
    spans = set()
    for g in gpus:
        arch = m.architecture_of(g)
        first = max(arch.min_driver_branch, g.min_driver_branch or 0)
        spans.add((g.compute_capability, first, arch.last_driver_branch))
    return len(spans) == 1


def suggestions(m: Matrix, query: str, n: int = 3) -> list[str]:
    import difflib

    names = {_norm(x): x for g in m.gpus for x in (g.name, *g.aliases)}
    return [names[k] for k in difflib.get_close_matches(_norm(query), list(names), n, 0.5)]


class Target:
    """One GPU of a host, as the rules see it: a capability and its architecture.
    ``candidates``: every GPU a partial name matched when the rules judge them alike."""

    __slots__ = ("arch", "candidates", "cc", "gpu", "label", "query")

    def __init__(
        self,
        query: str,
        label: str,
        cc: CC,
        arch: Architecture | None,
        gpu: GPU | None,
        candidates: tuple[str, ...] = (),
    ) -> None:
        self.query = query
        self.label = label
        self.cc = cc
        self.arch = arch
        self.gpu = gpu
        self.candidates = candidates

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "query": self.query,
            "name": self.label,
            "compute_capability": cc_str(self.cc),
            "architecture": self.arch.name if self.arch else None,
            "pci_ids": list(self.gpu.pci_ids) if self.gpu else [],
        }
        if self.candidates:
            d["candidates"] = list(self.candidates)
        return d


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
        return Target(text, cc.sm, cc, arch, None)
    found = lookup(m, text)
    if not found:
        hint = suggestions(m, text)
        extra = f"; did you mean {', '.join(repr(h) for h in hint)}?" if hint else ""
        raise CompatError(
            f"unknown GPU {text!r}: give a name (K40m), a PCI ID (10de:1023) or a compute "
            f"capability (sm_35){extra}"
        )
    if len(found) > 1 and not _judged_alike(m, found):
        names = ", ".join(f"{g.name} ({_describe(m, g)})" for g in found[:12])
        more = f" and {len(found) - 12} more" if len(found) > 12 else ""
        raise CompatError(
            f"GPU {text!r} is ambiguous: it matches {names}{more}, which differ in compute "
            "capability or driver branches; give one of these names"
        )
    gpu = found[0]
    arch = m.architecture_of(gpu)
    if len(found) == 1:
        return Target(text, gpu.name, gpu.compute_capability, arch, gpu)
    # Alike for the rules: answer for all of them and say so (compat.resolution's reasons).
    alike = tuple(g.name for g in found)
    return Target(text, gpu.name, gpu.compute_capability, arch, gpu, alike)


def _describe(m: Matrix, g: GPU) -> str:
    arch = m.architecture_of(g)
    first = max(arch.min_driver_branch, g.min_driver_branch or 0)
    last = arch.last_driver_branch
    return (
        f"{cc_str(g.compute_capability)}, branches {first}-{last}"
        if last
        else (f"{cc_str(g.compute_capability)}, branches {first}+")
    )


def targets(m: Matrix, queries: list[Any] | tuple[Any, ...]) -> list[Target]:
    return [target(m, q) for q in queries]
