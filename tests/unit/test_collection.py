"""gpuprov as the Ansible collection gpuprov.fleet (galaxy.yml, issue 22).

The roles must work installed, where only the collection's own folder exists: no role reaches
outside its folder, every gpuprov filter is named by FQCN (an installed collection's roles do
not find a filter by its short name), and the payload the roles put on hosts is part of the
built artifact. The installed collection against a lab host: tests/lab/test_installed_collection.py.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())
FQCN = f"{GALAXY['namespace']}.{GALAXY['name']}"
YAML_FILES = sorted(
    p
    for base in ("roles", "playbooks")
    for p in (ROOT / base).rglob("*")
    if p.suffix in (".yml", ".j2") and p.is_file()
)


def _filter_names() -> set[str]:
    """Every filter gpuprov's plugins/filter registers (read from the files' FilterModule)."""
    names: set[str] = set()
    for path in (ROOT / "plugins" / "filter").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name == "filters":
                for d in ast.walk(node):
                    if isinstance(d, ast.Dict):
                        names.update(k.value for k in d.keys if isinstance(k, ast.Constant))
    return names


def test_the_collection_is_named_as_the_checkout_link_and_the_plugins_say() -> None:
    link = ROOT / "dev_collections" / "ansible_collections" / GALAXY["namespace"] / GALAXY["name"]
    assert link.is_symlink()
    assert link.resolve() == ROOT
    import gpuprov_files_action as files_action  # plugins/action (tests/unit/conftest.py)
    import inventory_check_action as check_action

    assert check_action.COLLECTION == FQCN
    assert files_action.COLLECTION_ROOT == ROOT
    assert check_action.ROLES_DIR == ROOT / "roles"
    cfg = (ROOT / "ansible.cfg").read_text()
    assert re.search(r"^collections_path = dev_collections:", cfg, re.M)


def test_no_role_or_playbook_reaches_outside_its_folder() -> None:
    offenders = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in YAML_FILES
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"role_path\s*}}\s*/\.\.", line)
    ]
    assert offenders == []


def test_the_detector_finds_a_short_filter_name() -> None:
    """What the next test looks for, on the shapes the roles had before the collection."""
    names = _filter_names()
    assert _short_uses("x: \"{{ 'Debian' | gpu_compat_os_packages }}\"", names)
    assert _short_uses("x: \"{{ m | map('gpu_compat_gpu') | list }}\"", names)
    assert not _short_uses(f"x: \"{{{{ m | map('{FQCN}.gpu_compat_gpu') }}}}\"", names)
    # A variable of the same name as a filter, left of a pipe, is no filter use.
    assert not _short_uses('x: "{{ dist_launch_slots | int }}"', names)


def _short_uses(text: str, names: set[str]) -> list[str]:
    alt = "|".join(sorted(names, key=len, reverse=True))
    pattern = re.compile(rf"(?:\|\s*|(?:map|select|reject)\(\s*')({alt})\b")
    return pattern.findall(text)


def test_every_gpuprov_filter_is_named_by_fqcn() -> None:
    names = _filter_names()
    assert len(names) > 20  # the detector reads the plugins
    offenders = {
        str(p.relative_to(ROOT)): uses
        for p in YAML_FILES
        if (uses := _short_uses(p.read_text(), names))
    }
    assert offenders == {}


def test_every_payload_the_roles_name_holds_their_files() -> None:
    import gpuprov_files_action as action

    tasks = [
        one
        for p in YAML_FILES
        if "/tasks/" in str(p)
        for t in (yaml.safe_load(p.read_text()) or [])
        if isinstance(t, dict) and "gpuprov_files" in t
        for one in action.sets_of(t["gpuprov_files"])
        if "payload" in one
    ]
    assert {t["payload"] for t in tasks} == set(action.PAYLOADS)
    for t in tasks:
        if isinstance(t["names"], list):
            for name in t["names"]:
                assert (action.payload_dir(t["payload"]) / name).is_file(), (t, name)


def test_an_unknown_payload_is_refused_naming_the_known_ones() -> None:
    import gpuprov_files_action as action
    from ansible.errors import AnsibleActionFail

    with pytest.raises(AnsibleActionFail, match=r"unknown payload 'docs'; one of compat, probe"):
        action.payload_dir("docs")


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> tarfile.TarFile:
    out = tmp_path_factory.mktemp("build")
    galaxy = Path(sys.executable).parent / "ansible-galaxy"
    proc = subprocess.run(
        [str(galaxy), "collection", "build", "--output-path", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        check=False,
        cwd=out,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (tarball,) = out.glob("*.tar.gz")
    assert tarball.name == f"{GALAXY['namespace']}-{GALAXY['name']}-{GALAXY['version']}.tar.gz"
    return tarfile.open(tarball)


def test_the_built_collection_holds_the_roles_plugins_playbooks_and_payload(artifact) -> None:
    names = set(artifact.getnames())
    roles = {p.name for p in (ROOT / "roles").iterdir() if p.is_dir()}
    assert {n.split("/")[1] for n in names if n.startswith("roles/") and "/" in n} == roles
    playbooks = {f"playbooks/{p.name}" for p in (ROOT / "playbooks").glob("*.yml")}
    assert playbooks <= names
    plugins = {
        str(p.relative_to(ROOT))
        for p in (ROOT / "plugins").rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert plugins <= names
    import gpuprov_files_action as action

    for sub in action.PAYLOADS.values():
        want = {
            str(p.relative_to(ROOT))
            for p in (ROOT / sub).glob("*.py")
            if "__pycache__" not in p.parts
        }
        assert want, sub
        assert want <= names, sub
    assert "compat/data/perf.yaml" in names
    assert "meta/runtime.yml" in names


def test_the_built_collection_holds_nothing_of_the_workshop(artifact) -> None:
    names = artifact.getnames()
    top = {n.split("/")[0] for n in names}
    assert not top & {"tests", "docs", ".lab", ".venv", ".git", "dev_collections", "collections"}
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # Only the scripts the roles copy: the lab, benchmarks and reports stay in the checkout.
    assert {n.split("/")[1] for n in names if n.startswith("scripts/") and n.count("/") >= 1} == {
        "smoke"
    }
    assert not [n for n in names if n.startswith("inventories/lab")]
