"""What the fleet report makes of a host's smoke verdicts: which layers cannot pass there (and
why), how each layer reads, and why its installed torch is not the plan's.

Pure functions over the JSON documents of reports/plan and reports/smoke (no I/O); used by
scripts/report.py for the summary, fleet.md, fleet.json and the page (docs/report.md).

"Expected" (a layer that cannot pass in that environment) comes from declared data only:

1. The smoke report's ``cannot_pass`` {layer: reason}, when the report has that field (the
   gpu_smoke role's ``gpu_smoke_cannot_pass``): it is the whole truth, even when empty.
2. Else, derived from structured fields, never from a reason's wording:
   - L1 when the driver has no kernel module (smoke ``driver.kernel_module`` false) on a host
     that gpu_info found to be a container (plan ``gpu_info.virtualization`` not "none"): a
     container has no kernel of its own, and nvidia_driver skips the kernel steps there;
   - L3 when the installed torch is the CPU build the inventory declares for the host
     (``torch_expected``: gpu_smoke_expected_torch, with its reason): a CPU build cannot pass
     the CUDA layer.
A layer the host requires is never expected: a required layer that did not pass fails the
host whatever is declared, and the page says the two declarations contradict each other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

PASSING = ("pass", "pass (cpu)")
NO_KERNEL_MODULE = "userspace only: no kernel module"
# The installed driver when no driver answered and the smoke run could not read the packages.
PACKAGES_UNREAD = "unknown (the host's packages could not be read: see its smoke report)"
# run_all.py --no-torch skips these with one reason (L5's reason names the dist hosts too).
TORCH_LAYERS = ("L3", "PERF", "L4", "L6")
# How a layer reads, per category (the cell's text: the page never relies on colour alone).
LABELS = {
    "pass": "pass",
    "skip": "skipped",
    "expected": "EXPECTED",
    "fail": "FAIL",
    "failopt": "FAIL",
    "none": "not run",
}


def _plain(v: object) -> str:
    return str(v).strip() if v is not None else ""


def cannot_pass(
    smoke: Mapping[str, Any], plan_doc: Mapping[str, Any] | None, installed: str | None
) -> tuple[dict[str, str], str]:
    """({layer: why it cannot pass here}, source): source is "declared" (the smoke report's
    `cannot_pass`), "derived" (the fallback above) or "" (nothing expected)."""
    declared = smoke.get("cannot_pass")
    if isinstance(declared, Mapping):
        out = {
            str(k): _plain(v) or "declared in gpu_smoke_cannot_pass" for k, v in declared.items()
        }
        return out, "declared" if out else ""
    derived: dict[str, str] = {}
    facts = dict((plan_doc or {}).get("gpu_info") or {})
    virt = _plain(facts.get("virtualization"))
    if (smoke.get("driver") or {}).get("kernel_module") is False and virt not in ("", "none"):
        derived["L1"] = (
            f"{NO_KERNEL_MODULE}: a {virt} container has no kernel of its own "
            "(nvidia_driver installs the userspace only there)"
        )
    expected = dict(smoke.get("torch_expected") or {})
    want = _plain(expected.get("torch"))
    if want and want == installed and want.rpartition("+")[2] == "cpu" and "+" in want:
        why = _plain(expected.get("reason"))
        derived["L3"] = (
            f"the inventory expects the CPU build {want} here (gpu_smoke_expected_torch)"
            + (f": {why}" if why else "")
        )
    return derived, "derived" if derived else ""


def category(
    layer: str, status: str | None, required: Sequence[str], not_passed: Sequence[str], why: str
) -> str:
    """pass, skip, expected (did not pass, cannot here), fail (a required layer that did not
    pass: fails the host), failopt (failed, not required: an unexpected failure all the same),
    none (not run)."""
    if layer in not_passed:
        return "fail"
    if status is None:
        return "none"
    if status in PASSING:
        return "pass"
    if status == "skipped":
        return "skip"
    if why and layer not in required:
        return "expected"
    return "failopt"


def layer_rows(
    smoke: Mapping[str, Any] | None,
    plan_doc: Mapping[str, Any] | None,
    installed: str | None,
    order: Sequence[str],
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """{layer: {status, name, reason, hint, category, required, expected}} for every layer the
    host has a verdict for (or that it requires), and notes on contradicting declarations.
    `hint` is the raw hint: the caller keeps only those that run."""
    doc = smoke or {}
    verdicts = {str(v.get("layer")): v for v in doc.get("layers") or []}
    required = [str(x) for x in doc.get("required") or []]
    missing = {str(v.get("layer")): v for v in doc.get("not_passed") or []}
    expected, source = cannot_pass(doc, plan_doc, installed) if smoke else ({}, "")
    rows: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    for name in order:
        v = verdicts.get(name) or missing.get(name)
        if v is None:
            continue
        status = v.get("status")
        why = expected.get(name, "")
        cat = category(name, None if status is None else str(status), required, list(missing), why)
        rows[name] = {
            "status": status,
            "name": v.get("name"),
            "reason": v.get("reason"),
            "hint": v.get("hint"),
            "category": cat,
            "required": name in required,
            "expected": why if cat == "expected" else None,
            "expected_source": source if cat == "expected" else None,
        }
        if why and name in required:
            notes.append(
                f"{name} is declared unable to pass here ({why}) but is required: the required "
                "layer counts; drop one of the two declarations"
            )
        elif why and cat == "pass":
            notes.append(f"{name} passed although declared unable to pass here ({why})")
    return rows, notes


def no_torch_reason(smoke: Mapping[str, Any]) -> str | None:
    """Why the host has no torch, as the smoke run was told (`no_torch`, the --no-torch reason
    run_all.py is given), else the one reason every torch layer it ran was skipped with."""
    declared = _plain(smoke.get("no_torch"))
    if declared:
        return declared
    torch_layers = [v for v in smoke.get("layers") or [] if v.get("layer") in TORCH_LAYERS]
    reasons = {_plain(v.get("reason")) for v in torch_layers}
    all_skipped = all(v.get("status") == "skipped" for v in torch_layers)
    if torch_layers and all_skipped and len(reasons) == 1 and "" not in reasons:
        return reasons.pop()
    return None


def torch_notes(
    host: str, planned: str | None, installed: str | None, smoke: Mapping[str, Any] | None
) -> tuple[list[str], list[str]]:
    """(notes, warnings) about planned vs installed torch, one line whenever they differ.

    A different build is a note when the inventory declares it (gpu_smoke_expected_torch: the
    version the host is meant to have instead of the plan's, with the reason), else a warning.
    No torch at all is a note when the smoke run was told the host has none (pytorch_method:
    none and its reason), a warning when the torch layers ran and found none."""
    if not planned or planned == installed or smoke is None:
        return [], []
    expected = dict(smoke.get("torch_expected") or {})
    want = _plain(expected.get("torch"))
    why = _plain(expected.get("reason"))
    if installed:
        if want and want == installed:
            note = f"{host}: torch {installed} instead of the plan's {planned}, on purpose"
            return [note + (f": {why}" if why else "")], []
        declared = f" (the inventory expects {want})" if want else ""
        return [], [
            f"{host}: installed torch {installed} is not the plan's {planned}{declared}; "
            "re-run site.yml, or declare the intent with gpu_smoke_expected_torch"
        ]
    reason = no_torch_reason(smoke)
    if reason:
        return [f"{host}: no torch installed (the plan's is {planned}), on purpose: {reason}"], []
    ran = {str(v.get("layer")): v for v in smoke.get("layers") or []}
    torch_ran = [ran[x] for x in TORCH_LAYERS if x in ran]
    if not torch_ran:
        return [
            f"{host}: installed torch not measured (the plan's is {planned}): the smoke run "
            "had no torch layer (gpu_smoke_layers)"
        ], []
    skipped = [v for v in torch_ran if v.get("status") == "skipped"]
    if len(skipped) == len(torch_ran):
        why_each = "; ".join(f"{v.get('layer')}: {v.get('reason')}" for v in skipped)
        return [
            f"{host}: installed torch unknown (the plan's is {planned}): every torch layer "
            f"was skipped ({why_each})"
        ], []
    failed = next((v for v in torch_ran if v.get("status") == "fail"), None)
    because = f": {failed.get('layer')} says {failed.get('reason')}" if failed else ""
    return [], [
        f"{host}: no torch found (the plan's is {planned}){because}; run playbooks/pytorch.yml, "
        "or give the host no PyTorch environment on purpose (pytorch_method: none)"
    ]


def findings(hosts: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The fleet's expected layers and its failures outside required layers, for headers:
    {"expected": [{host, layer, reason, source}], "failopt": [{host, layer, status, reason}]}."""
    out: dict[str, list[dict[str, Any]]] = {"expected": [], "failopt": []}
    for r in hosts:
        for layer, v in r["layers"].items():
            if v.get("category") == "expected":
                out["expected"].append(
                    {
                        "host": r["host"],
                        "layer": layer,
                        "reason": v["expected"],
                        "source": v["expected_source"],
                    }
                )
            elif v.get("category") == "failopt":
                out["failopt"].append(
                    {
                        "host": r["host"],
                        "layer": layer,
                        "status": v["status"],
                        "reason": v["reason"],
                    }
                )
    return out
