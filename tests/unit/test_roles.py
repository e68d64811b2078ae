"""Role hygiene tested as data: argument_specs match defaults, variables carry the role prefix,
every role has a README and a preflight, and no task hides failures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from task_walk import all_tasks

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p for p in (ROOT / "roles").iterdir() if (p / "tasks" / "main.yml").exists())


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text()) if path.exists() else None


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_argument_specs_match_defaults(role: Path) -> None:
    defaults = _yaml(role / "defaults" / "main.yml") or {}
    specs = _yaml(role / "meta" / "argument_specs.yml")
    assert specs, f"{role.name}: meta/argument_specs.yml is missing"
    # Every entry point's options (a role's defaults serve all of them: gpuprov_bundle's client).
    options = {
        name: spec
        for entry in specs["argument_specs"].values()
        for name, spec in (entry.get("options") or {}).items()
    }
    assert set(defaults) <= set(options), f"undeclared: {set(defaults) - set(options)}"
    for name, spec in options.items():
        if name in defaults:
            assert spec.get("default") == defaults[name], f"{role.name}: {name}"
        assert spec.get("description"), f"{role.name}: {name} has no description"
        assert spec.get("type"), f"{role.name}: {name} has no type"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_public_variables_carry_the_role_prefix(role: Path) -> None:
    defaults = _yaml(role / "defaults" / "main.yml") or {}
    prefix = role.name + "_"
    assert all(k.startswith(prefix) for k in defaults), [
        k for k in defaults if not k.startswith(prefix)
    ]


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_role_has_readme_and_preflight(role: Path) -> None:
    assert (role / "README.md").exists()
    # main.yml, or its converge phases (tasks/converge.yml, which main.yml includes).
    text = "".join(
        p.read_text()
        for p in (role / "tasks" / "main.yml", role / "tasks" / "converge.yml")
        if p.exists()
    )
    # validate_inventory is itself the preflight of the run; gpuprov_report is an internal
    # helper (a set_fact and a controller write) whose calls the argument specs validate.
    assert "preflight" in text.lower() or role.name in ("validate_inventory", "gpuprov_report")


def test_no_ignore_errors_anywhere() -> None:
    offenders = [
        str(p.relative_to(ROOT))
        for p in [*ROOT.glob("roles/**/*.yml"), *ROOT.glob("playbooks/**/*.yml")]
        if "ignore_errors" in p.read_text()
    ]
    assert offenders == []


def _role_texts(role: Path) -> str:
    return "".join(
        p.read_text()
        for d in ("tasks", "vars", "defaults", "handlers")
        for p in role.glob(f"{d}/*.yml")
    )


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_a_role_that_reads_gpu_facts_scans_the_gpus_first_unconditionally(role: Path) -> None:
    """Fact caching keeps gpu_info's answer for an hour: a role run alone after a GPU was
    added, removed or got its driver would decide on the old scan. So a role that reads
    ansible_facts['gpu_info'] scans in its preflight, with no `when` and for every tag."""
    if "ansible_facts['gpu_info']" not in _role_texts(role):
        return
    if role.name == "gpuprov_report":
        # No preflight: its plan entry point (tasks/plan.yml), which plan.yml and the roles that
        # read the plan (when this run did not plan) include, scans (reuse: run, so this run's
        # scan) before it plans for the host's GPUs.
        loader = _yaml(role / "tasks" / "plan.yml")
        assert next(t["name"] for t in loader if "gpu_info" in t).startswith("plan | Scan")
        return
    tasks = _yaml(role / "tasks" / "preflight.yml") or []
    scans = [t for t in tasks if "gpu_info" in t]
    assert scans, f"{role.name} reads ansible_facts['gpu_info'] but its preflight does not scan"
    for task in scans:
        assert "when" not in task, f"{role.name}: {task['name']} is conditional"
    reads = [i for i, t in enumerate(tasks) if "ansible_facts['gpu_info']" in yaml.safe_dump(t)]
    assert tasks.index(scans[0]) < min(reads, default=len(tasks)), f"{role.name}: scan after read"
    main = _yaml(role / "tasks" / "main.yml") or []
    imported_always = any(
        t.get("ansible.builtin.import_tasks") == "preflight.yml" and "always" in t.get("tags", [])
        for t in main
    )
    assert imported_always or "always" in (scans[0].get("tags") or []), (
        f"{role.name}: the scan must run for any tag"
    )


COMMAND_KEYS = ("cmd", "command", "shell", "ansible.builtin.command", "ansible.builtin.shell")


def _runs_nvidia_smi(node: Any) -> bool:
    """Whether a task tree runs nvidia-smi itself (an argv, a cmd or a free-form command)."""
    if isinstance(node, list):
        return any(_runs_nvidia_smi(item) for item in node)
    if not isinstance(node, dict):
        return False
    for key, value in node.items():
        argv = value if key == "argv" and isinstance(value, list) else []
        line = value if key in COMMAND_KEYS and isinstance(value, str) else ""
        if (argv and "nvidia-smi" in str(argv[0])) or line.lstrip().startswith("nvidia-smi"):
            return True
        if _runs_nvidia_smi(value):
            return True
    return False


def test_no_role_task_asks_nvidia_smi_itself() -> None:
    """GPUs are read through gpuprov's one probe (issue 22): gpu_info in tasks and handlers,
    gpu_probe beside the metrics collector and the smoke scripts. (The fast path's state specs,
    in vars/, fingerprint nvidia-smi's output to notice a change; they read no GPU fact.)"""
    found = [
        str(path.relative_to(ROOT))
        for role in ROLES
        for path in sorted([*role.glob("tasks/*.yml"), *role.glob("handlers/*.yml")])
        if _runs_nvidia_smi(_yaml(path))
    ]
    assert found == []
    assert _runs_nvidia_smi([{"ansible.builtin.command": {"argv": ["nvidia-smi", "-L"]}}])
    assert _runs_nvidia_smi([{"ansible.builtin.command": "nvidia-smi -L"}])
    assert not _runs_nvidia_smi([{"gpu_info": {"sysfs_root": "/sys"}}])


def test_a_sources_file_of_the_sources_play_runs_once_per_run() -> None:
    """playbooks/sources.yml runs each role's sources.yml before any apt command; the role runs
    it again only when that register is unset (the role alone), through include_tasks, so that
    the guard is read once and does not silence the file's own message (issue 19: a second
    read of /etc/apt per run)."""
    play = _yaml(ROOT / "playbooks" / "sources.yml")
    included = [
        (t["ansible.builtin.include_role"]["name"], t["ansible.builtin.include_role"]["tasks_from"])
        for t in all_tasks(play)
        if "ansible.builtin.include_role" in t
    ]
    # First, before the roles' sources: the offline bundle's client (it can turn them off).
    assert included[0] == ("gpuprov_bundle", "client.yml")
    included = included[1:]
    assert [r for r, _ in included] == ["docker", "nvidia_container_toolkit"]
    for role, tasks_from in included:
        registers = [
            t["register"]
            for t in all_tasks(_yaml(ROOT / "roles" / role / "tasks" / tasks_from))
            if "register" in t
        ]
        assert len(registers) == 1, (role, registers)
        callers = [
            (path.name, task)
            for path in sorted((ROOT / "roles" / role / "tasks").glob("*.yml"))
            for task in all_tasks(_yaml(path))
            for key in ("ansible.builtin.include_tasks", "ansible.builtin.import_tasks")
            if key in task
            and tasks_from
            in str(task[key].get("file") if isinstance(task[key], dict) else task[key])
        ]
        assert callers, role
        for where, task in callers:
            assert "ansible.builtin.include_tasks" in task, (role, where)
            when = task.get("when")
            guards = when if isinstance(when, list) else [when]
            assert f"{registers[0]} is not defined" in guards, (role, where, when)
