"""compat/horovod.py and compat/data/horovod.yaml: where Horovod builds, and the notes of
`gpu-compat resolve` / `explain` that point at DDP/torchrun. The data's values are checked
against the measurement recorded in the data (the exact compiler error), not recomputed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from compat import horovod
from compat.model import CompatDataError


def test_the_lab_torch_does_not_build_and_the_error_is_the_measured_one() -> None:
    s = horovod.status("2.13.0+cpu")
    assert s["builds"] is False
    assert s["horovod"] == "0.28.1"
    assert "#error C++17 or later compatible compiler is required to use PyTorch" in s["reason"]
    assert "measured" in s["source"]


@pytest.mark.parametrize(
    ("torch", "builds"),
    [("2.0.1", True), ("1.13.1+cu117", True), ("2.1.0", False), ("1.4.0", None)],
)
def test_the_c17_boundary_is_torch_2_1(torch: str, builds: bool | None) -> None:
    assert horovod.status(torch)["builds"] is builds


def test_no_or_bad_torch_version_is_unknown_not_a_guess() -> None:
    assert horovod.status(None)["builds"] is None
    assert horovod.status("nightly")["reason"] == "not a torch version: 'nightly'"


def test_note_names_the_supported_path() -> None:
    text = horovod.note("2.13.0")
    assert "does not build against torch 2.13.0" in text
    assert "unmaintained since 0.28.1" in text
    assert "torchrun or mpirun" in text


def test_explain_answers_horovod_questions_only() -> None:
    assert horovod.explain("CUDA error: out of memory") is None
    ans = horovod.explain("HOROVOD_WITH_PYTORCH=1 pip install horovod fails with torch 2.4.1")
    assert ans is not None
    assert ans["recognised"]
    assert ans["parsed"] == {"torch": "2.4.1"}
    assert ans["fixes"][0].startswith("use torch.distributed DDP")


def test_malformed_data_names_the_file_and_the_row(tmp_path: Path) -> None:
    doc = yaml.safe_load(Path(horovod.DATA_FILE).read_text())
    del doc["horovod"]["builds"][1]["source"]
    bad = tmp_path / "horovod.yaml"
    bad.write_text(yaml.safe_dump(doc))
    with pytest.raises(CompatDataError, match=r"horovod\.yaml: builds\[1\] lacks source"):
        horovod.load(str(bad))


def test_cli_resolve_and_explain_carry_the_note() -> None:
    resolve = subprocess.run(
        [sys.executable, "-m", "compat", "resolve", "--gpu", "T4", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    notes = json.loads(resolve.stdout)["notes"]
    assert any("Horovod" in n and "torchrun" in n for n in notes), notes
    explain = subprocess.run(
        [sys.executable, "-m", "compat", "explain", "should we use Horovod with torch 2.13?"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert explain.returncode == 0
    assert "Horovod (unmaintained since 0.28.1)" in explain.stdout
