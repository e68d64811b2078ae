"""The background install of model serving's Triton packages, checked as data: site.yml starts
it after the PyTorch play and before the plays that follow, under the lock the serving role
waits for before its apt and pip tasks touch what the job uses (roles/model_serving/README.md).
What the lab shows (tests/lab/test_model_serving.py) is that the job ran early and succeeded;
that the role waits is structure, read here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "model_serving"


def _tasks(path: Path) -> list[dict[str, Any]]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, list)
    return data


def test_site_starts_the_background_installs_between_pytorch_and_the_plays_after_it() -> None:
    order = [p["ansible.builtin.import_playbook"] for p in _tasks(ROOT / "playbooks/site.yml")]
    i = order.index("background.yml")
    assert order[i - 1] == "pytorch.yml"
    assert order.index("serving.yml") > i
    assert order[i + 1 :] == [
        "jupyterlab.yml",
        "storage.yml",
        "smoke.yml",
        "launch.yml",
        "monitoring.yml",
        "serving.yml",
        "pull_release.yml",  # no work: pull-mode hosts go back to pulling
    ]


def test_the_job_takes_the_lock_the_install_phase_waits_for_before_apt_and_pip() -> None:
    lock = "{{ _model_serving_triton_lock }}"
    start = next(t for t in _tasks(ROLE / "tasks/background-start.yml") if t.get("poll") == 0)
    argv = start["ansible.builtin.command"]["argv"]
    assert "'flock', '--nonblock', _model_serving_triton_lock" in argv
    assert "_model_serving_triton_packages" in argv
    install = _tasks(ROLE / "tasks/install-Debian.yml")
    names = [t["name"] for t in install]
    wait = next(
        i
        for i, t in enumerate(install)
        if "flock" in t.get("ansible.builtin.command", {}).get("argv", [])
    )
    assert install[wait]["ansible.builtin.command"]["argv"][-2:] == [lock, "true"]
    touching = [
        i
        for i, t in enumerate(install)
        if {"apt_ready", "ansible.builtin.apt", "ansible.builtin.pip"} & set(t)
    ]
    assert touching, names
    assert wait < min(touching), names
    triton_pip = next(
        t
        for t in install
        if t.get("ansible.builtin.pip", {}).get("virtualenv") == "{{ _model_serving_triton_venv }}"
    )
    assert triton_pip["ansible.builtin.pip"]["name"] == "{{ _model_serving_triton_packages }}"


def test_a_refused_preflight_starts_nothing_and_fails_nothing_in_the_background_play() -> None:
    block = next(t for t in _tasks(ROLE / "tasks/background.yml") if "block" in t)
    # One include in the block (a converged host skips one task, not each of the start's)
    assert len(block["block"]) == 1
    include = block["block"][0]["ansible.builtin.include_tasks"]
    assert include["file"] == "background-start.yml"
    start = _tasks(ROLE / "tasks" / include["file"])
    assert start[0].get("ansible.builtin.import_tasks") == "preflight.yml"
    assert [list(t)[1] for t in block["rescue"]] == ["ansible.builtin.debug"]
    assert "not ansible_check_mode" in block["when"]
