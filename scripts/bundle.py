#!/usr/bin/env python3
"""The offline bundle (issue 23 item 1; docs/bundle.md): everything a plan's hosts installed,
downloaded once into one directory with a manifest and checksums.

    scripts/bundle.py collect -i INVENTORY --limit HOSTS --out DIR [--fleet PATTERN]
    scripts/bundle.py build --out DIR [--python PIP_PYTHON]

``collect`` runs playbooks/bundle.yml on HOSTS, hosts of the inventory that converged online
(a staging host of each plan): the ``bundle_inventory`` module lists every Debian package each
installed (with the URL and SHA256 apt would fetch it from) and every Python distribution of
each virtual environment (with the environment's Python and platform tags). Their answers
land in ``DIR/installed/<host>.json``, the plan of each GPU host in ``DIR/plan/<host>.json``
(reports of roles/gpuprov_report, as ``plan.yml`` writes them).

With ``--fleet PATTERN`` it also plans the fleet's GPU hosts (``playbooks/plan.yml``, read-only;
``DIR/fleet/plan/<host>.json``), and ``build`` then refuses, before downloading anything, a
bundle that leaves a fleet host's plan (driver branch, CUDA, torch build, Debian release)
with no staging host: that host could not provision from it.

``build`` reads those reports and makes ``DIR/bundle/``, the directory to serve:

- ``apt/``: every package, once, checked against apt's SHA256, as one flat apt repository
  (suite ``/``) whose Release is signed (InRelease, Release.gpg) with the bundle's key,
  published as ``apt/gpgkey``. The key's secret half stays in ``DIR/signing-key.asc``, outside
  what is served, and signs every later build (hosts keep trusting one key).
- ``wheels/`` and ``simple/``: every distribution of every environment, downloaded with the
  environment's own Python version and platform tags by ``pip download --no-deps`` (pip's
  configured indexes and find-links, which is where the CPU torch wheel of the lab lies), and a
  PEP 503 index over them (``pip --index-url URL/simple/``).
- The controller's side, so that a controller inside the air gap runs gpuprov too: the
  ``gpuprov.fleet`` collection's tarball in ``collections/`` (``ansible-galaxy collection
  build``), and in ``wheels/`` the controller's ``ansible`` (which bundles the collections of
  requirements.yml at the versions it pins) and ``ansible-core`` at the versions installed
  here, and pyproject.toml's build requirements (``pip install .`` of the checkout), with
  their dependencies, for this controller's Python.
- ``manifest.json`` (what is in it, for which hosts and plans, sizes) and ``SHA256SUMS``.

A second build downloads only what is missing or fails its checksum (an interrupted build is
resumed by running it again). What cannot be had is said, naming the package and the host.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from gpuprov_lab import aptrepo
from gpuprov_lab.common import LabError
from gpuprov_lab.site import ansible_tool

REPO = Path(__file__).resolve().parents[1]
SCHEMA = 1
KEY_UID = "gpuprov offline bundle <bundle@gpuprov.invalid>"


class BundleError(Exception):
    """A bundle that cannot be built as asked; the message names what to fix."""


@dataclass
class Contents:
    """What the collected hosts need, deduplicated."""

    debs: dict[str, dict[str, Any]] = field(default_factory=dict)  # filename -> deb
    # (python, platforms, sorted "name==version" requirements), one per distinct environment:
    # two environments of one Python may pin one project differently (torch's and Triton's)
    wheels: set[tuple[str, tuple[str, ...], tuple[str, ...]]] = field(default_factory=set)
    not_downloadable: dict[str, list[str]] = field(default_factory=dict)  # host -> name=version
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)  # host -> summary


def plan_key(plan: Mapping[str, Any] | None) -> str:
    """One line naming a host's plan: driver branch, CUDA, torch build (no plan: "no GPU")."""
    if not plan or not plan.get("ok"):
        return "no GPU plan"
    driver = plan.get("driver") or {}
    torch = (
        f"{plan.get('torch')}+{plan.get('variant')}" if plan.get("variant") else plan.get("torch")
    )
    return f"driver {driver.get('branch')}, CUDA {plan.get('cuda')}, torch {torch}"


# Ansible's ansible_facts['architecture'] as dpkg names it (the staging hosts' answers).
DPKG_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64el", "i386": "i386"}


def hosted_plan(plan: Mapping[str, Any] | None, release: str, architecture: str) -> str:
    """A plan with the Debian release and architecture it is for: the unit of what a staging
    host covers (the manifest's "plans" keys)."""
    arch = DPKG_ARCH.get(architecture, architecture)
    return f"{plan_key(plan)} ({release or 'release unknown'}, {arch or 'architecture unknown'})"


def fleet_plan(doc: Mapping[str, Any]) -> str:
    """``hosted_plan`` of a fleet host's plan report (plan.yml: plan, release, architecture)."""
    return hosted_plan(
        doc.get("plan"), str(doc.get("release") or ""), str(doc.get("architecture") or "")
    )


def uncovered(
    fleet: Mapping[str, Mapping[str, Any]], staged: Mapping[str, Mapping[str, Any]]
) -> dict[str, list[str]]:
    """The fleet's plans (``fleet``: plan.yml's reports by host) that no staging host
    (``staged``: Contents.hosts) ran, each with its fleet hosts."""
    have = {hosted_plan_of(summary) for summary in staged.values()}
    missing: dict[str, list[str]] = {}
    for host, doc in sorted(fleet.items()):
        key = fleet_plan(doc)
        if key not in have:
            missing.setdefault(key, []).append(host)
    return missing


def hosted_plan_of(summary: Mapping[str, Any]) -> str:
    """``hosted_plan`` of a staging host's summary (Contents.hosts)."""
    return (
        f"{summary['plan']} ({summary['release'] or 'release unknown'}, "
        f"{summary['architecture'] or 'architecture unknown'})"
    )


def merge(answers: Mapping[str, Mapping[str, Any]], plans: Mapping[str, Any]) -> Contents:
    """The collected answers of the hosts (bundle_inventory's result, by host) as one set.

    A package file two hosts name with different checksums is refused (two mirrors that
    disagree): the bundle would serve one of them to both."""
    contents = Contents()
    for host in sorted(answers):
        answer = answers[host]
        release = str(answer.get("release", ""))
        for deb in answer.get("debs", []):
            name = str(deb["filename"])
            seen = contents.debs.get(name)
            if seen and seen["sha256"] != deb["sha256"]:
                raise BundleError(
                    f"{name}: {seen['hosts'][0]} and {host} were served different files "
                    f"(sha256 {seen['sha256'][:12]} from {seen['uri']}, {deb['sha256'][:12]} "
                    f"from {deb['uri']}); point both at one mirror"
                )
            if seen:
                seen["hosts"].append(host)
            else:
                contents.debs[name] = {**deb, "release": release, "hosts": [host]}
        if answer.get("not_downloadable"):
            contents.not_downloadable[host] = list(answer["not_downloadable"])
        for venv in answer.get("venvs", []):
            reqs = sorted({f"{p['name']}=={p['version']}" for p in venv["packages"]}, key=str.lower)
            contents.wheels.add((str(venv["python"]), tuple(venv["platforms"]), tuple(reqs)))
        contents.hosts[host] = {
            "release": release,
            "architecture": answer.get("architecture", ""),
            "plan": plan_key(plans.get(host)),
            "debs": sorted(str(d["filename"]) for d in answer.get("debs", [])),
            "venvs": [v["path"] for v in answer.get("venvs", [])],
        }
    return contents


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(uri: str, sha256: str, dest: Path, timeout: float = 120) -> int:
    """Download ``uri`` to ``dest`` unless a file with that SHA256 is there; the bytes fetched.

    Written to a temporary name and renamed: an interrupted download leaves no file that
    looks complete. A file whose checksum differs from apt's is refused, naming the URL."""
    if dest.is_file() and (not sha256 or sha256_file(dest) == sha256):
        return 0
    part = dest.with_name(dest.name + ".part")
    try:
        with urllib.request.urlopen(uri, timeout=timeout) as response, part.open("wb") as out:  # noqa: S310 (apt's own http/https/file URIs)
            shutil.copyfileobj(response, out)
    except OSError as exc:
        part.unlink(missing_ok=True)
        raise BundleError(f"could not download {uri}: {exc}") from exc
    got = sha256_file(part)
    if sha256 and got != sha256:
        part.unlink()
        raise BundleError(
            f"{uri}: sha256 {got} is not apt's {sha256}: the mirror serves another file than "
            "the host's package lists name (changed since its last apt update, or damaged); "
            "update the host's lists (apt-get update) and collect again, or fix the mirror"
        )
    part.rename(dest)
    return dest.stat().st_size


def normalize(name: str) -> str:
    """PEP 503's normalized project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


# A wheel's or sdist's project name: everything before the first "-<digit>".
_DIST_NAME = re.compile(r"^(?P<name>.+?)-\d")


def dist_key(filename: str) -> tuple[str, str]:
    """(normalized name, version) of a wheel's or sdist's file name, or of "name-version"."""
    stem = filename.removesuffix(".tar.gz").removesuffix(".zip")
    match = _DIST_NAME.match(stem)
    if not match:
        return (normalize(stem), "")
    rest = stem[len(match["name"]) + 1 :]
    return (normalize(match["name"]), rest.split("-", 1)[0])


def simple_index(files: Iterable[str]) -> dict[str, str]:
    """PEP 503 pages (relative path -> HTML) for distribution files in ``../../wheels/``."""
    projects: dict[str, list[str]] = {}
    for name in sorted(files):
        project, version = dist_key(name)
        if version:
            projects.setdefault(project, []).append(name)
    pages = {
        "index.html": "<!DOCTYPE html><html><body>\n"
        + "".join(f'<a href="{p}/">{p}</a>\n' for p in sorted(projects))
        + "</body></html>\n"
    }
    for project, names in projects.items():
        links = "".join(
            f'<a href="../../wheels/{html.escape(n)}">{html.escape(n)}</a>\n' for n in names
        )
        pages[f"{project}/index.html"] = f"<!DOCTYPE html><html><body>\n{links}</body></html>\n"
    return pages


def pip_download_argv(
    pip_python: str, python: str, platforms: Sequence[str], requirements: Path, dest: Path
) -> list[str]:
    """pip download of exact pins for another interpreter's tags (no dependency resolution:
    the list is what an environment holds, complete)."""
    argv = [pip_python, "-m", "pip", "download", "--no-deps", "--dest", str(dest)]
    argv += ["--python-version", python, "--implementation", "cp"]
    for platform in platforms:
        argv += ["--platform", platform]
    return [*argv, "--requirement", str(requirements)]


def run_step(argv: Sequence[str], what: str) -> None:
    """Run one of the build's tools; a failure is a BundleError naming ``what``, the command
    and the end of its stderr."""
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=REPO)
    if done.returncode != 0:
        raise BundleError(f"{what} failed ({' '.join(argv)}):\n{done.stderr.strip()[-2000:]}")


def controller_requirements() -> list[str]:
    """What a controller inside the air gap installs from the bundle: the ``ansible`` package
    (it bundles the collections requirements.yml pins; requirements.yml says which release
    does) and ``ansible-core`` at the versions installed here, and what building gpuprov's own
    package needs (pyproject.toml's build requirements: ``pip install .`` of the checkout)."""
    build_requires = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]
    return [
        *(f"{name}=={metadata.version(name)}" for name in ("ansible", "ansible-core")),
        *build_requires["requires"],
    ]


def build_controller(
    pip_python: str, requirements: Sequence[str], cache: Path
) -> tuple[list[Path], Path, int]:
    """Download the controller's requirements with their dependencies (for ``pip_python``'s
    own interpreter) into a directory of ``cache/controller`` named by what was asked, and
    build the gpuprov.fleet collection's tarball from this checkout into ``cache/local``.
    Returns the downloads, the tarball and the bytes downloaded now. Downloads for other
    requirements (an Ansible upgraded since) are removed: the bundle carries only what this
    controller needs."""
    asked = hashlib.sha256("\n".join([pip_python, *requirements]).encode()).hexdigest()[:16]
    downloads = cache / "controller" / asked
    local = cache / "local"
    for directory in (downloads, local):
        directory.mkdir(parents=True, exist_ok=True)
    for old in local.iterdir():
        old.unlink()
    for old in (cache / "controller").iterdir():
        if old != downloads:
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    before = {p.name for p in downloads.iterdir()}
    steps = [
        [pip_python, "-m", "pip", "download", "--dest", str(downloads), *requirements],
        [
            *(ansible_tool("ansible-galaxy"), "collection", "build", "--force"),
            *("--output-path", str(local), str(REPO)),
        ],
    ]
    for argv in steps:
        run_step(argv, "the controller's part")
    tarballs = sorted(local.glob("gpuprov-fleet-*.tar.gz"))
    if not tarballs:
        raise BundleError(f"ansible-galaxy collection build wrote no tarball in {local}")
    leaked = leaked_members(tarballs[-1], cache.parent)
    if leaked:
        raise BundleError(
            f"the collection built from {REPO} holds files of the bundle's own directory "
            f"{cache.parent} ({', '.join(leaked[:5])}), its signing key among them: put --out "
            "outside the checkout, or name it in galaxy.yml's build_ignore"
        )
    files = sorted(p for p in downloads.iterdir() if p.is_file())
    return files, tarballs[-1], sum(p.stat().st_size for p in files if p.name not in before)


def leaked_members(tarball: Path, out: Path) -> list[str]:
    """Members of the collection's tarball that lie in ``out`` (the bundle's directory, with
    the signing key's secret half) when ``out`` is inside the checkout the tarball is built
    from; empty otherwise."""
    try:
        inside = out.resolve().relative_to(REPO.resolve()).as_posix()
    except ValueError:
        return []
    with tarfile.open(tarball) as archive:
        names = archive.getnames()
    return [n for n in names if n == inside or n.startswith(inside + "/")]


def build_apt(debs: Iterable[Path], bundle: Path, secret: Path) -> None:
    """The flat, signed repository ``bundle/apt`` over the package files ``debs``."""
    repo = bundle / "apt"
    repo.mkdir(parents=True, exist_ok=True)
    for deb in debs:
        os.link(deb, repo / deb.name)
    aptrepo.index_flat(repo, origin="gpuprov-bundle", label="gpuprov offline bundle")
    key = aptrepo.sign(repo, repo, keep_key=secret.is_file(), secret=secret, uid=KEY_UID)
    (repo / "gpgkey").write_text(key)


def read_collected(out: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The collect step's reports: OUT/installed/<host>.json, OUT/plan/<host>.json."""
    answers = {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("installed/*.json"))}
    plans = {p.stem: json.loads(p.read_text())["plan"] for p in sorted(out.glob("plan/*.json"))}
    if not answers:
        raise BundleError(
            f"nothing collected in {out / 'installed'}: run `scripts/bundle.py collect "
            "-i INVENTORY --limit HOSTS --out DIR` first (hosts that converged online)"
        )
    return answers, plans


def build(out: Path, pip_python: str = sys.executable) -> dict[str, Any]:
    """Build ``out/bundle`` from the collected reports; returns the manifest (also written)."""
    started = time.monotonic()
    answers, plans = read_collected(out)
    contents = merge(answers, plans)
    fleet = {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("fleet/plan/*.json"))}
    missing = uncovered(fleet, contents.hosts)
    if missing:
        said = "; ".join(f"{key}: {', '.join(hosts)}" for key, hosts in missing.items())
        raise BundleError(
            f"no staging host ran these plans of the fleet ({said}): the bundle could not "
            "provision those hosts. Converge one host of each online and collect it too "
            "(--limit), or leave those hosts out of --fleet. Nothing was downloaded."
        )
    cache = out / "cache"
    debs_dir = cache / "debs"
    debs_dir.mkdir(parents=True, exist_ok=True)
    fetched = 0
    for name, deb in sorted(contents.debs.items()):
        fetched += fetch(str(deb["uri"]), str(deb["sha256"]), debs_dir / name)
    bundle = out / "bundle"
    if bundle.exists():
        shutil.rmtree(bundle)
    bundle.mkdir(parents=True)
    build_apt((debs_dir / name for name in sorted(contents.debs)), bundle, out / "signing-key.asc")
    wheels_cache = cache / "wheels"
    wheels_cache.mkdir(parents=True, exist_ok=True)
    before = {p.name for p in wheels_cache.iterdir()}
    for number, (python, platforms, requirements) in enumerate(sorted(contents.wheels)):
        reqs = cache / f"requirements-{number}-{python}.txt"
        reqs.write_text("\n".join(requirements) + "\n")
        argv = pip_download_argv(pip_python, python, platforms, reqs, wheels_cache)
        run_step(argv, f"pip download for Python {python}")
    fetched += sum(p.stat().st_size for p in wheels_cache.iterdir() if p.name not in before)
    wheels = bundle / "wheels"
    wheels.mkdir()
    wanted = {dist_key(req.replace("==", "-", 1)) for *_, reqs in contents.wheels for req in reqs}
    for path in sorted(wheels_cache.iterdir()):
        if dist_key(path.name) in wanted:
            os.link(path, wheels / path.name)
    controller_reqs = controller_requirements()
    controller_files, tarball, controller_fetched = build_controller(
        pip_python, controller_reqs, cache
    )
    fetched += controller_fetched
    for path in controller_files:
        if not (wheels / path.name).exists():
            os.link(path, wheels / path.name)
    (bundle / "collections").mkdir()
    os.link(tarball, bundle / "collections" / tarball.name)
    for rel, page in simple_index(p.name for p in wheels.iterdir()).items():
        target = bundle / "simple" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(page)
    manifest = manifest_of(bundle, contents, fetched, time.monotonic() - started)
    manifest["controller"] = {
        "requirements": controller_reqs,
        "files": sorted(p.name for p in controller_files),
        "collections": [tarball.name],
    }
    # The hosts this bundle was checked to provision (collect --fleet), with their plans.
    manifest["fleet"] = {host: fleet_plan(doc) for host, doc in fleet.items()}
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    sums = sorted(
        (str(p.relative_to(bundle)), sha256_file(p)) for p in bundle.rglob("*") if p.is_file()
    )
    (bundle / "SHA256SUMS").write_text("".join(f"{digest}  {path}\n" for path, digest in sums))
    return manifest


def manifest_of(bundle: Path, contents: Contents, fetched: int, seconds: float) -> dict[str, Any]:
    # By path: the PEP 503 pages are all index.html.
    sizes = {str(p.relative_to(bundle)): p.stat().st_size for p in bundle.rglob("*") if p.is_file()}
    per_plan: dict[str, dict[str, Any]] = {}
    for host, summary in sorted(contents.hosts.items()):
        entry = per_plan.setdefault(hosted_plan_of(summary), {"hosts": [], "deb_bytes": 0})
        entry["hosts"].append(host)
        entry["deb_bytes"] = max(
            entry["deb_bytes"], sum(sizes.get(f"apt/{name}", 0) for name in summary["debs"])
        )
    return {
        "schema": SCHEMA,
        "hosts": contents.hosts,
        "plans": per_plan,
        "not_downloadable": contents.not_downloadable,
        "debs": len(contents.debs),
        "wheels": len(list((bundle / "wheels").iterdir())),
        "bytes": sum(sizes.values()),
        "fetched_bytes": fetched,
        "build_seconds": round(seconds, 1),
    }


def collect(inventory: str, limit: str, out: Path, extra: Sequence[str], fleet: str = "") -> None:
    """Run playbooks/bundle.yml on the staging hosts ``limit``; with ``fleet``, plan.yml on
    those hosts too (into OUT/fleet, replacing an earlier fleet's reports)."""
    out.mkdir(parents=True, exist_ok=True)
    try:
        playbook = ansible_tool("ansible-playbook")
    except LabError as exc:
        raise BundleError(str(exc)) from exc
    runs = [("bundle.yml", limit, out)]
    # An earlier fleet's reports go even without --fleet: build checks what OUT/fleet holds.
    shutil.rmtree(out / "fleet", ignore_errors=True)
    if fleet:
        runs.append(("plan.yml", fleet, out / "fleet"))
    env = {"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), **os.environ}
    for name, pattern, reports in runs:
        argv = [
            *(playbook, "-i", inventory, "--limit", pattern, str(REPO / "playbooks" / name)),
            *("-e", f"gpuprov_report_dir={reports.resolve()}", *extra),
        ]
        if subprocess.run(argv, check=False, env=env).returncode != 0:
            raise BundleError(f"collecting failed: {' '.join(argv)}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_collect = sub.add_parser("collect", help="list what converged hosts installed")
    p_collect.add_argument("-i", "--inventory", required=True)
    p_collect.add_argument("--limit", required=True, help="the staging hosts (one per plan)")
    p_collect.add_argument("--out", type=Path, required=True)
    p_collect.add_argument(
        "--fleet",
        default="",
        help="the hosts to provision from it: build refuses a plan of theirs no staging host ran",
    )
    p_collect.add_argument("extra", nargs="*", help="more ansible-playbook arguments (after --)")
    p_build = sub.add_parser("build", help="download it all into OUT/bundle")
    p_build.add_argument("--out", type=Path, required=True)
    p_build.add_argument("--python", default=sys.executable, help="the Python whose pip downloads")
    args = parser.parse_args(argv)
    try:
        if args.command == "collect":
            collect(args.inventory, args.limit, args.out, args.extra, args.fleet)
            return 0
        manifest = build(args.out, args.python)
    except BundleError as exc:
        print(f"bundle: {exc}", file=sys.stderr)
        return 1
    print(
        json.dumps(
            {
                k: manifest[k]
                for k in ("plans", "debs", "wheels", "bytes", "fetched_bytes", "build_seconds")
            },
            indent=2,
        )
    )
    for host, missing in manifest["not_downloadable"].items():
        print(
            f"bundle: {host}: no source has {len(missing)} installed packages: "
            f"{', '.join(missing[:10])}",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
