# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""The plan report playbooks/plan.yml writes (``reports/plan/<host>.json``), read back: the plan
a role may use when its playbook runs alone, without plan.yml in the run (roles/gpuprov_report,
entry point plan)."""

from __future__ import annotations

from typing import Any

from compat.plan import SCHEMA_VERSION


def _pci_ids(gpus: Any) -> list[str]:
    return sorted(str(g.get("pci_id") or "?") for g in gpus or [] if isinstance(g, dict))


def saved_plan(report: Any, gpus: Any) -> dict[str, Any]:
    """The plan a role may use from the plan report playbooks/plan.yml wrote (its playbook
    runs alone, without plan.yml): ``{"plan": <the plan or None>, "why": <why not, or "">}``.

    ``report`` is the report's JSON (None: there is none); ``gpus`` the host's GPUs as this
    run scanned them. The plan is used only when it is this version's document
    (SCHEMA_VERSION), it resolved (``ok``), and the host has the GPUs it was made for (the
    same PCI IDs); otherwise a role would act on a plan plan.yml would not make now."""
    if report is None:
        return {"plan": None, "why": ""}
    plan = report.get("plan") if isinstance(report, dict) else None
    if not isinstance(plan, dict):
        return {"plan": None, "why": "the report holds no plan"}
    if plan.get("schema_version") != SCHEMA_VERSION:
        return {
            "plan": None,
            "why": f"its plan is of schema {plan.get('schema_version')}, "
            f"this gpuprov's is {SCHEMA_VERSION}",
        }
    if not plan.get("ok"):
        return {"plan": None, "why": "its plan found no stack for the host (ok: false)"}
    info = report.get("gpu_info")
    then, now = _pci_ids(info.get("gpus") if isinstance(info, dict) else None), _pci_ids(gpus)
    if then != now:
        return {
            "plan": None,
            "why": f"the host's GPUs changed since (PCI IDs then {then or 'none'}, "
            f"now {now or 'none'})",
        }
    return {"plan": plan, "why": ""}
