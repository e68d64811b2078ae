"""Where a host's PyTorch environment lives (compat/environment.py, the plan's `environment`
block) and the torch_environment lookup that every torch-running role reads it through."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest
import torch_environment as lookup  # plugins/lookup/torch_environment.py
import yaml
from ansible.errors import AnsibleLookupError

from compat import CompatError
from compat.environment import KEYS, environment

ROOT = Path(__file__).resolve().parents[2]
PYTORCH_DEFAULTS = yaml.safe_load((ROOT / "roles/pytorch/defaults/main.yml").read_text())


@pytest.mark.parametrize(
    ("method", "want"),
    [
        ("pip", {"prefix": "/srv/venv", "interpreter": "/srv/venv/bin/python", "image": None}),
        ("conda", {"prefix": "/srv/conda", "interpreter": "/srv/conda/bin/python", "image": None}),
        ("container", {"prefix": None, "interpreter": None, "image": "nvcr.io/nvidia/pytorch:x"}),
        ("none", {"prefix": None, "interpreter": None, "image": None}),
    ],
)
def test_each_method_says_where_torch_is(method: str, want: dict[str, str | None]) -> None:
    env = environment(method, "/srv/venv/", "/srv/conda", "nvcr.io/nvidia/pytorch:x", "k")
    assert tuple(env) == KEYS
    assert env["method"] == method
    assert {k: env[k] for k in want} == want
    assert env["kernel_name"] == ("k" if want["prefix"] else None)


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (("venv", "/a", "/b"), "pytorch_method is 'venv'; allowed: pip, conda, container, none"),
        (("pip", "opt/venv", "/b"), "pytorch_venv_path is 'opt/venv'"),
        (("conda", "/a", ""), "pytorch_conda_env_path is ''"),
    ],
)
def test_a_bad_value_names_its_variable(args: tuple[str, str, str], names: str) -> None:
    with pytest.raises(CompatError, match=names.replace("(", r"\(")):
        environment(*args)


@pytest.mark.parametrize("method", ["conda", "container", "none"])
def test_only_a_pip_environment_has_an_install_lock(method: str) -> None:
    """The pytorch role's background job, the lock's only holder, installs with pip."""
    env = environment(method, "/srv/venv", "/srv/conda", "img", "k")
    assert (env["install_lock"], env["install_timeout"]) == (None, None)


def test_the_install_lock_is_root_s_alone_and_written_once() -> None:
    """In a directory of its own under /run (the pytorch role makes it 0700 before the job;
    not /run/lock, which any user may write), with a wait of at least a minute. Every role
    reads it through the lookup: no role, playbook or plugin names the path again."""
    env = environment("pip", "/srv/venv", "/srv/conda")
    lock = PurePosixPath(env["install_lock"])
    assert lock.parent.parent == PurePosixPath("/run")
    assert lock.parent.name != "lock"
    assert isinstance(env["install_timeout"], int)
    assert env["install_timeout"] >= 60
    copies = [
        str(path.relative_to(ROOT))
        for top in ("roles", "playbooks", "plugins", "inventories", "scripts")
        for path in (ROOT / top).rglob("*")
        if path.suffix in (".yml", ".yaml", ".py", ".j2", ".sh")
        and str(lock.parent) in path.read_text(encoding="utf-8", errors="replace")
    ]
    assert copies == []


def test_the_lookup_takes_unset_values_from_the_roles_defaults() -> None:
    env = lookup.torch_environment({})
    venv = PYTORCH_DEFAULTS["pytorch_venv_path"]
    assert env == environment(
        PYTORCH_DEFAULTS["pytorch_method"],
        venv,
        PYTORCH_DEFAULTS["pytorch_conda_env_path"],
        "",
        "gpuprov-torch",
        PYTORCH_DEFAULTS["pytorch_python"],
    )
    assert env["interpreter"] == f"{venv}/bin/python"
    assert env["base_interpreter"] == "/usr/bin/python3"  # Debian's, as the role documents


def test_the_lookup_follows_a_changed_venv_path_and_the_container_method() -> None:
    moved = lookup.torch_environment({"pytorch_venv_path": "/data/torch"})
    assert (moved["prefix"], moved["interpreter"]) == ("/data/torch", "/data/torch/bin/python")
    image = "nvcr.io/nvidia/pytorch:24.05-py3"
    boxed = lookup.torch_environment(
        {"pytorch_method": "container", "pytorch_container_image": image}
    )
    assert boxed == {
        "method": "container",
        "prefix": None,
        "interpreter": None,
        "kernel_name": None,
        "image": image,
        "base_interpreter": None,
        "install_lock": None,
        "install_timeout": None,
    }
    with pytest.raises(AnsibleLookupError, match="torch_environment: pytorch_method is 'x'"):
        lookup.torch_environment({"pytorch_method": "x"})


@pytest.mark.parametrize("method", ["pip", "conda", "container", "none"])
def test_only_a_pip_environment_names_the_interpreter_that_makes_it(method: str) -> None:
    """pytorch_python makes a pip environment (jupyterlab's download needs the same Python
    before the environment exists); conda and containers bring their own."""
    env = environment(method, "/srv/venv", "/srv/conda", "img", "k", "/usr/bin/python3.12")
    assert env["base_interpreter"] == ("/usr/bin/python3.12" if method == "pip" else None)
    assert environment(method, "/srv/venv", "/srv/conda")["base_interpreter"] is None
    moved = lookup.torch_environment({"pytorch_python": "/opt/py/bin/python3"})
    assert moved["base_interpreter"] == "/opt/py/bin/python3"


def test_the_plan_carries_the_block() -> None:
    import compat

    env = lookup.torch_environment({"pytorch_venv_path": "/data/torch"})
    k40m = {"index": 0, "pci_id": "10de:1023", "name": "Tesla K40m", "compute_capability": "3.5"}
    plan = compat.plan_host([k40m], packaged_branches=[470], host="n1", environment=env)
    assert plan["environment"] == env
    assert compat.plan_host([k40m], packaged_branches=[470])["environment"] is None


def test_the_lookup_reads_the_values_its_task_sees() -> None:
    class Templar:
        def template(self, value: object) -> object:
            return value

    module = lookup.LookupModule()
    module._templar = Templar()
    (env,) = module.run([], {"pytorch_venv_path": "/data/torch", "unrelated": 1})
    assert env["interpreter"] == "/data/torch/bin/python"
    with pytest.raises(AnsibleLookupError, match="takes no terms"):
        module.run(["x"], {})


def test_no_role_types_the_environments_path_again() -> None:
    """The pytorch role's defaults are the one place of /opt/gpuprov/venv (issue 22)."""
    default = PYTORCH_DEFAULTS["pytorch_venv_path"]
    copies = [
        str(path.relative_to(ROOT))
        for path in sorted(ROOT.glob("roles/*/*/*.yml"))
        if default in path.read_text()
        and path != ROOT / "roles/pytorch/defaults/main.yml"
        and path.parts[-3:-1] != ("pytorch", "meta")
    ]
    assert copies == []
