"""Install: how one torch build is installed, as data (requirements, index, conda specs and
channels) with the human command strings derived from that data.

The document (``install`` in ``resolve --json`` and in the host plan)::

    variant:    the build's variant ("cu124", "cpu")
    packages:   {torch: "2.5.1", torchvision: "0.20.1", torchaudio: "2.5.1"} (plain versions)
    local_label: the local version label its wheels carry ("cu124"), null on plain PyPI
    pip:        {requirements: [name==version], index_url, extra_index_urls: [], find_links}
    conda:      {specs: [...], channels: [...]} or null (no conda build)
    container:  {image, registry, path} or null (set by the resolution when an NGC image fits)
    cuda:       the build's CUDA version ("12.4") or null (CPU build)
    commands:   {pip: "pip install ...", conda: "conda install ..." or null}
"""

from __future__ import annotations

from compat.model import CompatError, Release, Variant

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PIP_INDEX = "https://download.pytorch.org/whl"
FIND_LINKS = "https://download.pytorch.org/whl/torch_stable.html"


def install_data(release: Release, variant: Variant) -> dict[str, Any]:
    """The install document of this build (see the module docstring)."""
    pip = _pip(release, variant)
    conda = _conda(release, variant)
    plain = release.pip_style == "find_links" and variant.name == release.pypi_default
    return {
        "variant": variant.name,
        "packages": dict(_packages(release, "torch")),
        "local_label": None if plain else variant.name,
        "pip": pip,
        "conda": conda,
        "container": None,
        "cuda": variant.cuda_text,
        "commands": {"pip": pip_command(pip), "conda": conda_command(conda)},
    }


def install_commands(release: Release, variant: Variant) -> dict[str, str | None]:
    """The pip and conda commands that install this build (for people)."""
    commands: dict[str, str | None] = install_data(release, variant)["commands"]
    return commands


def pip_command(pip: dict[str, Any]) -> str:
    """``pip install ...`` from the pip part of the install document."""
    words = ["pip", "install", *pip["requirements"]]
    if pip["index_url"]:
        words += ["--index-url", pip["index_url"]]
    words += [f"--extra-index-url={u}" for u in pip["extra_index_urls"]]
    if pip["find_links"]:
        words += ["-f", pip["find_links"]]
    return " ".join(words)


def conda_command(conda: dict[str, Any] | None) -> str | None:
    """``conda install ...`` from the conda part of the install document."""
    if conda is None:
        return None
    channels = [w for c in conda["channels"] for w in ("-c", c)]
    return " ".join(["conda", "install", *conda["specs"], *channels])


def _packages(release: Release, torch_name: str) -> list[tuple[str, str]]:
    pkgs = [(torch_name, release.version)]
    if release.torchvision:
        pkgs.append(("torchvision", release.torchvision))
    if release.torchaudio:
        pkgs.append(("torchaudio", release.torchaudio))
    return pkgs


def _pip(release: Release, variant: Variant) -> dict[str, Any]:
    pkgs = _packages(release, "torch")
    index_url = find_links = None
    if release.pip_style != "find_links":
        index_url = f"{PIP_INDEX}/{variant.name}"
        reqs = [f"{n}=={v}" for n, v in pkgs]
    elif variant.name == release.pypi_default:
        reqs = [f"{n}=={v}" for n, v in pkgs]  # plain PyPI
    else:
        # The old find-links wheels carry the variant as a local version; torchaudio did not.
        reqs = [f"{n}=={v}" if n == "torchaudio" else f"{n}=={v}+{variant.name}" for n, v in pkgs]
        find_links = FIND_LINKS
    return {
        "requirements": reqs,
        "index_url": index_url,
        "extra_index_urls": [],
        "find_links": find_links,
    }


def _conda(release: Release, variant: Variant) -> dict[str, Any] | None:
    if release.conda_style is None or "conda" not in variant.channels:
        return None
    specs = [f"{n}=={v}" for n, v in _packages(release, "pytorch")]
    channels = ["pytorch"]
    if variant.cuda_text is None:
        specs.append("cpuonly")
    elif release.conda_style == "cudatoolkit":
        specs.append(f"cudatoolkit={variant.cuda_text}")
    else:
        specs.append(f"pytorch-cuda={variant.cuda_text}")
        channels.append("nvidia")
    return {"specs": specs, "channels": channels}


def pypi_install(release: Release, variant: Variant) -> dict[str, Any]:
    """The install document of the PyPI default build (``pip install torch==V``, no index)."""
    doc = install_data(release, variant)
    doc["local_label"] = None
    doc["pip"] = dict(doc["pip"], index_url=None, find_links=None)
    doc["pip"]["requirements"] = [f"{n}=={v}" for n, v in doc["packages"].items()]
    doc["commands"] = {"pip": pip_command(doc["pip"]), "conda": conda_command(doc["conda"])}
    return doc


def tailor(
    doc: dict[str, Any],
    local_version: bool = False,
    companions: bool = True,
    torchvision: str | None = None,
    torchaudio: str | None = None,
) -> dict[str, Any]:
    """An install document as one host wants it: companion versions overridden or dropped,
    the local version label pinned (``torch==2.5.1+cu124``) for wheelhouses and multi-variant
    indexes. Adds ``want`` ({name: requirement version}) for the installed-version check."""
    if not doc or not doc.get("packages"):
        raise CompatError("no install document: the plan has no build (see its reasons)")
    packages = dict(doc["packages"])
    for name, override in (("torchvision", torchvision), ("torchaudio", torchaudio)):
        if override:
            packages[name] = override
        if not companions:
            packages.pop(name, None)
    label = doc.get("local_label")
    given = {r.partition("==")[0]: r.partition("==")[2] for r in doc["pip"]["requirements"]}
    want = {}
    for name, version in packages.items():
        if local_version and label:
            want[name] = f"{version}+{label}"
        elif given.get(name, "").partition("+")[0] == version:
            want[name] = given[name]  # the document's own pin (find-links wheels carry a label)
        else:
            want[name] = version
    pip = dict(doc["pip"], requirements=[f"{n}=={v}" for n, v in want.items()])
    conda = doc.get("conda")
    if conda is not None:
        extra = [s for s in conda["specs"] if "==" not in s]
        specs = [f"{'pytorch' if n == 'torch' else n}=={v}" for n, v in packages.items()]
        conda = dict(conda, specs=specs + extra)
    return dict(
        doc,
        packages=packages,
        want=want,
        pip=pip,
        conda=conda,
        commands={"pip": pip_command(pip), "conda": conda_command(conda)},
    )
