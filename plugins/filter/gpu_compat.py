# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Ansible filters over gpuprov's compatibility matrix and serving tables (the same library as
``gpu-compat``, ``gpu-compat serving``)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: gpu_compat_resolve
short_description: Resolve the newest driver/CUDA/PyTorch stack for a host's GPUs
description:
  - Filters over gpuprov's compatibility matrix in C(compat/data), the same data and code as
    the C(gpu-compat) CLI. C(gpu_compat_resolve) returns the plan of C(gpu-compat resolve --json)
    plus C(ok); C(gpu_compat_check) the verdict of C(gpu-compat check --json);
    C(gpu_compat_gpu) one GPU record (empty dict when unknown); C(gpu_compat_branch_check)
    whether a driver branch drives every GPU of a host; C(gpu_compat_driver_preflight) the
    nvidia_driver role's branch and package set for a host, checked (C(refusal) says why not);
    C(gpu_compat_allowed_branches) the
    branches that drive every GPU; C(gpu_compat_plan) the host plan (docs/design.md) from the
    whole C(gpu_info) fact, the packaged branches and the inventory pins;
    C(gpu_compat_perf_floors) the performance floors of C(compat/data/perf.yaml) (or of the
    YAML file it is given).
  - Over C(compat/data/{triton,onnx,torchserve}.yaml), as C(gpu-compat serving)
    does, C(gpu_serving_triton_check) judges one NGC tritonserver tag against the host's driver
    branch and GPUs (C(ok), C(reasons)); C(gpu_serving_triton_pick) returns the newest tag
    that runs (empty dict when none); C(gpu_serving_onnx_runtimes) the opset table of the
    onnxruntime releases; C(gpu_serving_torchserve_check) judges a TorchServe release.
positional: gpus
options:
  gpus:
    description: GPU queries (names, PCI IDs such as C(10de:1023), C(sm_35)) or gpu_info dicts.
    type: list
    elements: raw
    required: true
  driver:
    description: Installed driver version, for example C(535.183.01).
    type: str
  python:
    description: Python version of the target environment (C(3.11)).
    type: str
  channel:
    description: C(pip) or C(conda).
    type: str
    default: pip
"""

EXAMPLES = r"""
- name: Resolve the stack of this host
  ansible.builtin.set_fact:
    gpuprov_plan: "{{ gpu_info.gpus | gpu_compat_resolve(python='3.11') }}"

- name: Refuse a branch that drops a GPU
  ansible.builtin.assert:
    that: (nvidia_driver_branch | gpu_compat_branch_check(gpu_info.gpus)).ok
"""

EXAMPLES += r"""
- name: Plan this host (one call; all branch policy is in compat.plan)
  ansible.builtin.set_fact:
    gpuprov_plan: >-
      {{ ansible_facts['gpu_info'] | gpu_compat_plan(packaged_branches=[535, 550],
           driver_branch=nvidia_driver_branch | default(none), host=inventory_hostname) }}
"""

EXAMPLES += r"""
- name: Refuse a Triton tag the host's driver cannot run
  ansible.builtin.assert:
    that: (model_serving_triton_tag | gpu_serving_triton_check(gpuprov_plan.driver.branch, gpus)).ok
"""

RETURN = r"""
_value:
  description: A dict; see C(gpu-compat resolve --json) and C(gpu-compat check --json).
  type: dict
"""

import re
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

try:
    import compat
    from compat import CompatError
except ImportError as _exc:  # pragma: no cover - only without `pip install -e .`
    _IMPORT_ERROR: ImportError | None = _exc
else:
    _IMPORT_ERROR = None


def _require() -> None:
    if _IMPORT_ERROR is not None:
        raise AnsibleFilterError(
            "the gpuprov compat package is not importable on the controller "
            f"({_IMPORT_ERROR}); run `pip install -e .` in the venv that runs ansible"
        )


def _queries(gpus: Any) -> list[Any]:
    if gpus is None:
        return []
    if isinstance(gpus, (str, dict)):
        gpus = [gpus]
    out: list[Any] = []
    for g in gpus:
        if isinstance(g, dict):
            pci = g.get("pci_id")
            name = g.get("name")
            out.append(pci if pci else name)
        else:
            out.append(str(g))
    return out


def gpu_compat_resolve(
    gpus: Any, driver: str | None = None, python: str | None = None, channel: str = "pip"
) -> dict[str, Any]:
    _require()
    try:
        return compat.resolve(
            _queries(gpus), driver=driver or None, python=python or None, channel=channel
        )
    except CompatError as exc:
        raise AnsibleFilterError(f"gpu_compat_resolve: {exc}") from exc


def gpu_compat_check(
    gpus: Any,
    torch: str,
    driver: str | None = None,
    python: str | None = None,
    channel: str = "pip",
) -> dict[str, Any]:
    _require()
    try:
        return compat.check(
            _queries(gpus),
            str(torch),
            driver=driver or None,
            python=python or None,
            channel=channel,
        )
    except CompatError as exc:
        raise AnsibleFilterError(f"gpu_compat_check: {exc}") from exc


def gpu_compat_gpu(query: Any) -> dict[str, Any]:
    _require()
    q = _queries(query)
    if not q or not q[0]:
        return {}
    try:
        found = compat.lookup(str(q[0]))
    except CompatError:
        return {}
    return found[0] if found else {}


def gpu_compat_branch_check(branch: Any, gpus: Any) -> dict[str, Any]:
    """Whether driver branch ``branch`` drives every GPU; names the GPU and allowed branches."""
    _require()
    try:
        return compat.branch_check(branch, _queries(gpus))
    except CompatError as exc:
        raise AnsibleFilterError(f"gpu_compat_branch_check: {exc}") from exc


def _branch_key(table: Any, branch: int) -> Any:
    """``branch`` as the key ``table`` uses (YAML gives int keys, JSON string ones), or None."""
    if not isinstance(table, dict):
        return None
    return branch if branch in table else (str(branch) if str(branch) in table else None)


def gpu_compat_driver_preflight(
    gpus: Any,
    host: str,
    pin: Any,
    plan: Any,
    distribution: str,
    os_version: Any,
    packages: Any,
    extra_packages: Any = None,
) -> dict[str, Any]:
    """The nvidia_driver role's choice of branch and package set for one host, checked.

    ``gpus`` is the gpu_info fact's list, ``pin`` nvidia_driver_branch (None: the plan's
    ``driver.branch``), ``packages`` the role's map OS version -> branch -> {kernel,
    userspace}. Returns {branch, known_gpus, unknown_gpus, branch_check, kernel_packages,
    userspace_packages, refusal}: ``refusal`` is "" or the first check that fails, in the
    role's order (the OS version has a package map; a branch is chosen; it drives every GPU
    the matrix knows; it is new enough for the planned CUDA; the OS packages it), each naming
    what to change. The package lists are empty when refused.
    """
    listed = [g for g in (gpus or []) if isinstance(g, dict)]
    known = [g for g in listed if g.get("matrix")]
    plan_d = plan if isinstance(plan, dict) else None
    branch = pin if pin is not None else ((plan_d or {}).get("driver") or {}).get("branch")
    out: dict[str, Any] = {
        "branch": branch,
        "known_gpus": known,
        "unknown_gpus": [g for g in listed if not g.get("matrix")],
        "branch_check": None,
        "kernel_packages": [],
        "userspace_packages": [],
        "refusal": "",
    }
    table = packages if isinstance(packages, dict) else {}
    version = str(os_version)
    if version not in {str(v) for v in table}:
        supported = ", ".join(str(v) for v in table)
        out["refusal"] = (
            f"nvidia_driver has no package map for {distribution} {version}; "
            f"supported versions: {supported}."
        )
        return out
    by_branch = table.get(version, table.get(os_version)) or {}
    if branch is None or not re.fullmatch(r"[0-9]+", str(branch)):
        out["refusal"] = (
            f"No driver branch for {host}: pin nvidia_driver_branch (an integer, e.g. 535) or "
            "run playbooks/plan.yml first (it sets gpuprov_plan.driver.branch). "
            f"Got: {branch}."
        )
        return out
    number = int(str(branch))
    out["branch"] = number
    if known:
        check = gpu_compat_branch_check(number, [g.get("pci_id") for g in known])
        out["branch_check"] = check
        if not check["ok"]:
            names = ", ".join(str(g.get("name")) for g in known)
            allowed = ", ".join(str(b) for b in check["allowed_branches"])
            out["refusal"] = (
                f"Driver branch {number} does not drive every GPU of {host} ({names}): "
                f"{'; '.join(check['reasons'])}. Allowed branches for this host: {allowed}. "
                "Nothing was changed."
            )
            return out
    if plan_d is not None and plan_d.get("cuda") is not None:
        driver = plan_d.get("driver") or {}
        minimum = driver.get("minor_compat_min_version") or driver.get("min_version") or "0"
        min_branch = str(minimum).split(".")[0]
        if min_branch.isdigit() and number < int(min_branch):
            out["refusal"] = (
                f"Driver branch {number} is too old for the planned CUDA {plan_d['cuda']} "
                f"(needs driver >= {minimum}). Pick a branch of at least {min_branch} or pin "
                "an older stack. Nothing was changed."
            )
            return out
    key = _branch_key(by_branch, number)
    if key is None:
        packaged = ", ".join(str(b) for b in by_branch)
        out["refusal"] = (
            f"Driver branch {number} has no packages on {distribution} {version}; "
            f"packaged branches: {packaged}. Nothing was changed."
        )
        return out
    chosen = by_branch[key]
    out["kernel_packages"] = list(chosen.get("kernel") or [])
    out["userspace_packages"] = list(chosen.get("userspace") or []) + list(extra_packages or [])
    return out


def gpu_compat_allowed_branches(gpus: Any) -> list[int]:
    """The driver branches in the matrix that drive every GPU, oldest first."""
    _require()
    try:
        return compat.allowed_branches(_queries(gpus))
    except CompatError as exc:
        raise AnsibleFilterError(f"gpu_compat_allowed_branches: {exc}") from exc


def gpu_compat_plan(
    gpu_info: Any,
    packaged_branches: Any = None,
    os_name: str | None = None,
    driver_branch: Any = None,
    torch: Any = None,
    channel: str | None = None,
    python: str | None = None,
    expect_gpu: Any = True,
    host: str | None = None,
    environment: Any = None,
) -> dict[str, Any]:
    """The host plan from the gpu_info fact (the whole dict, or its list of GPUs);
    ``environment`` is the torch_environment lookup's block (the plan carries it)."""
    _require()
    facts: dict[str, Any] = gpu_info if isinstance(gpu_info, dict) else {"gpus": gpu_info or []}
    if not isinstance(expect_gpu, bool):
        raise AnsibleFilterError(
            f"gpu_compat_plan: gpuprov_expect_gpu must be true or false, got {expect_gpu!r}"
        )
    try:
        return compat.plan_host(
            list(facts.get("gpus") or []),
            packaged_branches=list(packaged_branches or []),
            os_name=os_name or None,
            driver_branch=driver_branch,
            torch=torch,
            channel=channel or None,
            python=python or None,
            expect_gpu=expect_gpu,
            host=host,
            sysfs_root=facts.get("sysfs_root"),
            environment=dict(environment) if environment else None,
        )
    except CompatError as exc:
        raise AnsibleFilterError(f"gpu_compat_plan: {exc}") from exc


def gpu_compat_install(
    base: Any,
    local_version: bool = False,
    companions: bool = True,
    torchvision: str | None = None,
    torchaudio: str | None = None,
) -> dict[str, Any]:
    """The install document for one host from a plan's install (dict) or a pinned torch."""
    _require()
    try:
        return compat.install_for(
            base if isinstance(base, dict) else str(base),
            local_version=bool(local_version),
            companions=bool(companions),
            torchvision=torchvision or None,
            torchaudio=torchaudio or None,
        )
    except CompatError as exc:
        raise AnsibleFilterError(f"gpu_compat_install: {exc}") from exc


def gpu_compat_os_packages(os_family: Any) -> dict[str, Any]:
    """The driver package map of an OS family from the matrix (Debian: version -> branch ->
    {kernel, userspace}); the nvidia_driver role's vars/Debian.yml reads it."""
    _require()
    if str(os_family) != "Debian":
        raise AnsibleFilterError(
            f"gpu_compat_os_packages: no package map for {os_family!r} in compat/data "
            "(known: Debian)"
        )
    return compat.debian_packages()


def gpu_compat_host_modules(what: Any = "smoke") -> list[str]:
    """The compat modules (file names) the gpu_smoke role copies to each host."""
    _require()
    if what != "smoke":
        raise AnsibleFilterError(f"gpu_compat_host_modules: unknown set {what!r} (known: smoke)")
    return list(compat.HOST_MODULES)


def gpu_compat_perf_floors(path: Any = None) -> list[dict[str, Any]]:
    """The performance floors the gpu_smoke role judges PERF by: the matrix's (compat/data's
    perf.yaml, or GPU_COMPAT_DATA's) when ``path`` is empty, else the ``floors`` list of the
    YAML file at ``path`` (gpu_smoke_perf_file)."""
    _require()
    if path in (None, ""):
        return compat.perf_floors()
    import yaml

    try:
        doc = yaml.safe_load(Path(str(path)).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise AnsibleFilterError(
            f"gpu_compat_perf_floors: cannot read {path} (gpu_smoke_perf_file): {exc}"
        ) from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("floors"), list):
        raise AnsibleFilterError(
            f"gpu_compat_perf_floors: {path} (gpu_smoke_perf_file) holds no 'floors' list"
        )
    rows: list[dict[str, Any]] = doc["floors"]
    return rows


# --- serving (compat/serving.py) ----------------------------------------------------------


def gpu_serving_triton_check(tag: Any, driver: Any = None, gpus: Any = None) -> dict[str, Any]:
    _require()
    try:
        verdict: dict[str, Any] = compat.serving_triton(
            driver or None, list(gpus or []), tag=str(tag)
        )["images"][0]
    except CompatError as exc:
        raise AnsibleFilterError(f"gpu_serving_triton_check: {exc}") from exc
    return verdict


def gpu_serving_triton_pick(driver: Any, gpus: Any = None) -> dict[str, Any]:
    _require()
    try:
        pick: dict[str, Any] | None = compat.serving_triton(driver or None, list(gpus or []))[
            "pick"
        ]
    except CompatError as exc:
        raise AnsibleFilterError(f"gpu_serving_triton_pick: {exc}") from exc
    return pick or {}


def gpu_serving_onnx_runtimes(_: Any = None) -> list[dict[str, Any]]:
    _require()
    return compat.serving_onnx_runtimes()


def gpu_serving_torchserve_check(version: Any, torch: Any, java: Any = None) -> dict[str, Any]:
    _require()
    try:
        return compat.serving_torchserve(
            str(version), str(torch), None if java in (None, "") else int(java)
        )
    except CompatError as exc:
        raise AnsibleFilterError(f"gpu_serving_torchserve_check: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "gpu_compat_resolve": gpu_compat_resolve,
            "gpu_compat_check": gpu_compat_check,
            "gpu_compat_gpu": gpu_compat_gpu,
            "gpu_compat_branch_check": gpu_compat_branch_check,
            "gpu_compat_driver_preflight": gpu_compat_driver_preflight,
            "gpu_compat_allowed_branches": gpu_compat_allowed_branches,
            "gpu_compat_plan": gpu_compat_plan,
            "gpu_compat_install": gpu_compat_install,
            "gpu_compat_os_packages": gpu_compat_os_packages,
            "gpu_compat_host_modules": gpu_compat_host_modules,
            "gpu_compat_perf_floors": gpu_compat_perf_floors,
            "gpu_serving_triton_check": gpu_serving_triton_check,
            "gpu_serving_triton_pick": gpu_serving_triton_pick,
            "gpu_serving_onnx_runtimes": gpu_serving_onnx_runtimes,
            "gpu_serving_torchserve_check": gpu_serving_torchserve_check,
        }
