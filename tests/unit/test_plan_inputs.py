"""The roles that read the plan (gpuprov_plan) take it the same way whether playbooks/plan.yml
ran in the same run (site.yml) or not (the role's playbook alone), and pass it to their state
probe's inputs: otherwise a converged role runs its change phases again when its playbook
runs alone, and again at the next site.yml (seen 2026-12-06: serving.yml alone after site.yml
re-converged model_serving, 21 s instead of 3.5 s).

Read as data from the roles' files, and the planning entry point (roles/gpuprov_report, plan)
run for real over the local connection on a simulated PCI tree; the lab test test_site.py::
test_component_playbooks_alone_find_their_roles_converged runs the readers alone."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from local_play import run_local_play
from pci_tree import K40M, write_pci

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"
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


def test_plan_yml_and_a_plan_reader_run_alone_plan_one_way() -> None:
    """One planning call for both (seen 2026-12-06: a run alone took the plan report the last
    plan.yml wrote, whatever pin or matrix change came after it): plan.yml includes the
    entry point a reader includes, and no other task calls the planner."""
    plan_play = yaml.safe_load((ROOT / "playbooks" / "plan.yml").read_text())[0]
    assert plan_play["hosts"] == "gpu_nodes"
    includes = [t for t in plan_play["tasks"] if "ansible.builtin.include_role" in t]
    assert [t["ansible.builtin.include_role"] for t in includes] == [
        {"name": "gpuprov_report", "tasks_from": "plan"}
    ]
    assert includes[0]["vars"] == {"gpuprov_report_plan_publish": True}
    callers = sorted(
        str(path.relative_to(ROOT))
        for path in [*ROOT.glob("playbooks/*.yml"), *ROOT.glob("roles/*/tasks/*.yml")]
        if "gpu_compat_plan(" in path.read_text()
    )
    assert callers == ["roles/gpuprov_report/tasks/plan.yml"]


def _plan_play(tmp_path: Path, publish: bool, **host_vars: dict[str, object]) -> Path:
    """A play that plans h1 and h2 through the entry point (``host_vars``: variable -> the
    value per host) on a simulated K40m (the seam: this machine has no GPU) and keeps each
    host's plan in ``<tmp_path>/<host>.json``. Tagged as a reader's preflight is (its own
    tag on the import, always on the include), so a run under another --tags plans too."""
    write_pci(tmp_path / "sys", K40M)
    per_host = {
        name: f"{{{{ {json.dumps(value)}[inventory_hostname] | default(none) }}}}"
        for name, value in host_vars.items()
    }
    play = {
        "hosts": "all",
        "gather_facts": True,  # packaged_branches reads the OS (this machine's Debian 12)
        "vars": {
            "gpu_info_sysfs_root": str(tmp_path / "sys"),
            "gpuprov_report_dir": str(tmp_path / "reports"),
            **per_host,
        },
        "tasks": [
            {
                "block": [
                    {
                        "name": "Plan",
                        "ansible.builtin.include_role": {
                            "name": "gpuprov_report",
                            "tasks_from": "plan",
                        },
                        "vars": {"gpuprov_report_plan_publish": publish},
                        "tags": ["always"],
                    },
                    {
                        "name": "Keep the plan",
                        "ansible.builtin.copy": {
                            "content": "{{ gpuprov_plan | to_json }}",
                            "dest": str(tmp_path / "{{ inventory_hostname }}.json"),
                            "mode": "0644",
                        },
                        "tags": ["always"],
                    },
                ],
                "tags": ["reader_preflight"],
            }
        ],
    }
    book = tmp_path / "play.yml"
    book.write_text(json.dumps([play]))
    return book


def test_the_report_is_written_before_a_plan_without_a_stack_fails_the_host() -> None:
    """plan.yml's order: a contradiction fails the host before anything is printed or
    written; a plan without a stack is written first (its report says why), then fails."""
    names = [
        t["name"]
        for t in yaml.safe_load((ROLES / "gpuprov_report" / "tasks" / "plan.yml").read_text())
    ]
    order = [
        "plan | Plan the stack from the matrix",
        "plan | Refuse an inventory that contradicts the hardware",
        "plan | Print the plan",
        "plan | Write the plan report on the controller",
        "plan | Refuse a host without a plan",
    ]
    assert [n for n in names if n in order] == order


def test_a_run_plans_with_the_inventory_as_it_is_now(tmp_path: Path) -> None:
    """A real run of the entry point: each host's pin is the one its plan has (the plan is
    made from the inventory of this run, not read back from an earlier one); without
    publish no report is written."""
    book = _plan_play(tmp_path, False, gpuprov_torch_version={"h1": "1.2.0", "h2": "1.0.0"})
    run_local_play(book, tmp_path)
    plans = {h: json.loads((tmp_path / f"{h}.json").read_text()) for h in ("h1", "h2")}
    assert {h: (p["ok"], p["torch"], p["pinned"]["torch"]) for h, p in plans.items()} == {
        "h1": (True, "1.2.0", "1.2.0"),
        "h2": (True, "1.0.0", "1.0.0"),
    }
    assert [g["name"] for g in plans["h1"]["gpus"]] == ["Tesla K40m"]  # this run's scan
    assert not (tmp_path / "reports").exists()


def test_a_run_under_other_tags_makes_the_same_plan(tmp_path: Path) -> None:
    """Under --tags of another phase (a reader's playbook run alone as
    `--tags pytorch_install`), every task of the entry point runs, the driver branches this
    OS packages included: without them the planner chose a driver branch Debian does not
    package (the review of 2026-12-06: an A100 planned for branch 620, not 535)."""
    plans = []
    for tags in ("", "reader_install"):
        run = tmp_path / (tags or "all")
        run.mkdir()
        book = _plan_play(run, False)
        run_local_play(book, run, env={"ANSIBLE_RUN_TAGS": tags} if tags else None)
        plans.append(json.loads((run / "h1.json").read_text()))
    assert plans[0]["packaged_branches"], "this Debian packages driver branches"
    assert plans[1] == plans[0]


def test_plan_yml_publishes_and_a_refused_host_fails_before_its_report(tmp_path: Path) -> None:
    """With publish (plan.yml): the report of the planned host is written; a driver pin that
    does not drive the K40m fails its host, naming the pin, and writes no report."""
    book = _plan_play(tmp_path, True, nvidia_driver_branch={"h1": 535})
    proc = run_local_play(book, tmp_path, rc=2)
    assert "nvidia_driver_branch=535 does not drive every GPU of h1" in proc.stdout
    assert "Nothing was changed." in proc.stdout
    report = json.loads((tmp_path / "reports" / "plan" / "h2.json").read_text())
    assert report["host"] == "h2"
    assert report["plan"]["ok"] is True
    assert report["plan"] == json.loads((tmp_path / "h2.json").read_text())
    assert not (tmp_path / "reports" / "plan" / "h1.json").exists()


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

    # its own task files, and the one of another role it includes
    paths = [
        *sorted((ROLES / "gpuprov_report" / "tasks").glob("*.yml")),
        ROLES / "nvidia_driver" / "tasks" / "packaged_branches.yml",
    ]
    facts = [name for path in paths for name in set_facts(yaml.safe_load(path.read_text()))]
    assert sorted(facts) == [
        "gpuprov_plan",
        "gpuprov_report_root",
        "nvidia_driver_packaged_branches",
        "nvidia_driver_packaged_os",
    ]
    assert [f for f in facts if gpuprov_state.is_input(f)] == []
