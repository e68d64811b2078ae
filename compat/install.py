"""Install: the pip and conda commands that install one torch build."""

from __future__ import annotations

from compat.model import Release, Variant

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PIP_INDEX = "https://download.pytorch.org/whl"
FIND_LINKS = "https://download.pytorch.org/whl/torch_stable.html"


def install_commands(release: Release, variant: Variant) -> dict[str, Any]:
    """The pip and conda commands that install this build."""
    pkgs = [f"torch=={release.version}"]
    if release.torchvision:
        pkgs.append(f"torchvision=={release.torchvision}")
    if release.torchaudio:
        pkgs.append(f"torchaudio=={release.torchaudio}")
    out: dict[str, Any] = {"packages": pkgs}
    if release.pip_style == "find_links":
        if variant.name == release.pypi_default:
            out["pip"] = "pip install " + " ".join(pkgs)
            out["index_url"] = None
        else:
            local = [p if p.startswith("torchaudio") else f"{p}+{variant.name}" for p in pkgs]
            out["pip"] = f"pip install {' '.join(local)} -f {FIND_LINKS}"
            out["index_url"] = None
        out["find_links"] = FIND_LINKS
    else:
        out["index_url"] = f"{PIP_INDEX}/{variant.name}"
        out["find_links"] = None
        out["pip"] = f"pip install {' '.join(pkgs)} --index-url {out['index_url']}"
    out["conda"] = _conda_command(release, variant)
    return out


def _conda_command(release: Release, variant: Variant) -> str | None:
    if release.conda_style is None or "conda" not in variant.channels:
        return None
    pkgs = [f"pytorch=={release.version}"]
    if release.torchvision:
        pkgs.append(f"torchvision=={release.torchvision}")
    if release.torchaudio:
        pkgs.append(f"torchaudio=={release.torchaudio}")
    if variant.cuda_text is None:
        return f"conda install {' '.join(pkgs)} cpuonly -c pytorch"
    if release.conda_style == "cudatoolkit":
        return f"conda install {' '.join(pkgs)} cudatoolkit={variant.cuda_text} -c pytorch"
    return f"conda install {' '.join(pkgs)} pytorch-cuda={variant.cuda_text} -c pytorch -c nvidia"
