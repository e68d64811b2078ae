"""The public API (compat.__init__), the data cache, and the CLI paths that read binaries
(`inspect`, `check --installed`) on torch trees the tests build (tests/unit/fatbin_builders)."""

from __future__ import annotations

import json
import marshal
from pathlib import Path
from typing import Any

import pytest
from fatbin_builders import write_torch

import compat
import compat.data
from compat.cli import main


def test_public_api_wraps_the_resolver() -> None:
    assert compat.lookup("10de:1023")[0]["name"] == "Tesla K40m"
    assert compat.resolve(["K40m"])["gpus"][0]["covered_by"] == "sm_35"
    assert compat.check(["K40m"], "1.2.0+cu100", driver="470.256.02")["compatible"] is True
    assert compat.explain("no kernel image is available for execution on the device")["id"] == (
        "no-kernel-image"
    )
    assert compat.__version__ == "0.1.0"


def test_cache_is_written_then_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("GPU_COMPAT_NO_CACHE", raising=False)
    first = compat.data.load_raw()
    caches = list((tmp_path / "gpuprov").glob("matrix-*.marshal"))
    assert len(caches) == 1
    doc = marshal.loads(caches[0].read_bytes())  # noqa: S302 - the cache this test made
    assert doc["format"] == compat.data.CACHE_FORMAT
    # A cache hit returns the cached tables, not a re-parse: prove it by editing the cache.
    doc["value"]["gpus"][0]["name"] = "edited in cache"
    caches[0].write_bytes(marshal.dumps(doc))
    again = compat.data.load_raw()
    assert again["gpus"][0]["name"] == "edited in cache"
    assert first["gpus"][0]["name"] != "edited in cache"


# The row of compat/data/gpus.yaml, typed from the file.
K40M_ROW = {
    "pci_ids": ["10de:1023"],
    "compute_capability": "3.5",
    "architecture": "kepler",
    "memory_gib": 12,
}


def _gpu(tables: dict[str, Any], name: str) -> dict[str, Any]:
    (row,) = (g for g in tables["gpus"] if g["name"] == name)
    return dict(row)


def test_corrupt_or_unwritable_cache_falls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("GPU_COMPAT_NO_CACHE", raising=False)
    compat.data.load_raw()
    cache = next((tmp_path / "gpuprov").glob("matrix-*.marshal"))
    cache.write_bytes(b"\x00garbage")
    # Re-parsed from YAML (compat/data/gpus.yaml: Tesla K40m, compute capability 3.5) ...
    assert K40M_ROW.items() <= _gpu(compat.data.load_raw(), "Tesla K40m").items()
    # ... and rewritten: a valid cache of format 5 (compat/data.py CACHE_FORMAT) again.
    doc = marshal.loads(cache.read_bytes())  # noqa: S302 - the cache this test made
    assert doc["format"] == 5
    assert K40M_ROW.items() <= _gpu(doc["value"], "Tesla K40m").items()
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # a file: mkdir fails
    assert K40M_ROW.items() <= _gpu(compat.data.load_raw(), "Tesla K40m").items()


def test_editing_a_yaml_file_changes_the_cache_key(tmp_path: Path) -> None:
    root = tmp_path / "data"
    root.mkdir()
    for f in Path(compat.data.DATA_DIR).glob("*.yaml"):
        (root / f.name).write_text(f.read_text())
    files = sorted(root.glob("*.yaml"))
    before = compat.data._cache_path(files)
    (root / "errors.yaml").write_text((root / "errors.yaml").read_text() + "\n# edited\n")
    assert compat.data._cache_path(files) != before


def test_missing_data_dir_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(compat.CompatDataError, match="cannot read the matrix data directory"):
        compat.data.load_raw(tmp_path / "nope")


def test_missing_table_is_a_data_error(tmp_path: Path) -> None:
    (tmp_path / "gpus.yaml").write_text("gpus: []\n")
    with pytest.raises(compat.CompatDataError, match="no 'architectures' table"):
        compat.data.compile_tables(sorted(tmp_path.glob("*.yaml")))


def test_inspect_and_check_installed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch_dir = write_torch(tmp_path / "site-packages")  # claims 2.9.1+cu128; sm_80 sm_86 sm_90
    assert main(["inspect", str(torch_dir)]) == 0
    out = capsys.readouterr().out
    assert "SASS: sm_80 sm_86 sm_90" in out
    assert "vendor code, not coverage" in out
    code = main(["check", "--gpu", "A100", "--installed", str(torch_dir), "--json"])
    verdict = json.loads(capsys.readouterr().out)
    assert code == 0
    assert verdict["measured"] is True
    assert verdict["gpus"][0]["covered_by"] == "sm_80"
    code = main(["check", "--gpu", "K40m", "--installed", str(torch_dir), "--json"])
    verdict = json.loads(capsys.readouterr().out)
    assert code == 1
    assert any("has no kernel image for Tesla K40m" in r for r in verdict["reasons"])


def test_inspect_cpu_build_and_bad_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch_dir = write_torch(tmp_path / "sp", cuda=False)
    assert main(["inspect", str(torch_dir)]) == 0
    assert "CPU-only build" in capsys.readouterr().out
    assert main(["check", "--gpu", "T4", "--installed", str(torch_dir)]) == 1
    assert "CPU-only build" in capsys.readouterr().out
    assert main(["inspect", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err.startswith("gpu-compat: error:")


def test_explain_driver_insufficient_with_host(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "explain",
            "CUDA driver version is insufficient for CUDA runtime version",
            "--gpu",
            "A100",
            "--driver",
            "470.256.02",
            "--json",
        ]
    )
    ans = json.loads(capsys.readouterr().out)
    assert code == 0
    assert any("driver branch 470 runs CUDA up to 11.4" in x for x in ans["matrix"])
    assert ans["plan"]["ok"] is True


def test_explain_no_official_build(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "explain",
            "no kernel image is available for execution on the device",
            "--gpu",
            "K40m",
            "--gpu",
            "RTX 5090",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "every GPU of the host" in out


def test_matrix_human_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matrix"]) == 0
    human = capsys.readouterr().out
    assert human.splitlines()[0].startswith("CC")
    assert main(["matrix", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["compute_capability"] for r in rows} >= {"3.5", "8.0", "9.0"}
    assert main(["matrix", "--gpu", "A100", "--markdown"]) == 0
    assert capsys.readouterr().out.startswith("| torch | variants | Python |")


def test_resolve_human_without_plan(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["resolve", "--gpu", "K40m", "--python", "3.12"]) == 1
    out = capsys.readouterr().out
    assert "no official build runs on this host" in out
    assert "Notes:" in out
    assert main(["resolve", "--gpu", "A100", "--driver", "580.95.05"]) == 0
    assert "(given 580.95.05: full)" in capsys.readouterr().out
    assert main(["resolve", "--gpu", "A100", "--driver", "535.183.01"]) == 0
    assert "(given 535.183.01: minor-version-compatibility)" in capsys.readouterr().out


def test_lookup_json_not_found(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lookup", "0x9999", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["gpus"] == []
