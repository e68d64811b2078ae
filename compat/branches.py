"""Driver branches: which branches drive a host's GPUs and which CUDA each branch runs."""

from __future__ import annotations

from compat import rules
from compat.data import Matrix
from compat.gpus import Target, targets
from compat.model import CompatError, Toolkit, major_minor

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def driving_branches(m: Matrix, tgts: list[Target]) -> list[int]:
    """Driver branches in the data that drive every target GPU."""
    # Identical GPUs (a host's eight A100s) are judged once: drives() reads arch and gpu only.
    kinds = list({(id(t.arch), id(t.gpu)): t for t in tgts}.values())
    out = []
    for b in m.branches:
        if all(t.arch is None or drives(b.branch, t) for t in kinds):
            out.append(b.branch)
    return out


def drives(branch: int, t: Target) -> bool:
    """Whether driver branch ``branch`` drives this GPU (True when its architecture is unknown)."""
    if t.arch is None:
        return True
    if t.gpu is not None:
        return rules.branch_drives(branch, t.gpu, t.arch)
    return t.arch.drives(branch)


def branch_span(t: Target) -> tuple[int, int | None] | None:
    """The first and last driver branch that drive ``t`` (last None: still supported): the
    GPU's own first branch where the data gives one, else its architecture's. The one floor
    that ``lookup``, the support table and every driver message use."""
    if t.arch is None:
        return None
    first = t.arch.min_driver_branch
    if t.gpu is not None and t.gpu.min_driver_branch is not None:
        first = max(first, t.gpu.min_driver_branch)
    return first, t.arch.last_driver_branch


def not_driven_reason(m: Matrix, branch: int, t: Target) -> str:
    """Why ``branch`` does not drive ``t``, naming the branches that do."""
    span = branch_span(t)
    if span is None or t.arch is None:
        return f"driver branch {branch}: the architecture of {t.label} is unknown"
    first, last = span
    allowed = f"branches {first} to {last}" if last is not None else f"branch {first} and newer"
    return (
        f"driver branch {branch} does not drive {t.label} ({t.arch.display}): allowed are {allowed}"
    )


def branch_runs(m: Matrix, branch: int, toolkit: Toolkit) -> str | None:
    """``FULL``, ``MINOR`` or None: whether some driver of ``branch`` runs this toolkit."""
    b = m.branch(branch)
    if b is None:
        return None
    if major_minor(b.max_cuda) >= major_minor(toolkit.version):
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


def parse_branch(branch: Any) -> int:
    """A driver branch as the inventory writes it (``535``, ``"535"``, ``"535.183.01"``)."""
    try:
        return int(str(branch).strip().split(".")[0])
    except ValueError:
        raise CompatError(f"driver branch {branch!r} is not a number such as 535") from None


def branch_check(m: Matrix, branch: Any, gpus: list[Any] | tuple[Any, ...]) -> dict[str, Any]:
    """Whether driver branch ``branch`` drives every GPU; names the GPU and allowed branches."""
    number = parse_branch(branch)
    tgts = targets(m, list(gpus))
    reasons = [not_driven_reason(m, number, t) for t in tgts if not drives(number, t)]
    if m.branch(number) is None:
        reasons.append(
            f"driver branch {number} is not in the matrix: known are "
            + ", ".join(str(b.branch) for b in m.branches)
        )
    return {
        "ok": not reasons,
        "branch": number,
        "reasons": reasons,
        "allowed_branches": driving_branches(m, tgts),
    }


def debian_packages(m: Matrix) -> dict[str, dict[int, dict[str, list[str]]]]:
    """Debian version ("12") -> driver branch -> {kernel, userspace} package lists: what the
    nvidia_driver role installs (compat/data/drivers.yaml, ``debian:``)."""
    out: dict[str, dict[int, dict[str, list[str]]]] = {}
    for row in m.debian:
        packages = row["packages"]
        out.setdefault(str(row["version"]), {})[int(row["branch"])] = {
            "kernel": list(packages["kernel"]),
            "userspace": list(packages["userspace"]),
        }
    return out
