"""Reports written on the controller are not changes to the fleet (issue 11 item 5): every task
that writes a file on the controller (copy, file or template delegated to localhost) says
``changed_when: false``, so a converged run shows changed=0 on every host."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WRITERS = {"ansible.builtin.copy", "ansible.builtin.file", "ansible.builtin.template"}
NESTED = ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers")
FILES = sorted(
    [
        *ROOT.glob("roles/*/tasks/*.yml"),
        *ROOT.glob("roles/*/handlers/*.yml"),
        *ROOT.glob("playbooks/*.yml"),
    ]
)


def controller_writes(tasks: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for task in tasks if isinstance(tasks, list) else []:
        if not isinstance(task, dict):
            continue
        for key in NESTED:
            found += controller_writes(task.get(key))
        if task.get("delegate_to") in ("localhost", "127.0.0.1") and WRITERS & set(task):
            found.append(task)
    return found


def test_the_scan_finds_the_known_controller_writes() -> None:
    names = {t["name"] for f in FILES for t in controller_writes(yaml.safe_load(f.read_text()))}
    # roles/gpuprov_report writes every <kind>/<host>.json report (plan, smoke, jupyterlab,
    # storage, serving) and gpu_monitoring its scrape config and dashboard with the
    # controller-only action (tests below); the bundle role removes its archive.
    assert "Install | Remove the archive from the controller" in names


def test_gpu_monitoring_writes_its_controller_files_with_the_action() -> None:
    """The scrape config and the dashboard: no module run (a delegated file and two copies
    were three on the controller per run), written under --check too, once per play."""
    tasks = yaml.safe_load((ROOT / "roles" / "gpu_monitoring" / "tasks" / "scrape.yml").read_text())
    assert [sorted(set(t) - {"name"}) for t in tasks] == [
        ["check_mode", "gpuprov_report_write", "run_once"]
    ] * 2
    assert all(t["check_mode"] is False and t["run_once"] is True for t in tasks)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_controller_writes_are_not_host_changes(path: Path) -> None:
    for task in controller_writes(yaml.safe_load(path.read_text())):
        assert task.get("changed_when") is False, (
            f"{path.relative_to(ROOT)}: {task.get('name')!r} writes on the controller: "
            "add `changed_when: false` (a report is not a change to the host)"
        )


def test_reports_are_written_by_the_controller_only_action(tmp_path: Path) -> None:
    """roles/gpuprov_report's one write task is plugins/action/gpuprov_report_write.py, which
    never reports changed and sends no module (issue 19); it writes atomically, creating the
    directory."""
    tasks = yaml.safe_load((ROOT / "roles" / "gpuprov_report" / "tasks" / "write.yml").read_text())
    writes = [t for t in tasks if "gpuprov_report_write" in t]
    assert len(writes) == 1
    assert "delegate_to" not in writes[0]
    from gpuprov_report_write_action import write_report

    target = tmp_path / "smoke" / "h1.json"
    write_report(target, "{}\n")
    write_report(target, '{"ok": true}\n')
    assert target.read_text() == '{"ok": true}\n'
    assert oct(target.stat().st_mode & 0o777) == "0o644"
    assert [p.name for p in target.parent.iterdir()] == ["h1.json"]
