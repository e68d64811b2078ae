"""Explain: recognise an error message and answer its cause and fix from the matrix."""

from __future__ import annotations

from compat import rules
from compat.data import Matrix
from compat.evaluation import CHANNELS
from compat.gpus import Target, target, targets
from compat.install import install_commands
from compat.model import CompatError, VersionKey, parse_driver
from compat.resolution import last_covering, resolve

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


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
                last = last_covering(m, t, ch)
                if last is None:
                    lines.append(f"no official {ch} build runs on {t.label}")
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
            pip = plan["install"]["commands"]["pip"]
            lines.append(f"what runs here: torch {plan['torch']}+{plan['variant']}: {pip}")
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
