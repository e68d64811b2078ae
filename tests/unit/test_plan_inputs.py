"""The roles that read the plan (gpuprov_plan) take it the same way whether playbooks/plan.yml
ran in the same run (site.yml) or not (the role's playbook alone), and pass it to their state
probe's inputs: otherwise a converged role runs its change phases again when its playbook
runs alone, and again at the next site.yml (seen 2026-12-06: serving.yml alone after site.yml
re-converged model_serving, 21 s instead of 3.5 s).

Read as data from the roles' files; the lab test test_site.py::
test_component_playbooks_alone_find_their_roles_converged runs it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from compat import saved_plan
from compat.plan import SCHEMA_VERSION

ROLES = Path(__file__).resolve().parents[2] / "roles"
# A use of the plan fact (comments left out).
USE = re.compile(r"^[^#\n]*\bgpuprov_plan\b", re.MULTILINE)
# gpu_monitoring passes what it reads of the plan in its collector's facts (its inputs hold
# _gpu_monitoring_facts, which tasks/preflight.yml computes from gpuprov_plan); dist_launch
# reads only the plan's torch, through its variable dist_launch_horovod_torch, which its
# state variables (every dist_launch_*) hold.
PASSED_AS = {"gpu_monitoring": "_gpu_monitoring_facts", "dist_launch": "'^(dist_launch|"}


def plan_readers() -> list[str]:
    readers = []
    for role in sorted(p for p in ROLES.iterdir() if (p / "tasks").is_dir()):
        if role.name == "gpuprov_report":
            continue  # the plan's loader itself
        texts = [
            f.read_text()
            for sub in ("tasks", "vars", "templates")
            for f in (role / sub).rglob("*")
            if f.is_file()
        ]
        if any(USE.search(t) for t in texts):
            readers.append(role.name)
    return readers


def test_the_plan_readers_are_the_ones_expected() -> None:
    """A new reader must be judged here too (the list is written out, not derived)."""
    assert plan_readers() == [
        "dist_launch",
        "gpu_monitoring",
        "jupyterlab",
        "model_serving",
        "nvidia_driver",
        "pytorch",
    ]


@pytest.mark.parametrize("role", plan_readers())
def test_a_plan_reader_loads_the_plan_when_the_run_did_not_plan(role: str) -> None:
    tasks = yaml.safe_load((ROLES / role / "tasks" / "preflight.yml").read_text())
    loads = [
        t
        for t in tasks
        if (t.get("ansible.builtin.include_role") or {}).get("name") == "gpuprov_report"
        and t["ansible.builtin.include_role"].get("tasks_from") == "plan"
    ]
    assert len(loads) == 1, f"{role}: include gpuprov_report tasks_from plan in preflight.yml"
    when = loads[0].get("when")
    conditions = " and ".join(when if isinstance(when, list) else [when])
    assert "gpuprov_plan is not defined" in conditions, when
    # Only on the hosts plan.yml plans: elsewhere the include would be six skipped or
    # controller-only tasks per role and run for nothing.
    assert "'gpu_nodes' in group_names" in conditions, when
    assert "always" in loads[0].get("tags", []) or role == "nvidia_driver", (
        f"{role}: the probe runs under any --tags; so must the plan's load"
    )


@pytest.mark.parametrize("role", plan_readers())
def test_a_plan_reader_passes_the_plan_to_its_state_inputs(role: str) -> None:
    role_vars = yaml.safe_load((ROLES / role / "vars" / "main.yml").read_text())
    inputs = role_vars[f"_{role}_state_inputs"] + role_vars[f"_{role}_state_vars"]
    expected = PASSED_AS.get(role, "'plan': gpuprov_plan")
    assert expected in inputs, f"{role}: its state inputs must hold {expected}"


@pytest.mark.parametrize("role", plan_readers())
def test_a_plan_reader_loads_the_plan_before_it_reads_it(role: str) -> None:
    """The first task of preflight.yml that uses gpuprov_plan comes after the load (seen
    2026-12-06: gpu_monitoring's dcgm check read it first)."""
    tasks = yaml.safe_load((ROLES / role / "tasks" / "preflight.yml").read_text())
    load = next(
        i
        for i, t in enumerate(tasks)
        if (t.get("ansible.builtin.include_role") or {}).get("tasks_from") == "plan"
    )
    uses = [i for i, t in enumerate(tasks) if USE.search(yaml.safe_dump(t)) and i != load]
    assert all(i > load for i in uses), (role, load, uses)


def test_the_plan_loader_reads_the_plan_report_plan_yml_writes() -> None:
    loader = (ROLES / "gpuprov_report" / "tasks" / "plan.yml").read_text()
    plan_play = (ROLES.parent / "playbooks" / "plan.yml").read_text()
    assert "gpuprov_report_kind: plan" in plan_play
    assert 'plan: "{{ gpuprov_plan }}"' in plan_play
    assert "gpu_info: \"{{ ansible_facts['gpu_info'] }}\"" in plan_play
    assert "hosts: gpu_nodes" in plan_play
    assert "/plan/{{ inventory_hostname }}.json" in loader
    assert "gpuprov.fleet.gpu_compat_saved_plan(ansible_facts['gpu_info']['gpus']" in loader
    assert "'gpu_nodes' in group_names" in loader


GPU = {"bus_id": "0000:3b:00.0", "pci_id": "10de:1023", "name": "Tesla K40m"}


def report(**plan: object) -> dict[str, object]:
    doc = {"schema_version": SCHEMA_VERSION, "ok": True, "torch": "2.5.1", **plan}
    return {"host": "h1", "gpu_info": {"gpus": [GPU]}, "plan": doc}


def test_a_saved_plan_is_used_for_the_gpus_it_was_made_for() -> None:
    got = saved_plan(report(), [{**GPU, "source": "nvml", "temperature_c": 40}])
    assert got["why"] == ""
    assert got["plan"]["torch"] == "2.5.1"
    assert saved_plan(None, [GPU]) == {"plan": None, "why": ""}


@pytest.mark.parametrize(
    ("doc", "gpus", "why"),
    [
        ({"host": "h1"}, [GPU], "the report holds no plan"),
        (report(schema_version=1), [GPU], "its plan is of schema 1, this gpuprov's is 2"),
        (report(ok=False), [GPU], "its plan found no stack for the host (ok: false)"),
        (
            report(),
            [{**GPU, "pci_id": "10de:17fd"}],
            "the host's GPUs changed since (PCI IDs then ['10de:1023'], now ['10de:17fd'])",
        ),
        (
            report(),
            [GPU, GPU],
            "the host's GPUs changed since (PCI IDs then ['10de:1023'], "
            "now ['10de:1023', '10de:1023'])",
        ),
        (report(), [], "the host's GPUs changed since (PCI IDs then ['10de:1023'], now none)"),
    ],
    ids=["no-plan", "old-schema", "not-ok", "other-gpu", "gpu-added", "gpu-gone"],
)
def test_a_saved_plan_that_no_longer_holds_is_not_used(
    doc: dict[str, object], gpus: list[dict[str, object]], why: str
) -> None:
    assert saved_plan(doc, gpus) == {"plan": None, "why": why}


def test_the_loader_sets_no_fact_the_state_digest_would_see() -> None:
    """A fact only a playbook run alone sets would be an input of every role whose state
    variables match it (gpuprov_*), and the run alone would re-converge them (seen in the
    lab 2026-12-06 with a fact of the loader's own)."""
    import gpuprov_state  # plugins/filter/gpuprov_state.py (on pytest's pythonpath)

    def set_facts(tasks: Any) -> list[str]:
        names: list[str] = []
        for task in tasks:
            names += set_facts(task.get("block") or [])
            names += list((task.get("ansible.builtin.set_fact") or {}).keys())
        return names

    facts = [
        name
        for path in sorted((ROLES / "gpuprov_report" / "tasks").glob("*.yml"))
        for name in set_facts(yaml.safe_load(path.read_text()))
    ]
    assert sorted(facts) == ["gpuprov_plan", "gpuprov_report_root"]
    assert [f for f in facts if gpuprov_state.is_input(f)] == []
