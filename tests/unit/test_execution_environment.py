"""The execution environment (execution-environment.yml, issue 23): `make ee` builds the
collection's tarball and gpuprov's wheel and runs `ansible-builder create`; the build context
must hold what the definition names, and the definition's pins must be the project's.

The image itself is not built here: its base image is on quay.io, which our machines cannot
reach (docs/collection.md). What the image's galaxy stage does with the tarball, installing
it with ansible-galaxy, is done below into a temporary path.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml

# Their ansible-playbook, ansible-builder and pip children run no measured file (conftest.py).
pytestmark = pytest.mark.usefixtures("unmeasured_children")

ROOT = Path(__file__).resolve().parents[2]
EE = yaml.safe_load((ROOT / "execution-environment.yml").read_text())
GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())
EE_DIR = ROOT / "build" / "ee"


def _dev_pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements-dev.txt").read_text().splitlines():
        if m := re.match(r"^([A-Za-z0-9_.-]+)==(\S+)$", line.strip()):
            pins[m.group(1).lower()] = m.group(2)
    return pins


@pytest.fixture(scope="module")
def context(unmeasured_children: None) -> Path:
    # -o: never rebuild the venv from inside the tests (its stamp is older than an edit).
    proc = subprocess.run(
        ["make", "-o", ".venv/bin/.stamp", "ee"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    # ansible-builder only warns when a file of additional_build_files is missing.
    assert "No matches for" not in out, out
    assert "does not exist" not in out, out
    return EE_DIR / "context"


def test_the_pins_are_the_projects() -> None:
    dev = _dev_pins()
    core = EE["dependencies"]["ansible_core"]["package_pip"]
    assert core == f"ansible-core=={dev['ansible-core']}"
    python = {
        name.lower(): version
        for name, version in (p.split("==") for p in EE["dependencies"]["python"])
    }
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=!~ ]", d)[0].lower() for d in project}
    assert set(python) == names
    assert python == {n: dev[n] for n in names}


def test_the_context_holds_the_collection_where_the_galaxy_stage_reads_it(context: Path) -> None:
    (req,) = EE["dependencies"]["galaxy"]["collections"]
    assert req["type"] == "file"
    # The Containerfile copies _build to /build before the galaxy install.
    containerfile = next(p for p in context.iterdir() if p.name in ("Containerfile", "Dockerfile"))
    assert "COPY _build /build" in containerfile.read_text()
    tarball = context / "_build" / Path(req["name"]).relative_to("/build")
    assert tarball.is_file()
    with tarfile.open(tarball) as tar:
        manifest = json.load(tar.extractfile("MANIFEST.json"))  # type: ignore[arg-type]
    info = manifest["collection_info"]
    assert (info["namespace"], info["name"], info["version"]) == (
        GALAXY["namespace"],
        GALAXY["name"],
        GALAXY["version"],
    )


def test_the_context_holds_gpuprovs_wheel_with_its_data(context: Path) -> None:
    (wheel,) = (context / "_build" / "wheels").glob("gpuprov-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "compat/__init__.py" in names
    assert "compat/data/perf.yaml" in names
    steps = "\n".join(EE["additional_build_steps"]["append_final"])
    assert "COPY _build/wheels/" in steps


def test_the_galaxy_stage_installs_the_tarball(context: Path, tmp_path: Path) -> None:
    """What the image's galaxy stage runs, into a temporary path (the collections gpuprov.fleet
    depends on are the pinned `ansible` package's here, as they are Galaxy's in the image)."""
    (req,) = EE["dependencies"]["galaxy"]["collections"]
    tarball = context / "_build" / Path(req["name"]).relative_to("/build")
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text(f"[defaults]\ncollections_path = {tmp_path}\n")
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-galaxy"),
            "collection",
            "install",
            "-p",
            str(tmp_path),
            str(tarball),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "ANSIBLE_CONFIG": str(cfg)},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    root = tmp_path / "ansible_collections" / GALAXY["namespace"] / GALAXY["name"]
    assert (root / "roles" / "nvidia_driver" / "meta" / "argument_specs.yml").is_file()
    assert (root / "scripts" / "smoke" / "run_all.py").is_file()
