"""Install as data (compat/install.py): what pip and conda get, the human commands derived from
it, and the tailoring to a host (companions, local version labels)."""

from __future__ import annotations

import json

import pytest

import compat
from compat.cli import main
from compat.data import Matrix
from compat.install import FIND_LINKS, PIP_INDEX, install_data, tailor
from compat.resolution import image_ref, pinned_install


def test_resolve_json_carries_the_install_document(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["resolve", "--gpu", "Tesla M40", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    inst = plan["install"]
    reqs = [f"torch=={plan['torch']}"]
    reqs += [f"{n}=={plan[n]}" for n in ("torchvision", "torchaudio") if plan[n]]
    assert inst["pip"]["requirements"] == reqs
    assert inst["pip"]["index_url"] == f"https://download.pytorch.org/whl/{plan['variant']}"
    assert inst["cuda"] == plan["cuda"]
    assert inst["commands"]["pip"] == (
        f"pip install {' '.join(reqs)} --index-url {inst['pip']['index_url']}"
    )
    assert set(inst) >= {"pip", "conda", "container", "commands", "cuda", "variant"}


def test_conda_specs_and_channels(mini: Matrix) -> None:
    rel = mini.release("2.0.0")
    assert rel is not None
    cu118 = rel.variant("cu118")
    assert cu118 is not None
    cu118.channels = ("pip", "conda")  # the synthetic row is pip-only
    doc = install_data(rel, cu118)
    assert doc["conda"] == {
        "specs": [
            "pytorch==2.0.0",
            "torchvision==0.15.0",
            "torchaudio==2.0.0",
            "pytorch-cuda=11.8",
        ],
        "channels": ["pytorch", "nvidia"],
    }
    assert doc["commands"]["conda"] == (
        "conda install pytorch==2.0.0 torchvision==0.15.0 torchaudio==2.0.0 pytorch-cuda=11.8 "
        "-c pytorch -c nvidia"
    )
    assert doc["pip"]["index_url"] == f"{PIP_INDEX}/cu118"


def test_find_links_build_and_tailoring(mini: Matrix) -> None:
    doc = pinned_install(mini, "1.5.0+cpu")
    assert doc["pip"]["requirements"] == ["torch==1.5.0+cpu", "torchvision==0.6.0+cpu"]
    assert doc["pip"]["find_links"] == FIND_LINKS
    assert doc["pip"]["index_url"] is None
    only_torch = tailor(doc, companions=False)
    assert only_torch["pip"]["requirements"] == ["torch==1.5.0+cpu"]
    assert only_torch["conda"]["specs"] == ["pytorch==1.5.0", "cpuonly"]
    assert only_torch["want"] == {"torch": "1.5.0+cpu"}
    newer_vision = tailor(doc, torchvision="0.6.1")
    assert newer_vision["pip"]["requirements"] == ["torch==1.5.0+cpu", "torchvision==0.6.1"]


def test_bare_version_pin_installs_the_pypi_default(mini: Matrix) -> None:
    doc = pinned_install(mini, "2.0.0")
    assert doc["variant"] == "cu118"
    assert doc["pip"]["index_url"] is None
    assert doc["pip"]["requirements"] == [
        "torch==2.0.0",
        "torchvision==0.15.0",
        "torchaudio==2.0.0",
    ]
    # No local label on PyPI, so pinning it would ask for a wheel that does not exist there.
    assert tailor(doc, local_version=True)["want"]["torch"] == "2.0.0"
    assert tailor(pinned_install(mini, "2.0.0+cu118"), local_version=True)["want"]["torch"] == (
        "2.0.0+cu118"
    )


def test_image_reference_fields() -> None:
    assert image_ref("nvcr.io/nvidia/pytorch:24.05-py3") == {
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "registry": "nvcr.io",
        "path": "nvidia/pytorch:24.05-py3",
    }
    assert image_ref("pytorch/pytorch:2.5.1")["registry"] == "docker.io"


def test_tailor_refuses_a_missing_document() -> None:
    with pytest.raises(compat.CompatError, match="no install document"):
        compat.install_for({})
