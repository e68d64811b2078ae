# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Ansible filters over gpuprov's serving tables (compat/serving.py, ``gpu-compat serving``)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: gpu_serving_triton_check
short_description: Judge NGC tritonserver tags against a host's driver branch and GPUs
description:
  - Filters over C(compat/data/{triton,onnx,torchserve}.yaml), the same data and code as
    C(gpu-compat serving). C(gpu_serving_triton_check) judges one tag (C(ok), C(reasons) naming
    the tag, its minimum driver and the host's branch); C(gpu_serving_triton_pick) returns the
    newest tag that runs (empty dict when none); C(gpu_serving_onnx_runtimes) the opset table
    of the onnxruntime releases; C(gpu_serving_torchserve_check) judges a TorchServe release.
positional: tag
options:
  tag:
    description: A tritonserver tag such as C(24.04).
    type: str
    required: true
  driver:
    description: The host's driver branch (C(535)) or version (C(535.183.01)); empty for none.
    type: raw
  gpus:
    description: GPU queries (names, PCI IDs) or gpu_info dicts.
    type: list
    elements: raw
"""

EXAMPLES = r"""
- name: Refuse a Triton tag the host's driver cannot run
  ansible.builtin.assert:
    that: (model_serving_triton_tag | gpu_serving_triton_check(gpuprov_plan.driver.branch, gpus)).ok
"""

RETURN = r"""
_value:
  description: A dict; see C(gpu-compat serving triton --json).
  type: dict
"""

from typing import Any

from ansible.errors import AnsibleFilterError

try:
    import compat
    from compat import serving
    from compat.model import CompatError
except ImportError as _exc:  # pragma: no cover - only without `pip install -e .`
    _IMPORT_ERROR: ImportError | None = _exc
else:
    _IMPORT_ERROR = None


def _tables() -> Any:
    if _IMPORT_ERROR is not None:
        raise AnsibleFilterError(
            "the gpuprov compat package is not importable on the controller "
            f"({_IMPORT_ERROR}); run `pip install -e .` in the venv that runs ansible"
        )
    return serving.load()


def _ccs(gpus: Any) -> list[str]:
    return compat.compute_capabilities(list(gpus or []))  # CompatError: the callers say which


def gpu_serving_triton_check(tag: Any, driver: Any = None, gpus: Any = None) -> dict[str, Any]:
    try:
        return serving.triton_check(_tables(), str(tag), driver or None, _ccs(gpus))
    except CompatError as exc:
        raise AnsibleFilterError(f"gpu_serving_triton_check: {exc}") from exc


def gpu_serving_triton_pick(driver: Any, gpus: Any = None) -> dict[str, Any]:
    try:
        return serving.triton_pick(_tables(), driver or None, _ccs(gpus)) or {}
    except CompatError as exc:
        raise AnsibleFilterError(f"gpu_serving_triton_pick: {exc}") from exc


def gpu_serving_onnx_runtimes(_: Any = None) -> list[dict[str, Any]]:
    return [
        {"onnxruntime": r["onnxruntime"], "max_opset": r["max_opset"]}
        for r in _tables()["onnx.yaml"]["runtimes"]
    ]


def gpu_serving_torchserve_check(version: Any, torch: Any, java: Any = None) -> dict[str, Any]:
    try:
        return serving.torchserve_check(
            _tables(), str(version), str(torch), None if java in (None, "") else int(java)
        )
    except CompatError as exc:
        raise AnsibleFilterError(f"gpu_serving_torchserve_check: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "gpu_serving_triton_check": gpu_serving_triton_check,
            "gpu_serving_triton_pick": gpu_serving_triton_pick,
            "gpu_serving_onnx_runtimes": gpu_serving_onnx_runtimes,
            "gpu_serving_torchserve_check": gpu_serving_torchserve_check,
        }
