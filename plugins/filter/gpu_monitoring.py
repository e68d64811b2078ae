# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Filters of the gpu_monitoring role (pure; unit-tested in tests/unit/test_gpu_monitoring.py).

gpu_monitoring_facts(plan, smoke)               the facts document the collector reads
gpu_monitoring_scrape_config(targets, job)      a Prometheus scrape_configs snippet
gpu_monitoring_dcgm_tag(branch, tags)           the dcgm-exporter tag for a driver branch
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

try:
    from ansible.errors import AnsibleFilterError as _Error
except ImportError:  # pragma: no cover  (imported without Ansible)
    _Error = ValueError


def gpu_monitoring_facts(
    plan: Mapping[str, Any] | None, smoke: Mapping[str, Any] | None
) -> dict[str, Any]:
    """What the host's collector turns into metrics: the plan (only .torch, .variant, .cuda,
    .driver.branch, .ok are read) and the smoke verdicts per layer.

    No time in it: the role writes the file only when the plan or the verdicts change, so the
    collector takes when they last changed from the file's modification time (the smoke
    report on the controller is rewritten at every run; a time from it would rewrite the
    file at every run, and keeping an earlier one meant reading the file on the host first)."""
    out: dict[str, Any] = {"plan": {}, "smoke": {}}
    if plan:
        driver = plan.get("driver") or {}
        out["plan"] = {
            "driver_branch": driver.get("branch") if isinstance(driver, Mapping) else None,
            "cuda": plan.get("cuda"),
            "torch": plan.get("torch"),
            "variant": plan.get("variant"),
            "ok": bool(plan.get("ok")),
        }
    if smoke:
        out["smoke"] = {
            "ok": bool(smoke.get("ok")),
            "layers": [
                {"layer": str(v.get("layer")), "status": str(v.get("status"))}
                for v in smoke.get("layers") or []
            ],
        }
    return out


def gpu_monitoring_scrape_config(
    targets: Sequence[Mapping[str, Any]], job: str = "gpuprov"
) -> dict[str, Any]:
    """scrape_configs with one static target per host (label `host` = inventory name)."""
    if not targets:
        raise _Error("no hosts to scrape: the monitoring play ran on none")
    return {
        "scrape_configs": [
            {
                "job_name": job,
                "static_configs": [
                    {
                        "targets": [f"{t['address']}:{int(t['port'])}"],
                        "labels": {"host": str(t["name"])},
                    }
                    for t in targets
                ],
            }
        ]
    }


def gpu_monitoring_dcgm_tag(branch: object, tags: Mapping[Any, str]) -> str:
    """The dcgm-exporter image tag for a driver branch (keys may be ints or strings)."""
    by_branch = {str(k): str(v) for k, v in tags.items()}
    if branch is None or str(branch) not in by_branch:
        raise _Error(
            f"no dcgm-exporter tag for driver branch {branch!r} in gpu_monitoring_dcgm_tags "
            f"(known: {', '.join(sorted(by_branch)) or 'none'}); add one or leave "
            "gpu_monitoring_dcgm_enabled false"
        )
    return by_branch[str(branch)]


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "gpu_monitoring_facts": gpu_monitoring_facts,
            "gpu_monitoring_scrape_config": gpu_monitoring_scrape_config,
            "gpu_monitoring_dcgm_tag": gpu_monitoring_dcgm_tag,
        }
