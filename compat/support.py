"""The support table: one row per compute capability with the newest stack for it (the
README table and ``gpu-compat matrix``)."""

from __future__ import annotations

from compat import rules
from compat.branches import driving_branches
from compat.data import Matrix
from compat.gpus import target
from compat.model import CC, cc_str, major_minor, sm_name
from compat.resolution import resolve

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


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
        q = sm_name(cc)
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
    fits = [tk for tk in cuda if major_minor(tk.version) <= major_minor(b.max_cuda)]
    return fits[-1].version_text if fits else None
