# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Action plugin for gpu_info: run the module on the host, enrich on the controller.

The managed host has no compat package, so the module reports what the hardware and the
driver say. Here, on the controller, each GPU is completed from the compat matrix by PCI ID:
name (when the host only knew the PCI ID), compute capability (when the driver did not
report it, e.g. R470's nvidia-smi) and architecture. A PCI ID the matrix does not know is
left as name "unknown" and compute_capability null: never guessed upward.

``reuse: run`` (an argument of this plugin, not of the module): answer with this run's last
scan of the host, made with the same arguments as the same user, instead of scanning again.
Each scan is stamped with the run that made it (the fact ``gpu_info_scan``: the
ansible-playbook process and its start time), its arguments and its user; a stamp of another
run, or none, means a scan. The roles' preflights ask for it: the validate and plan plays
scanned moments before, and the driver role scans again after it changes anything
(roles/nvidia_driver/tasks/converge.yml).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

REUSE = ("never", "run")


class MatrixGPU(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def compute_capability(self) -> str | tuple[int, int]: ...
    @property
    def architecture(self) -> str: ...


class Matrix(Protocol):
    def gpu_by_pci(self, pci_id: str) -> MatrixGPU | None: ...


def _load_probe() -> ModuleType:
    """gpuprov's hardware probe, plugins/module_utils/gpu_probe.py (stdlib only), for its
    build_labels: labels have one implementation, on the host and here.

    The module gets it as ``ansible.module_utils.gpu_probe`` (AnsiballZ ships the configured
    module_utils dir); on the controller Ansible does not resolve that name for an action
    plugin, so the file is loaded from its place beside this plugin's directory."""
    with contextlib.suppress(ImportError):  # installed under its Ansible name (unit tests)
        return importlib.import_module("ansible.module_utils.gpu_probe")
    path = Path(__file__).resolve().parents[1] / "module_utils" / "gpu_probe.py"
    spec = importlib.util.spec_from_file_location("_gpuprov_gpu_probe", path)
    if spec is None or spec.loader is None:  # pragma: no cover - the file ships with this plugin
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_matrix() -> Matrix:
    """The compat matrix from the controller's installed gpuprov package."""
    try:
        import compat  # controller-only dependency
    except ImportError as exc:
        raise ImportError(f"{exc}: run `pip install -e .` in the venv that runs ansible") from exc
    matrix: Matrix = compat.load()
    return matrix


def cc_text(cc: str | tuple[int, int]) -> str:
    """compat keeps compute capabilities as (major, minor); facts spell them "X.Y"."""
    return cc if isinstance(cc, str) else f"{cc[0]}.{cc[1]}"


def enrich(facts: dict[str, Any], matrix: Matrix) -> dict[str, Any]:
    """Complete each GPU from the matrix; recompute the labels. Returns a new dict."""
    probe = _load_probe()
    result = dict(facts)
    gpus: list[dict[str, Any]] = []
    unknown: list[str] = []
    for original in facts.get("gpus", []):
        gpu = dict(original)
        row = matrix.gpu_by_pci(str(gpu["pci_id"]).lower()) if gpu.get("pci_id") else None
        if row is None:
            gpu["matrix"] = False
            if gpu.get("source") == "pci":
                gpu["name"] = "unknown"
                gpu["compute_capability"] = None
            unknown.append(f"{gpu.get('pci_id')} at {gpu.get('bus_id')}")
        else:
            gpu["matrix"] = True
            if not gpu.get("name") or gpu["name"] == "unknown":
                gpu["name"] = row.name
            if not gpu.get("compute_capability"):
                gpu["compute_capability"] = cc_text(row.compute_capability)
            if not gpu.get("architecture"):
                gpu["architecture"] = str(row.architecture)
        gpus.append(gpu)
    result["gpus"] = gpus
    result["unknown_pci_ids"] = unknown
    result["labels"] = probe.build_labels(gpus, facts.get("driver_version"))
    return result


def run_id(proc: Path = Path("/proc")) -> str | None:
    """The ansible-playbook run this worker serves: its parent's PID and start time (field 22
    of /proc/PID/stat, clock ticks since boot), so that a PID reused later is another run.
    None where /proc cannot tell (then nothing is reused)."""
    parent = os.getppid()
    try:
        stat = (proc / str(parent) / "stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # the command name may hold spaces and parens
    return f"{parent}:{fields[19]}" if len(fields) > 19 else None


def reusable(facts: dict[str, Any], stamp: dict[str, Any]) -> dict[str, Any] | None:
    """The host's last scan (its facts) when it carries ``stamp``: made in this run, with the
    same module arguments, as the same user. Else None (also when the run is unknown)."""
    scan = facts.get("gpu_info")
    if stamp.get("run") is None or not isinstance(scan, dict):
        return None
    return scan if facts.get("gpu_info_scan") == stamp else None


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible-core ships no type hints
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(
        self, tmp: str | None = None, task_vars: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = dict(self._task.args)
        reuse = str(args.pop("reuse", "never"))
        if reuse not in REUSE:
            raise AnsibleActionFail(f"gpu_info: reuse is {reuse!r}; one of {', '.join(REUSE)}")
        # The user the module runs as is part of what it sees: NVML and nvidia-smi may answer
        # root only (the device files' mode), /proc/1/environ is root's (validate and plan
        # scan without become, the roles with it).
        pc = self._play_context
        user = (pc.become_user or "root") if pc.become else (pc.remote_user or "")
        # Plain data: the fact cache keeps the stamp, and Ansible 2.19 decodes a tagged string
        # (the arguments' and the user's template origins) on every task of every host after.
        stamp = json.loads(json.dumps({"run": run_id(), "args": args, "user": str(user)}))
        if reuse == "run":
            scan = reusable((task_vars or {}).get("ansible_facts", {}), stamp)
            if scan is not None:
                result.update(
                    changed=False,
                    reused=True,
                    ansible_facts={"gpu_info": scan, "gpu_info_scan": stamp},
                )
                return result
        module_result: dict[str, Any] = self._execute_module(
            module_name="gpu_info",
            module_args=dict(args),  # a copy: _execute_module adds its _ansible_* keys
            task_vars=task_vars or {},
        )
        result.update(module_result)
        if result.get("failed"):
            return result
        facts = result.get("ansible_facts", {}).get("gpu_info")
        if facts is None:
            return result
        if stamp["run"] is not None:
            result["ansible_facts"]["gpu_info_scan"] = stamp
        try:
            matrix = load_matrix()
        except Exception as exc:  # report, keep the host's own answer
            result.setdefault("warnings", []).append(
                f"gpu_info: compat matrix unavailable on the controller ({exc}); GPUs not enriched"
            )
            return result
        enriched = enrich(facts, matrix)
        for item in enriched["unknown_pci_ids"]:
            result.setdefault("warnings", []).append(
                f"gpu_info: PCI ID {item} is not in the compat matrix; reported as unknown"
            )
        result["ansible_facts"]["gpu_info"] = enriched
        result["changed"] = False
        return result
