"""The background installs, checked as data: site.yml starts model serving's Triton packages and
object storage's tools after the PyTorch play and torch after the driver play, each under the
lock its role waits for before its apt and pip tasks touch what the job uses
(roles/model_serving/README.md, roles/object_storage/README.md, roles/pytorch/README.md).
What the lab shows (tests/lab/test_model_serving.py, tests/lab/test_site.py) is that the jobs
ran early and succeeded, and that the PyTorch play waited for its job; the rest is structure,
read here."""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any

import gpuprov_venv  # plugins/filter/gpuprov_venv.py
import jinja2
import jinja2.meta
import pytest
import torch_environment  # plugins/lookup/torch_environment.py
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "model_serving"
TORCH = ROOT / "roles" / "pytorch"
JUPYTER = ROOT / "roles" / "jupyterlab"


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
    start = next(t for t in _tasks(ROLE / "tasks/background-start.yml") if t.get("poll") == 0)
    argv = start["ansible.builtin.command"]["argv"]
    assert "'flock', '--nonblock', _model_serving_triton_lock" in argv
    assert "_model_serving_triton_packages" in argv
    install = _tasks(ROLE / "tasks/install-Debian.yml")
    names = [t["name"] for t in install]
    wait = next(i for i, t in enumerate(install) if "gpuprov_wait_lock" in t)
    assert _wait_args(install[wait]) == _waited_for(
        "_model_serving_background_timeout", "_model_serving_triton_lock"
    )
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
    assert start[1]["gpuprov_state"] == {"role": "model_serving", "state": "forget"}
    assert [list(t)[1] for t in block["rescue"]] == ["ansible.builtin.debug"]
    assert "not ansible_check_mode" in block["when"]


def _waited_for(timeout: str, lock: str) -> dict[str, str]:
    """The arguments of an install phase's wait (gpuprov_wait_lock, which names the lock's
    holder when it times out: tests/unit/test_lock_wait.py), without its words: the job's lock,
    up to the job's timeout."""
    return {"path": "{{ " + lock + " }}", "timeout": "{{ " + timeout + " }}"}


def _wait_args(task: dict[str, Any]) -> dict[str, str]:
    """A gpuprov_wait_lock task's path and timeout; it must say what it waits for."""
    args = dict(task["gpuprov_wait_lock"])
    assert args.pop("what"), task
    return args


def _rendered(value: str, variables: dict[str, Any]) -> str:
    """``value`` with the role variables it names rendered first (as Ansible does, lazily),
    and the torch_environment lookup answering as for a pip host
    (plugins/lookup/torch_environment.py)."""
    # Paths, not HTML: Ansible renders these without autoescape too.
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)  # noqa: S701
    env.filters["dirname"] = posixpath.dirname
    for name, function in gpuprov_venv.FilterModule().filters().items():
        env.filters[f"gpuprov.fleet.{name}"] = function
    block = torch_environment.torch_environment({"pytorch_method": "pip"})
    names = jinja2.meta.find_undeclared_variables(env.parse(value)) - {"lookup"}
    context: dict[str, Any] = {name: _value(variables[name], variables) for name in names}
    context["lookup"] = {"gpuprov.fleet.torch_environment": block}.__getitem__
    return env.from_string(value).render(context)


def _value(value: Any, variables: dict[str, Any]) -> Any:
    """A variable's value as _rendered renders it: strings rendered, lists item by item."""
    if isinstance(value, str):
        return _rendered(value, variables)
    if isinstance(value, list):
        return [_value(item, variables) for item in value]
    return value


def _site_order() -> list[str]:
    return [p["ansible.builtin.import_playbook"] for p in _tasks(ROOT / "playbooks/site.yml")]


def test_site_starts_torch_after_the_driver_play_and_before_docker_and_pytorch() -> None:
    """After the driver play (which may reboot the host: a job started before it would die),
    with the Docker and toolkit plays to overlap, and before the PyTorch play that waits."""
    order = _site_order()
    i = order.index("background_pytorch.yml")
    assert order[i - 1] == "driver.yml"
    assert order[i + 1 : i + 4] == ["docker.yml", "toolkit.yml", "pytorch.yml"]
    play = _tasks(ROOT / "playbooks/background_pytorch.yml")
    assert len(play) == 1
    includes = [t["ansible.builtin.include_role"] for t in play[0]["tasks"]]
    # The torch job first; then jupyterlab's download (test_jupyterlab_downloads_beside_...).
    assert [(i["name"], i["tasks_from"]) for i in includes] == [
        ("pytorch", "background"),
        ("jupyterlab", "background"),
    ]
    # Its tags: test_each_lock_is_root_s_alone_and_the_install_tag_starts_or_skips_the_job.
    # The job's pip sees the proxy the PyTorch play's pip would.
    pytorch_play = _tasks(ROOT / "playbooks/pytorch.yml")[0]
    assert play[0]["environment"] == pytorch_play["environment"]
    assert play[0]["hosts"] == pytorch_play["hosts"]


def test_the_torch_job_installs_what_the_install_phase_installs_under_the_lock_it_waits_for() -> (
    None
):
    start = _tasks(TORCH / "tasks/background-start.yml")
    assert start[0].get("ansible.builtin.import_tasks") == "preflight.yml"
    # The record forgotten before any change: the PyTorch play's probe cannot find the role
    # converged (and skip its install phase, the wait with it) while the job still writes.
    assert start[1]["gpuprov_state"] == {"role": "pytorch", "state": "forget"}
    assert "when" not in start[1]
    # The same OS packages as the install phase; the job makes the environment.
    assert start[2].get("ansible.builtin.import_tasks") == "install-pip-os.yml"
    job = next(t for t in start if t.get("poll") == 0)
    argv = job["ansible.builtin.command"]["argv"]
    assert "['flock', '--nonblock', _pytorch_pip_lock]" in argv
    assert "gpuprov_venv_install_argv(pytorch_python," in argv
    assert "_pytorch_pip_args + _pytorch_requirements)" in argv
    assert argv.index("(pytorch_venv_path") < argv.index("gpuprov_venv_install_argv")
    assert job["async"] == "{{ _pytorch_background_timeout }}"
    # What the install phase reads to skip the OS packages the start installed.
    assert job["register"] == "__pytorch_bg_job"
    install = _tasks(TORCH / "tasks/install-pip.yml")
    wait = _wait_args(install[0])
    assert wait == _waited_for("_pytorch_background_timeout", "_pytorch_pip_lock")
    # Everything that touches apt or pip comes after the wait.
    assert install[1].get("ansible.builtin.import_tasks") == "install-pip-os.yml"
    assert install[1]["when"] == "__pytorch_bg_job.ansible_job_id is undefined"
    venv = next(
        t["ansible.builtin.command"]
        for t in install
        if "ansible.builtin.command" in t and "creates" in t["ansible.builtin.command"]
    )
    # A venv an interrupted job left without pip is made again.
    assert venv["creates"] == "{{ pytorch_venv_path }}/bin/pip"
    pip = next(t["ansible.builtin.pip"] for t in install if "ansible.builtin.pip" in t)
    assert pip["name"] == "{{ _pytorch_requirements }}"
    assert pip["virtualenv"] == "{{ pytorch_venv_path }}"
    assert pip["extra_args"] == "{{ _pytorch_pip_args | join(' ') }}"
    os_tasks = _tasks(TORCH / "tasks/install-pip-os.yml")
    assert {"apt_ready", "ansible.builtin.package"} <= {k for t in os_tasks for k in t}
    assert not any("ansible.builtin.command" in t for t in os_tasks)


def test_the_torch_background_starts_nothing_on_an_existing_environment_or_under_check() -> None:
    tasks = _tasks(TORCH / "tasks/background.yml")
    block = next(t for t in tasks if "block" in t)
    assert len(block["block"]) == 1
    include = block["block"][0]
    assert include["ansible.builtin.include_tasks"]["file"] == "background-start.yml"
    # Included tasks do not inherit the include's tags: without these, --tags pytorch would
    # run the include and skip every task of the start.
    assert include["ansible.builtin.include_tasks"]["apply"]["tags"] == ["always"]
    assert include["tags"] == ["always"]
    assert "not ansible_check_mode" in block["when"]
    assert "pytorch_method == 'pip'" in block["when"]
    assert any("__pytorch_bg_venv.stat.exists" in w for w in block["when"])
    assert [list(t)[1] for t in block["rescue"]] == ["ansible.builtin.debug"]


def test_jupyterlab_downloads_beside_the_torch_job_and_installs_from_it_if_it_ended_well() -> None:
    """A download only (it pips into no environment, so it takes no environment's lock): begun
    beside the torch job with the install phase's requirements and index, by a pip of the
    interpreter that makes the environment (which may not exist yet). The install phase waits
    for this run's job and installs without the index only when it exited 0; otherwise, or
    when that install fails, from the index as before; it removes the download it used."""
    play = _tasks(ROOT / "playbooks/background_pytorch.yml")[0]
    include = play["tasks"][1]
    assert include["tags"] == ["jupyterlab", "jupyterlab_install"]
    assert include["ansible.builtin.include_role"]["apply"]["tags"] == include["tags"]
    assert play["hosts"] == _tasks(ROOT / "playbooks/jupyterlab.yml")[0]["hosts"]
    block = next(t for t in _tasks(JUPYTER / "tasks/background.yml") if "block" in t)
    assert {"_jupyterlab_download", "not ansible_check_mode"} <= set(block["when"])
    assert any("__jupyterlab_bg_installed.stat.exists" in w for w in block["when"])
    assert [list(t)[1] for t in block["rescue"]] == ["ansible.builtin.debug"]
    start = _tasks(JUPYTER / "tasks/background-start.yml")
    assert start[0].get("ansible.builtin.import_tasks") == "preflight.yml"
    job = next(t for t in start if t.get("poll") == 0)
    argv = job["ansible.builtin.command"]["argv"]
    assert argv.index("_jupyterlab_download_dir") < argv.index("gpuprov_pip_download_argv(")
    assert "(_jupyterlab_torch_environment.base_interpreter," in argv
    assert "_jupyterlab_requirements)" in argv
    assert job["environment"] == "{{ _jupyterlab_pip_env }}"
    assert job["register"] == "__jupyterlab_bg_job"
    install = _tasks(JUPYTER / "tasks/install-venv.yml")
    kinds = [
        next(k for k in t if k.startswith(("ansible.builtin.", "gpuprov_")) or k == "block")
        for t in install
    ]
    read = kinds.index("ansible.builtin.async_status")
    local = kinds.index("block")
    online = kinds.index("ansible.builtin.pip")
    remove = max(i for i, t in enumerate(install) if "ansible.builtin.file" in t)
    assert read < local < online < remove
    # First the directory's lock, which the job holds while it runs (a lost job, whose record
    # never ends, is not waited for), then a few polls of Ansible's record of the job; a poll
    # loop that ends by running out of attempts would fail the task whatever failed_when says.
    wait = _wait_args(install[read - 1])
    assert wait == {
        "path": "{{ _jupyterlab_download_dir }}/lock",
        "timeout": "{{ _jupyterlab_download_timeout }}",
    }
    status = install[read]
    jid = status["ansible.builtin.async_status"]["jid"]
    assert jid == "{{ __jupyterlab_bg_job.ansible_job_id }}"
    assert status["register"] == "__jupyterlab_download_job"
    assert status["failed_when"] is False
    assert f"attempts >= {status['retries'] - 1}" in status["until"]
    assert install[read - 1]["when"] == status["when"]
    ended_well = "(__jupyterlab_download_job.rc | default(1)) == 0"
    assert install[local]["when"] == ended_well
    assert install[remove]["when"] == ended_well
    assert install[remove]["ansible.builtin.file"] == {
        "path": "{{ _jupyterlab_download_dir }}",
        "state": "absent",
    }
    (from_download,) = install[local]["block"]
    assert [list(t)[1] for t in install[local]["rescue"]] == ["ansible.builtin.debug"]
    pips = [from_download, install[online]]
    assert [t["ansible.builtin.pip"]["name"] for t in pips] == [
        "{{ _jupyterlab_requirements }}"
    ] * 2
    assert all(t["notify"] == "jupyterlab restart" for t in pips)
    no_index = from_download["environment"]
    assert "'PIP_NO_INDEX': '1'" in no_index
    assert "'PIP_FIND_LINKS': _jupyterlab_download_dir ~ '/wheels'" in no_index
    assert install[online]["environment"] == "{{ _jupyterlab_pip_env }}"
    assert from_download["register"] == "__jupyterlab_local_install"
    assert "__jupyterlab_local_install is failed" in install[online]["when"][-1]
    assert "__jupyterlab_local_install is skipped" in install[online]["when"][-1]
    variables = yaml.safe_load((JUPYTER / "vars/main.yml").read_text())
    variables |= yaml.safe_load((JUPYTER / "defaults/main.yml").read_text())
    # Ansible hands the lookup's dict on as a dict (_rendered would make it a string).
    block = torch_environment.torch_environment({"pytorch_method": "pip"})
    variables["_jupyterlab_torch_environment"] = block
    assert _rendered(argv, variables).startswith(f"['{block['base_interpreter']}', '-I', '-c',")
    cases = (
        ("venv", "", block, "True"),
        ("venv", "/srv/x", block, "False"),  # an operator's environment, not the torch one
        ("container", "", block, "False"),
        ("venv", "", block | {"base_interpreter": None}, "False"),  # conda: no pytorch_python
    )
    for method, path, environment, want in cases:
        given = variables | {
            "jupyterlab_method": method,
            "jupyterlab_venv_path": path,
            "_jupyterlab_torch_environment": environment,
        }
        assert _rendered(variables["_jupyterlab_download"], given).strip() == want


def _lock_directory(task: dict[str, Any], lock_dir: str) -> dict[str, Any] | None:
    """The attributes ``task`` gives the directory ``{{ lock_dir }}`` (an
    ansible.builtin.file task or an entry of gpuprov_files' directories), else None."""
    path = "{{ " + lock_dir + " }}"
    made = task.get("ansible.builtin.file")
    if made is not None and made.get("path") == path:
        attributes = dict(made)
        assert attributes.pop("state") == "directory"
        return attributes
    entries = task.get("gpuprov_files", {}).get("directories", [])
    return next((dict(e) for e in entries if e.get("path") == path), None)


def test_the_tools_job_installs_what_the_install_phase_installs_under_the_lock_it_waits_for() -> (
    None
):
    """object_storage's background start: preflight, the record forgotten, the venv, then the
    job on the venv's pip with the install phase's packages and index; the install phase waits
    for the lock before its apt and pip tasks and installs the same list."""
    role = ROOT / "roles" / "object_storage"
    start = _tasks(role / "tasks/background-start.yml")
    assert start[0].get("ansible.builtin.import_tasks") == "preflight.yml"
    assert start[1]["gpuprov_state"] == {"role": "object_storage", "state": "forget"}
    assert "when" not in start[1]
    job = next(i for i, t in enumerate(start) if t.get("poll") == 0)
    argv = " ".join(start[job]["ansible.builtin.command"]["argv"].split())
    # The job makes the venv (no task of the play waits for ensurepip), then runs its pip.
    assert argv == (
        "{{ ['flock', '--nonblock', _object_storage_tools_lock] + (object_storage_tools_venv"
        " | gpuprov.fleet.gpuprov_venv_install_argv(object_storage_python,"
        " _object_storage_tools_packages)) }}"
    )
    commands = [
        t["ansible.builtin.command"]["argv"] for t in start if "ansible.builtin.command" in t
    ]
    assert not [a for a in commands if isinstance(a, list) and "venv" in a], commands
    assert start[job]["environment"] == "{{ _object_storage_pip_env }}"
    assert start[job]["async"] == "{{ _object_storage_background_timeout }}"
    install = _tasks(role / "tasks/install.yml")
    wait = _wait_args(install[0])
    assert wait == _waited_for("_object_storage_background_timeout", "_object_storage_tools_lock")
    touching = [
        i
        for i, t in enumerate(install)
        if {"ansible.builtin.package", "ansible.builtin.pip", "ansible.builtin.command"} & set(t)
    ]
    assert touching[0] == 1  # every apt, venv and pip task after the wait
    pips = [t for t in install if "ansible.builtin.pip" in t]
    tools = next(p for p in pips if "tools_venv" in p["ansible.builtin.pip"]["executable"])
    assert tools["ansible.builtin.pip"]["name"] == "{{ _object_storage_tools_packages }}"
    assert tools["environment"] == "{{ _object_storage_pip_env }}"
    block = next(t for t in _tasks(role / "tasks/background.yml") if "block" in t)
    assert [t["ansible.builtin.include_tasks"]["file"] for t in block["block"]] == [
        "background-start.yml"
    ]
    assert "not ansible_check_mode" in block["when"]
    assert "object_storage_method != 'none'" in block["when"]
    assert any("__object_storage_bg_venv.stat.exists" in w for w in block["when"])
    assert [list(t)[1] for t in block["rescue"]] == ["ansible.builtin.debug"]
    # The job's pip sees the proxy the storage play's pip would.
    storage = _tasks(ROOT / "playbooks/storage.yml")[0]
    background = _tasks(ROOT / "playbooks/background.yml")[0]
    assert background["environment"] == storage["environment"]
    assert background["hosts"] == storage["hosts"]


@pytest.mark.parametrize(
    ("role", "play", "lock_dir", "lock", "wait_file"),
    [
        (
            "pytorch",
            "background_pytorch.yml",
            "_pytorch_lock_dir",
            "_pytorch_pip_lock",
            "install-pip.yml",
        ),
        (
            "model_serving",
            "background.yml",
            "_model_serving_lock_dir",
            "_model_serving_triton_lock",
            "install-Debian.yml",
        ),
        (
            "object_storage",
            "background.yml",
            "_object_storage_lock_dir",
            "_object_storage_tools_lock",
            "install.yml",
        ),
    ],
)
def test_each_lock_is_root_s_alone_and_the_install_tag_starts_or_skips_the_job(
    role: str, play: str, lock_dir: str, lock: str, wait_file: str
) -> None:
    """flock(1) needs only read access to a lock file: one that other users can reach could be
    held by any of them, and the install phase would wait its hour. The lock lies in a
    directory the start makes root's alone (0700) before the job; the wait runs only where a
    lock file exists (no job since boot: nothing to wait for). --skip-tags <role>_install,
    which skips the only wait, starts no job."""
    tasks_dir = ROOT / "roles" / role / "tasks"
    variables = yaml.safe_load((ROOT / "roles" / role / "vars" / "main.yml").read_text())
    directory = _rendered(variables[lock_dir], variables)
    assert _rendered(variables[lock], variables).startswith(directory + "/")
    assert directory.startswith("/run/")
    assert not directory.startswith("/run/lock")
    start = _tasks(tasks_dir / "background-start.yml")
    made = next(i for i, t in enumerate(start) if _lock_directory(t, lock_dir) is not None)
    assert _lock_directory(start[made], lock_dir) == {
        "path": "{{ " + lock_dir + " }}",
        "owner": "root",
        "group": "root",
        "mode": "0700",
    }
    job = next(i for i, t in enumerate(start) if t.get("poll") == 0)
    assert made < job
    wait = next(t for t in _tasks(tasks_dir / wait_file) if "gpuprov_wait_lock" in t)
    assert wait["gpuprov_wait_lock"]["path"] == "{{ " + lock + " }}"
    include = next(
        t
        for t in _tasks(ROOT / "playbooks" / play)[0]["tasks"]
        if t["ansible.builtin.include_role"]["name"] == role
    )
    assert include["ansible.builtin.include_role"]["tasks_from"] == "background"
    tags = [role, f"{role}_install"]
    assert include["tags"] == include["ansible.builtin.include_role"]["apply"]["tags"] == tags


def _flat(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tasks, those inside blocks (block, rescue, always) included."""
    flat = []
    for task in tasks:
        flat.append(task)
        for part in ("block", "rescue", "always"):
            flat.extend(_flat(task.get(part, [])))
    return flat


# The roles that install into the host's PyTorch environment besides pytorch, or run what is in
# it right after installing (their converge.yml).
TORCH_ENV_ROLES = ("jupyterlab", "object_storage", "dist_launch", "model_serving")


def test_every_role_that_pips_into_an_environment_is_one_that_waits_for_the_torch_job() -> None:
    """A role with a pip task outside its own venvs is in TORCH_ENV_ROLES (pytorch aside): a new
    one that pips into the environment and does not wait fails here."""
    own_venvs = {
        "{{ _model_serving_triton_venv }}",
        "{{ object_storage_tools_venv }}/bin/pip",
        "{{ _gpuprov_pull_venv }}/bin/pip",
    }
    pipping = set()
    for path in sorted((ROOT / "roles").glob("*/tasks/*.yml")):
        for task in _flat(_tasks(path)):
            pip = task.get("ansible.builtin.pip")
            if pip and {pip.get("virtualenv"), pip.get("executable")}.isdisjoint(own_venvs):
                pipping.add(path.parts[-3])
    assert pipping - {"pytorch"} == set(TORCH_ENV_ROLES)


@pytest.mark.parametrize("role", TORCH_ENV_ROLES)
def test_each_role_s_probe_waits_for_the_torch_job_before_anything_reads_the_environment(
    role: str,
) -> None:
    """The pytorch role's background job (site.yml starts it early; an interrupted run leaves it
    running) may still write the environment when a play of its own (storage.yml, ...) runs:
    the role's state probe waits for the environment's install lock, the one the job holds (the
    plan's environment block), before it reads anything, and it runs before the change and
    verify phases; no other task of the role waits for it. The lab shows it for object_storage
    (tests/lab/test_jupyterlab_storage.py), tests/unit/test_lock_wait.py the probe's wait."""
    variables = yaml.safe_load((ROOT / "roles" / role / "vars" / "main.yml").read_text())
    name = f"_{role}_torch_environment"
    assert variables[name] == "{{ lookup('gpuprov.fleet.torch_environment') }}"
    main = _tasks(ROOT / "roles" / role / "tasks" / "main.yml")
    probe = next(i for i, t in enumerate(main) if t.get("gpuprov_state", {}).get("spec"))
    locks = main[probe]["gpuprov_state"]["wait_locks"]
    assert len(locks) == 1, locks
    assert locks[0].pop("what"), locks
    assert locks == [_waited_for(name + ".install_timeout", name + ".install_lock")]
    assert main[probe]["tags"] == ["always"]
    includes = [
        t.get("ansible.builtin.import_tasks") or t["ansible.builtin.include_tasks"]["file"]
        for t in main[probe + 1 :]
        if {"ansible.builtin.include_tasks", "ansible.builtin.import_tasks"} & set(t)
    ]
    assert includes[:2] == ["converge.yml", "verify.yml"], includes
    assert not [
        t
        for t in _flat(_tasks(ROOT / "roles" / role / "tasks" / "converge.yml"))
        if "gpuprov_wait_lock" in t or "flock" in str(t)
    ]
    torch = yaml.safe_load((TORCH / "vars/main.yml").read_text())
    block = torch_environment.torch_environment({"pytorch_method": "pip"})
    assert _rendered(torch["_pytorch_pip_lock"], torch) == block["install_lock"]
    assert _rendered(torch["_pytorch_background_timeout"], torch) == str(block["install_timeout"])


def test_smoke_waits_for_the_torch_job_before_its_torch_layers() -> None:
    """smoke.yml run alone judges no half-installed torch: run_all.py (the host layers) and
    l5_distributed.py (L5) get the environment's install lock and its timeout
    (tests/unit/test_smoke_layers.py shows the wait itself)."""
    role = ROOT / "roles" / "gpu_smoke"
    variables = yaml.safe_load((role / "vars/main.yml").read_text())
    name = "_gpu_smoke_torch_environment"
    assert variables[name] == "{{ lookup('gpuprov.fleet.torch_environment') }}"
    wait = variables["_gpu_smoke_wait_args"]
    assert f"['--wait-lock', {name}.install_lock," in wait
    assert f"'--wait-timeout', {name}.install_timeout | string]" in wait
    assert f"if {name}.install_lock is not none else []" in wait
    run = {t["name"]: t for t in _tasks(role / "tasks/run.yml")}
    for task in ("Run the host layers", "Run the torchrun all_reduce across the hosts (L5)"):
        argv = run[f"run | {task}"]["ansible.builtin.command"]["argv"]
        assert "+ _gpu_smoke_wait_args" in argv, task
