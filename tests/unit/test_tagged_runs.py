"""A run of one component (`site.yml --tags docker`, `--tags model_serving`) still runs what
every component needs: the inventory checks, the plan, the other sources' check, and the
driver role's preflight (its state probe, tagged always, needs the branch and package set it
chooses). Before, such a run failed in the driver play: `_nvidia_driver_branch` is undefined
(seen on the lab, 2026-12-05). The effective tags of a task are its own, its blocks' and its
play's (or its role's, for a role listed by a play)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from local_play import run_local_play

REPO = Path(__file__).resolve().parents[2]
NESTED = ("block", "rescue", "always")


def _tags(item: dict[str, Any]) -> set[str]:
    tags = item.get("tags", [])
    return {tags} if isinstance(tags, str) else set(tags)


def _untagged(tasks: Any, inherited: set[str]) -> list[str]:
    """Names of the tasks under ``tasks`` that do not run under --tags X (no `always`)."""
    out: list[str] = []
    for task in tasks or []:
        tags = inherited | _tags(task)
        if "always" not in tags:
            out.append(str(task.get("name")))
        for key in NESTED:
            out += _untagged(task.get(key), tags)
    return out


@pytest.mark.parametrize("playbook", ["validate.yml", "plan.yml", "sources.yml"])
def test_the_plays_every_component_needs_run_under_any_tags(playbook: str) -> None:
    plays = yaml.safe_load((REPO / "playbooks" / playbook).read_text())
    missing: list[str] = []
    for play in plays:
        tags = _tags(play)
        missing += _untagged(play.get("tasks"), tags)
        for role in play.get("roles", []):
            if "always" not in tags | _tags(role):
                missing.append(f"role {role.get('role')}")
    assert plays
    assert missing == []


def test_the_driver_preflight_runs_under_any_tags() -> None:
    main = yaml.safe_load((REPO / "roles/nvidia_driver/tasks/main.yml").read_text())
    preflight = [t for t in main if t.get("ansible.builtin.import_tasks") == "preflight.yml"]
    assert len(preflight) == 1
    assert "always" in _tags(preflight[0])
    # The probe it feeds runs under any tags (the fast path's design).
    probe = [t for t in main if "gpuprov_state" in t]
    assert probe
    assert "always" in _tags(probe[0])


def _ansible(tmp_path: Path, tasks: list[dict[str, Any]], *args: str) -> str:
    """The output of a play of ``tasks`` run over the local connection with ``args``
    (--list-tasks, --tags, --skip-tags), as Ansible itself decides."""
    book = tmp_path / "book.yml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}]))
    return run_local_play(book, tmp_path, extra=args).stdout


@pytest.mark.parametrize(
    ("tags", "installs"),
    [
        ([], 1),
        (["--tags", "gpu_smoke_run"], 1),
        (["--tags", "gpu_smoke_install"], 1),
        (["--tags", "gpu_smoke_install,gpu_smoke_run"], 1),
        (["--skip-tags", "gpu_smoke_run"], 1),
        (["--tags", "gpu_smoke_run", "--skip-tags", "gpu_smoke_install"], 0),
        (["--skip-tags", "gpu_smoke_install"], 0),
    ],
)
def test_a_smoke_run_by_tag_installs_the_scripts_it_runs_once(
    tmp_path: Path, tags: list[str], installs: int
) -> None:
    """`--tags gpu_smoke_run` on a host whose smoke scripts an older gpuprov installed ran
    those scripts with this checkout's options, which they refuse (noted in session 36). The
    converge phase (main.yml includes it under any narrowed run) now installs them under that
    tag too, once whatever the tags, and --skip-tags gpu_smoke_install still leaves them.
    Ansible decides both halves: which imports the tags select (--list-tasks), and whether the
    second import's condition holds under the same tags (a task with that condition, run)."""
    converge = REPO / "roles/gpu_smoke/tasks/converge.yml"
    listed = _ansible(tmp_path, [{"import_tasks": str(converge)}], "--list-tasks", *tags)
    install = "install | Install the smoke scripts"
    lines = [line for line in listed.splitlines() if install in line]
    first = [line for line in lines if "TAGS: [gpu_smoke_install]" in line]
    second = [line for line in lines if "TAGS: [gpu_smoke_run]" in line]
    assert len(first) + len(second) == len(lines), lines
    imports = [
        t
        for t in yaml.safe_load(converge.read_text())
        if t.get("import_tasks", t.get("ansible.builtin.import_tasks")) == "install.yml"
    ]
    assert len(imports) == 2, imports
    when = imports[1]["when"]
    probe = {"ansible.builtin.debug": {"msg": "CONDITION HOLDS"}, "when": when, "tags": ["always"]}
    holds = "CONDITION HOLDS" in _ansible(tmp_path, [probe], *tags)
    assert len(first) + (len(second) if holds else 0) == installs, (lines, holds)
