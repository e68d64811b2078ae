"""The verifying fast path's shape in every provisioning role (issue 19), tested as data.

Each role probes first (plugins/modules/gpuprov_state.py), includes its change phases
(tasks/converge.yml) only when the probe found a difference, forgets its record before
changing anything and records last, only on a run that reached every task. An include, not a
block: a block's condition is copied to each task in it, and each skipped task still costs
the controller a worker per host. What the probe finds and repairs
on real hosts is tested in tests/lab/test_site.py (the drift cases) and
tests/unit/test_gpuprov_state.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"

FAST_PATH_ROLES = (
    "dist_launch",
    "docker",
    "gpu_monitoring",
    "gpu_smoke",
    "jupyterlab",
    "model_serving",
    "nvidia_container_toolkit",
    "nvidia_driver",
    "object_storage",
    "pytorch",
)
# Roles without one, and why: gpuprov_report writes controller reports; validate_inventory
# changes nothing; gpuprov_pull is not in site.yml (playbooks/pull.yml, once per host) and
# its few tasks are each idempotent; gpuprov_bundle serves a bundle on cache hosts only (each
# task idempotent) and its client is a few file tasks in sources.yml. (gpu_smoke's probe
# covers its install phase; its layers run every time.)
WITHOUT = ("gpuprov_bundle", "gpuprov_pull", "gpuprov_report", "validate_inventory")
SPEC_KEYS = {
    "packages",
    "paths",
    "trees",
    "json_keys",
    "units",
    "venvs",
    "distributions",
    "commands",
}


def _tasks(role: str, name: str = "main.yml") -> list[dict[str, Any]]:
    doc = yaml.safe_load((ROLES / role / "tasks" / name).read_text())
    assert isinstance(doc, list)
    return doc


def _state_calls(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [t for t in tasks if "gpuprov_state" in t]


def test_every_role_is_listed() -> None:
    roles = {p.name for p in ROLES.iterdir() if (p / "tasks" / "main.yml").exists()}
    assert roles == set(FAST_PATH_ROLES) | set(WITHOUT)
    with_probe = {
        r for r in roles if "gpuprov_state:" in (ROLES / r / "tasks" / "main.yml").read_text()
    }
    assert with_probe == set(FAST_PATH_ROLES)


@pytest.mark.parametrize("role", FAST_PATH_ROLES)
def test_probe_then_one_gated_include_forget_first_record_last(role: str) -> None:
    tasks = _tasks(role)
    probes = _state_calls(tasks)
    assert len(probes) == 1, "one probe, outside the converge phases"
    probe = probes[0]
    assert probe["gpuprov_state"]["role"] == role
    assert probe["gpuprov_state"].get("state", "probe") == "probe"
    assert probe["register"] == f"__{role}_state"
    assert "always" in probe["tags"]
    assert not [t for t in tasks if "block" in t], "a block's condition is checked per task"
    gates = [t for t in tasks if "converge.yml" in str(t.get("ansible.builtin.include_tasks"))]
    assert len(gates) == 1
    gate = gates[0]
    assert gate["ansible.builtin.include_tasks"] == {"file": "converge.yml"}
    assert tasks.index(probe) < tasks.index(gate)
    assert f"_{role}_converge" in str(gate["when"])
    assert gate["tags"] == ["always"], "included under any --tags; its tasks keep their own"
    phases_all = _tasks(role, "converge.yml")
    # It may open by naming what the probe found (a debug: no change, and on a converged host
    # not one more skipped task in main.yml); the driver role names it in main.yml, where its
    # changes may wait for the rolling play.
    says = [t for t in tasks + phases_all if "Say what differs" in str(t.get("name"))]
    assert len(says) == 1, "what differs is said once"
    assert "ansible.builtin.debug" in says[0]
    assert (says[0] in tasks) == (role == "nvidia_driver")
    if says[0] is phases_all[0]:
        phases_all = phases_all[1:]
    first, last = phases_all[0], phases_all[-1]
    calls = _state_calls(phases_all)
    assert [c["gpuprov_state"].get("state") for c in calls].count("forget") == 1
    phases = [t for t in phases_all if "gpuprov_state" not in t]
    # Forget comes before every change phase (a preflight that changes nothing may precede).
    forget = next(c for c in calls if c["gpuprov_state"].get("state") == "forget")
    # ... and is skipped where the probe found no record file (a fresh host): nothing to remove.
    assert forget["when"] == f"__{role}_state.recorded | default(true)"
    # A probe skipped by its own condition registers no `recorded`: then it forgets.
    forgets = jinja2.Environment(autoescape=True).compile_expression(forget["when"])
    assert [
        forgets(**{f"__{role}_state": r}) for r in ({"skipped": True}, {"recorded": False})
    ] == [
        True,
        False,
    ]
    later = phases_all[phases_all.index(forget) + 1 :]
    assert all("preflight" not in str(t.get("import_tasks", t)) for t in later)
    assert phases, "the change phases are in converge.yml"
    assert first is forget or "preflight" in str(first)
    assert last["gpuprov_state"]["state"] == "record"
    assert last["when"] == f"_{role}_state_full_run"
    for call in (probe, last):
        assert call["gpuprov_state"]["inputs"] == f"{{{{ _{role}_state_inputs }}}}"
        assert call["gpuprov_state"]["spec"] == f"{{{{ _{role}_state_spec }}}}"


@pytest.mark.parametrize("role", FAST_PATH_ROLES)
def test_state_variables_are_defined_once(role: str) -> None:
    doc = yaml.safe_load((ROLES / role / "vars" / "main.yml").read_text())
    for suffix in ("state_vars", "state_inputs", "state_spec", "state_full_run", "converge"):
        assert f"_{role}_{suffix}" in doc, suffix
    spec = doc[f"_{role}_state_spec"]
    assert isinstance(spec, dict)
    assert set(spec) <= SPEC_KEYS, set(spec) - SPEC_KEYS
    assert "gpuprov_state_inputs(role_path" in doc[f"_{role}_state_inputs"]
    assert doc[f"_{role}_state_vars"].startswith("{{ query('ansible.builtin.varnames', '^(")
    pattern = re.search(r"varnames', '([^']+)'\)", doc[f"_{role}_state_vars"])
    assert pattern, doc[f"_{role}_state_vars"]
    inputs = re.compile(pattern[1])
    assert inputs.search(f"{role}_anything"), "the role's own variables are inputs"
    # A run narrowed by --tags or --skip-tags runs the phases and records nothing.
    assert "ansible_run_tags | list == ['all']" in doc[f"_{role}_state_full_run"]
    assert "ansible_skip_tags | length == 0" in doc[f"_{role}_state_full_run"]
    assert f"__{role}_state.converged" in doc[f"_{role}_converge"]
    assert f"_{role}_state_full_run" in doc[f"_{role}_converge"]


def test_package_lists_are_refreshed_only_through_apt_ready() -> None:
    """One refresh per host per run (issue 19 item 3): no role asks apt for update_cache."""
    offenders = [
        str(p.relative_to(ROOT))
        for p in ROLES.glob("*/tasks/*.yml")
        if "update_cache" in p.read_text()
    ]
    assert offenders == []
