"""The offline bundle (scripts/bundle.py, plugins/modules/bundle_inventory.py).

Real throughout: the module runs against this machine's dpkg and apt lists and a real
virtual environment; the builder downloads (file:// URLs), indexes with dpkg-scanpackages,
signs with gpg, and real apt and pip read what it built. The packages are the lab's stub
.debs (gpuprov_lab.aptrepo) and a wheel written here, so no test needs the network."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import bundle
import bundle_inventory
import pytest
import test_lab_aptrepo
import yaml
from gpuprov_lab import aptrepo
from module_run import run_module

# Their ansible-playbook, ansible-builder and pip children run no measured file (conftest.py).
pytestmark = pytest.mark.usefixtures("unmeasured_children")

MODULE = Path(bundle_inventory.__file__)
# Written after the manifest's byte count: not in it.
SUMMARIES = {"manifest.json", "SHA256SUMS"}
# The builder signs and indexes with the lab's repository tools: the same skip.
needs_repo_tools = test_lab_aptrepo.pytestmark


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _apt_show_sha256(spec: str) -> str:
    shown = subprocess.run(
        ["apt-cache", "show", spec], capture_output=True, text=True, check=True
    ).stdout
    return next(line.split()[1] for line in shown.splitlines() if line.startswith("SHA256:"))


def test_the_module_lists_installed_packages_with_the_index_s_checksums(
    tmp_path: Path,
) -> None:
    venv = tmp_path / "opt" / "env"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    result = run_module(MODULE, {"venv_roots": [str(tmp_path / "opt")]})
    assert not result.get("failed"), result
    installed = subprocess.run(
        ["dpkg-query", "-W", "-f", "${db:Status-Abbrev}${binary:Package}=${Version}\n"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    # Installed: the second letter of the status (ii, and hi for a held package).
    ii = {line[3:].replace(":amd64", "") for line in installed if line[1:2] == "i"}
    listed = {f"{d['package'].replace(':amd64', '')}={d['version']}" for d in result["debs"]}
    missing = {m.replace(":amd64", "") for m in result["not_downloadable"]}
    assert listed | missing == ii
    assert not listed & missing
    for deb in result["debs"][:: max(1, len(result["debs"]) // 5)]:
        assert deb["sha256"] == _apt_show_sha256(f"{deb['package']}={deb['version']}")
        # The pool's file name drops the epoch; apt's local one keeps it (as %3a).
        pool_name = unquote(deb["uri"]).rsplit("/", 1)[1]
        assert pool_name == unquote(deb["filename"]).replace(
            deb["version"].split(":", 1)[0] + ":" if ":" in deb["version"] else "", ""
        )
    [env] = result["venvs"]
    assert env["path"] == str(venv)
    assert env["python"] == f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert "any" in env["platforms"]
    site = next((venv / "lib").glob("python*/site-packages"))
    dists = {p.name.split("-")[0].lower() for p in site.glob("*.dist-info")}
    assert {p["name"].lower() for p in env["packages"]} == dists


def _wheel(directory: Path, name: str, version: str) -> Path:
    """A minimal pure-Python wheel (PEP 427), written by hand."""
    path = directory / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": f"VERSION = {version!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for arc, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{arc},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    with zipfile.ZipFile(path, "w") as zf:
        for arc, text in files.items():
            zf.writestr(arc, text)
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


@pytest.fixture
def collected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Two hosts' answers: the lab's stub toolkit packages as file:// URLs (shared and not),
    and one environment's wheel in a local wheelhouse pip is pointed at."""
    debs_src = tmp_path / "src"
    debs_src.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    debs = aptrepo.build_packages(debs_src, work, "1.17.8-1")

    def entry(deb: Path) -> dict[str, Any]:
        name, version, _ = deb.name.split("_")
        return {
            "package": name,
            "version": version,
            "architecture": "all",
            "uri": deb.as_uri(),
            "filename": deb.name,
            "size": deb.stat().st_size,
            "sha256": _sha256(deb),
        }

    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    _wheel(wheelhouse, "bundletestpkg", "1.2.3")
    # The controller's part: a stand-in for ansible's wheel (its real download needs PyPI).
    _wheel(wheelhouse, "bundlectl", "0.1.0")
    monkeypatch.setattr(bundle, "controller_requirements", lambda: ["bundlectl==0.1.0"])
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheelhouse))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    venv = {
        "path": "/opt/gpuprov/venv",
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "platforms": ["any", "linux_x86_64"],
        "packages": [{"name": "bundletestpkg", "version": "1.2.3"}],
    }
    answers = {
        "gpu-a": {
            "release": "bookworm",
            "architecture": "amd64",
            "debs": [entry(d) for d in debs],
            "not_downloadable": [],
            "venvs": [venv],
        },
        "gpu-b": {
            "release": "bookworm",
            "architecture": "amd64",
            "debs": [entry(debs[0])],
            "not_downloadable": ["local-thing=1"],
            "venvs": [],
        },
    }
    out = tmp_path / "out"
    for kind in ("installed", "plan"):
        (out / kind).mkdir(parents=True)
    for host, answer in answers.items():
        (out / "installed" / f"{host}.json").write_text(json.dumps(answer))
    plan = {
        "ok": True,
        "driver": {"branch": "470"},
        "cuda": "11.4",
        "torch": "2.0.1",
        "variant": "cu118",
    }
    (out / "plan" / "gpu-a.json").write_text(json.dumps({"host": "gpu-a", "plan": plan}))
    return {"out": out, "debs": debs, "tmp": tmp_path}


def _apt(tmp: Path, repo_url: str, key: Path, *args: str) -> str:
    state = tmp / "aptstate"
    for sub in ("lists/partial", "cache/archives/partial"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    keyring = tmp / "bundle.gpg"
    keyring.write_bytes(
        subprocess.run(
            ["gpg", "--dearmor"], input=key.read_bytes(), capture_output=True, check=True
        ).stdout
    )
    sources = tmp / "sources.list"
    sources.write_text(f"deb [signed-by={keyring}] {repo_url} /\n")
    opts = [
        f"-o Dir::Etc::sourcelist={sources}",
        "-o Dir::Etc::sourceparts=/nonexistent",
        f"-o Dir::State::lists={state}/lists",
        f"-o Dir::Cache={state}/cache",
        "-o Dir::State::status=/dev/null",
    ]
    argv = [*args[:1], *(" ".join(opts).split()), *args[1:]]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


@needs_repo_tools
def test_a_build_is_a_signed_apt_repository_and_a_pip_index(collected: dict[str, Any]) -> None:
    out: Path = collected["out"]
    manifest = bundle.build(out)
    root = out / "bundle"
    names = sorted(d.name for d in collected["debs"])
    assert sorted(p.name for p in (root / "apt").glob("*.deb")) == names
    assert (out / "signing-key.asc").is_file()
    assert not list(root.rglob("signing-key*")), "the secret key is never served"
    # apt checks InRelease against the published key and sees every package.
    _apt(collected["tmp"], (root / "apt").as_uri(), root / "apt" / "gpgkey", "apt-get", "update")
    policy = _apt(
        collected["tmp"],
        (root / "apt").as_uri(),
        root / "apt" / "gpgkey",
        "apt-cache",
        "policy",
        "nvidia-container-toolkit",
    )
    assert "Candidate: 1.17.8-1" in policy
    # pip installs from the bundle's index alone.
    env = collected["tmp"] / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(env / "bin" / "python"),
            "install",
            "--isolated",
            "--index-url",
            (root / "simple").as_uri() + "/",
            "bundletestpkg==1.2.3",
            "bundlectl==0.1.0",
        ],
        check=True,
        capture_output=True,
    )
    # The controller's part: its requirements in the index, the gpuprov.fleet collection's
    # tarball (built from this checkout) in collections/.
    collections = sorted(p.name for p in (root / "collections").iterdir())
    assert len(collections) == 1
    assert collections[0].startswith("gpuprov-fleet-")
    members = subprocess.run(
        ["tar", "-tzf", str(root / "collections" / collections[0])],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert "MANIFEST.json" in members
    # ansible-galaxy installs it from the file (its collections come with the ansible package).
    subprocess.run(
        [
            bundle.ansible_tool("ansible-galaxy"),
            *("collection", "install", "--force", "--no-deps"),
            *("-p", str(collected["tmp"] / "colls")),
            str(root / "collections" / collections[0]),
        ],
        check=True,
        capture_output=True,
    )
    assert (collected["tmp"] / "colls/ansible_collections/gpuprov/fleet/MANIFEST.json").is_file()
    assert "roles/gpuprov_bundle/tasks/client.yml" in members
    assert manifest["controller"]["requirements"] == ["bundlectl==0.1.0"]
    assert manifest["controller"]["collections"] == collections
    assert manifest["controller"]["files"] == ["bundlectl-0.1.0-py3-none-any.whl"]
    # Every file is in SHA256SUMS, and sha256sum agrees.
    subprocess.run(["sha256sum", "--check", "--quiet", "SHA256SUMS"], cwd=root, check=True)
    listed = {line.split("  ", 1)[1] for line in (root / "SHA256SUMS").read_text().splitlines()}
    assert listed == {
        str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != "SHA256SUMS"
    }
    assert manifest["bytes"] == sum(
        p.stat().st_size for p in root.rglob("*") if p.is_file() and p.name not in SUMMARIES
    )
    assert manifest["plans"]["driver 470, CUDA 11.4, torch 2.0.1+cu118 (bookworm, amd64)"][
        "deb_bytes"
    ] == sum(d.stat().st_size for d in collected["debs"])
    assert manifest["debs"] == len(names)
    assert manifest["wheels"] == 2  # bundletestpkg, bundlectl
    assert manifest["not_downloadable"] == {"gpu-b": ["local-thing=1"]}
    assert manifest["hosts"]["gpu-a"]["plan"] == "driver 470, CUDA 11.4, torch 2.0.1+cu118"
    assert manifest["hosts"]["gpu-b"]["plan"] == "no GPU plan"
    # Fetched: the packages and the two wheels, not the collection built here.
    assert manifest["fetched_bytes"] == sum(d.stat().st_size for d in collected["debs"]) + sum(
        w.stat().st_size for w in (root / "wheels").iterdir()
    )


@needs_repo_tools
def test_a_second_build_fetches_nothing_but_a_damaged_file_and_keeps_the_key(
    collected: dict[str, Any],
) -> None:
    out: Path = collected["out"]
    bundle.build(out)
    key = (out / "bundle" / "apt" / "gpgkey").read_text()
    damaged = out / "cache" / "debs" / collected["debs"][0].name
    damaged.write_bytes(b"half a download")
    again = bundle.build(out)
    assert again["fetched_bytes"] == collected["debs"][0].stat().st_size
    assert _sha256(damaged) == _sha256(collected["debs"][0])
    assert (out / "bundle" / "apt" / "gpgkey").read_text() == key


@needs_repo_tools
def test_the_controller_s_part_holds_only_what_the_controller_needs_now(
    collected: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ansible upgraded on the controller between two builds: the bundle carries the new
    wheel, not both (the old one would be served, and listed, for nothing)."""
    out: Path = collected["out"]
    bundle.build(out)
    _wheel(collected["tmp"] / "wheelhouse", "bundlectl", "0.2.0")
    monkeypatch.setattr(bundle, "controller_requirements", lambda: ["bundlectl==0.2.0"])
    manifest = bundle.build(out)
    assert manifest["controller"]["files"] == ["bundlectl-0.2.0-py3-none-any.whl"]
    wheels = sorted(p.name for p in (out / "bundle" / "wheels").iterdir())
    assert [w for w in wheels if w.startswith("bundlectl")] == ["bundlectl-0.2.0-py3-none-any.whl"]


PLAN_470 = {
    "ok": True,
    "driver": {"branch": 470},
    "cuda": "11.4",
    "torch": "2.0.1",
    "variant": "cu118",
}
STAGED_470 = {
    "plan": "driver 470, CUDA 11.4, torch 2.0.1+cu118",
    "release": "bookworm",
    "architecture": "amd64",
}


def test_a_fleet_plan_no_staging_host_ran_is_named_with_its_hosts() -> None:
    """Covered means the same stack for the same release and architecture (dpkg's name for
    Ansible's x86_64)."""
    x86 = {"architecture": "x86_64"}
    fleet = {
        "gpu-1": {"release": "bookworm", "plan": PLAN_470, **x86},
        "gpu-2": {"release": "trixie", "plan": PLAN_470, **x86},  # the stack, another release
        "gpu-3": {"release": "bookworm", "plan": {**PLAN_470, "driver": {"branch": 535}}, **x86},
        "gpu-4": {"release": "trixie", "plan": PLAN_470, **x86},
        "gpu-5": {"release": "bookworm", "plan": PLAN_470, "architecture": "aarch64"},
    }
    assert bundle.uncovered(fleet, {"stage-a": STAGED_470}) == {
        "driver 470, CUDA 11.4, torch 2.0.1+cu118 (trixie, amd64)": ["gpu-2", "gpu-4"],
        "driver 535, CUDA 11.4, torch 2.0.1+cu118 (bookworm, amd64)": ["gpu-3"],
        "driver 470, CUDA 11.4, torch 2.0.1+cu118 (bookworm, arm64)": ["gpu-5"],
    }
    assert bundle.uncovered({"gpu-1": fleet["gpu-1"]}, {"stage-a": STAGED_470}) == {}


@needs_repo_tools
def test_a_build_for_a_fleet_it_cannot_provision_stops_before_downloading(
    collected: dict[str, Any],
) -> None:
    out: Path = collected["out"]
    (out / "fleet" / "plan").mkdir(parents=True)
    doc = {"host": "gpu-z", "release": "trixie", "architecture": "x86_64", "plan": PLAN_470}
    (out / "fleet" / "plan" / "gpu-z.json").write_text(json.dumps(doc))
    with pytest.raises(bundle.BundleError, match=r"\(trixie, amd64\): gpu-z\)"):
        bundle.build(out)
    assert not (out / "cache").exists()
    doc["release"] = "bookworm"
    (out / "fleet" / "plan" / "gpu-z.json").write_text(json.dumps(doc))
    manifest = bundle.build(out)
    assert manifest["fleet"] == {
        "gpu-z": "driver 470, CUDA 11.4, torch 2.0.1+cu118 (bookworm, amd64)"
    }


@needs_repo_tools
def test_two_mirrors_serving_one_file_name_differently_are_refused(
    collected: dict[str, Any],
) -> None:
    out: Path = collected["out"]
    answer = json.loads((out / "installed" / "gpu-b.json").read_text())
    answer["debs"][0]["sha256"] = "0" * 64
    (out / "installed" / "gpu-b.json").write_text(json.dumps(answer))
    with pytest.raises(bundle.BundleError, match="gpu-a and gpu-b were served different files"):
        bundle.build(out)


@needs_repo_tools
def test_a_checksum_apt_did_not_publish_is_refused(collected: dict[str, Any]) -> None:
    out: Path = collected["out"]
    for host in ("gpu-a", "gpu-b"):
        answer = json.loads((out / "installed" / f"{host}.json").read_text())
        for deb in answer["debs"]:
            deb["sha256"] = "f" * 64
        (out / "installed" / f"{host}.json").write_text(json.dumps(answer))
    with pytest.raises(bundle.BundleError, match="is not apt's ffff"):
        bundle.build(out)
    assert not list((out / "cache" / "debs").iterdir())


def test_nothing_collected_names_the_collect_step(tmp_path: Path) -> None:
    with pytest.raises(bundle.BundleError, match=r"scripts/bundle\.py collect"):
        bundle.build(tmp_path)


@pytest.mark.parametrize(
    ("filename", "key"),
    [
        ("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", ("torch", "2.13.0+cpu")),
        ("PyYAML-6.0.2.tar.gz", ("pyyaml", "6.0.2")),
        ("torch_model_archiver-0.12.0-py3-none-any.whl", ("torch-model-archiver", "0.12.0")),
        ("nvidia-pytriton-0.5.0", ("nvidia-pytriton", "0.5.0")),
    ],
)
def test_dist_key(filename: str, key: tuple[str, str]) -> None:
    assert bundle.dist_key(filename) == key


def test_held_packages_are_installed_packages() -> None:
    lines = "ii \tadduser\t3.134\tall\nhi \tlibnvidia-ml1:amd64\t535\tamd64\nrc \tgone\t1\tall\n"
    assert [p["package"] for p in bundle_inventory.parse_installed(lines)] == [
        "adduser",
        "libnvidia-ml1:amd64",
    ]


def test_apt_s_missing_source_lines_are_read() -> None:
    err = (
        "E: Can't find a source to download version '12.4+deb12u11' of 'base-files:amd64'\n"
        "E: Can't find a source to download version '5.2.15-2+b8' of 'bash:amd64'\n"
    )
    assert bundle_inventory.parse_missing(err) == {
        ("base-files", "12.4+deb12u11"),
        ("bash", "5.2.15-2+b8"),
    }


def test_a_collection_holding_the_bundle_s_own_directory_is_named(tmp_path: Path) -> None:
    """The collection is built from the checkout: an --out inside it (make bundle's default)
    would put the signing key's secret half into the served tarball. build_ignore names the
    default; leaked_members finds any other such directory in the tarball."""
    tarball = tmp_path / "gpuprov-fleet-0.1.0.tar.gz"
    key = tmp_path / "key"
    key.write_text("secret")
    with tarfile.open(tarball, "w:gz") as archive:
        archive.add(key, arcname="MANIFEST.json")
        archive.add(key, arcname="my-out/signing-key.asc")
    assert bundle.leaked_members(tarball, bundle.REPO / "my-out") == ["my-out/signing-key.asc"]
    assert bundle.leaked_members(tarball, bundle.REPO / "my") == []
    assert bundle.leaked_members(tarball, tmp_path / "my-out") == []
    default = re.search(r"^BUNDLE_OUT \?= (\S+)$", (bundle.REPO / "Makefile").read_text(), re.M)
    assert default
    galaxy = yaml.safe_load((bundle.REPO / "galaxy.yml").read_text())
    assert default.group(1) in galaxy["build_ignore"]
    assert f"/{default.group(1)}/" in (bundle.REPO / ".gitignore").read_text().split()
