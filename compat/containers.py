"""NGC PyTorch containers: which image fits a host, and how sure its GPU floor is."""

from __future__ import annotations

from compat import rules
from compat.data import Matrix
from compat.gpus import Target
from compat.model import CC, CompatError, VersionKey, cc_str, cmp_key, version_key

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def container_floors(m: Matrix) -> dict[str, CC | None]:
    """Each NGC tag's GPU floor as far as sources allow: its own floor where a source confirms
    it; else the lowest confirmed floor of it or any later tag (floors never fell from one
    release to the next, so that bounds the unknown one from above); None when no later tag
    has a confirmed floor (then the image is never recommended)."""
    out: dict[str, CC | None] = {}
    bound: CC | None = None
    for c in sorted(m.containers, key=lambda c: c.tag, reverse=True):
        if c.min_cc_source is not None:
            bound = c.min_cc if bound is None else min(bound, c.min_cc)
            out[c.tag] = c.min_cc
        else:
            out[c.tag] = None if bound is None else max(bound, c.min_cc)
    return out


def container_for(
    m: Matrix, tgts: list[Target], drv: VersionKey | None, branches: list[int]
) -> dict[str, Any] | None:
    """The newest NGC PyTorch container whose CUDA supports every GPU and the driver, and whose
    GPU floor (confirmed, or bounded by a later confirmed one) is at or below every GPU."""
    if not tgts:
        return None
    top_branch = drv[0] if drv else (branches[-1] if branches else None)
    if top_branch is None:
        return None
    floors = container_floors(m)
    for c in sorted(m.containers, key=lambda c: c.tag, reverse=True):
        try:
            cuda = version_key(c.cuda, "CUDA")
            need = version_key(c.min_driver, "driver")
        except CompatError:
            continue
        tk = m.toolkit(cuda)
        floor = floors.get(c.tag)
        if tk is None or floor is None:
            continue
        if not all(rules.toolkit_supports(tk, t.cc) and t.cc >= floor for t in tgts):
            continue
        if top_branch < need[0] or (drv is not None and cmp_key(drv) < cmp_key(need)):
            continue
        return {
            "image": c.image,
            "tag": c.tag,
            "torch": c.torch,
            "cuda": c.cuda,
            "min_driver": c.min_driver,
            "min_compute_capability": cc_str(floor),
            "floor_verified": c.min_cc_source is not None,
            "source": c.source,
            "confidence": c.confidence,
        }
    return None
