"""Issue 11 item 4: the CLI's rough edges. Each test runs the real CLI on the real matrix
(nothing simulated) or, for --installed, on a torch tree built by the test."""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

import pytest
from fatbin_builders import write_torch

from compat.cli import _parser, main

ROOT = Path(__file__).resolve().parents[2]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_installed_build_version_is_not_doubled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_torch(tmp_path, cuda=False)  # torch 2.9.1+cpu
    code, out, _ = run(capsys, "check", "--gpu", "T4", "--installed", str(tmp_path))
    assert code == 1
    assert out.startswith("NO: torch 2.9.1+cpu does not run on Tesla T4")
    assert "+cpu+cpu" not in out


def test_installed_path_that_is_not_there_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl"
    code, out, err = run(capsys, "check", "--gpu", "T4", "--installed", str(missing))
    assert (code, out) == (2, "")
    assert err == f"gpu-compat: error: {missing}: no such file or directory\n"


def test_partial_name_of_gpus_the_rules_tell_apart_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "check", "--gpu", "40", "--torch", "2.7.1")
    assert code == 2
    assert out == ""
    assert "'40' is ambiguous" in err
    for name in ("Tesla K40m (3.5, branches 295-470)", "Tesla M40 (5.2, branches 334-580)"):
        assert name in err


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("K40", ["Tesla K40c", "Tesla K40m", "Tesla K40s", "Tesla K40st", "Tesla K40t"]),
        ("a100", ["A100 80GB PCIe", "A100-PCIE-40GB", "A100-SXM4-40GB", "A100-SXM4-80GB"]),
    ],
)
def test_partial_name_of_alike_gpus_proceeds_and_names_them(
    capsys: pytest.CaptureFixture[str], query: str, names: list[str]
) -> None:
    code, out, _ = run(capsys, "resolve", "--gpu", query)
    assert code == 0
    assert f"'{query}' matches {', '.join(names)}: the same compute capability" in out


@pytest.mark.parametrize("query", ["Tesla P4", "P4", "K40m", "A100-SXM4-40GB"])
def test_exact_match_wins(capsys: pytest.CaptureFixture[str], query: str) -> None:
    code, out, _ = run(capsys, "resolve", "--gpu", query)
    assert code == 0
    assert "matches" not in out.split("Why:")[1].splitlines()[1]


def test_lookup_lists_every_match(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "lookup", "P4")
    assert code == 0
    names = [line.split("  ")[0] for line in out.splitlines()[2:]]
    assert names[0] == "Tesla P4"  # the exact match first
    assert "Tesla P40" in names


def test_one_driver_branch_floor_per_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "lookup", "Tesla M40")
    span = re.search(r"Maxwell\s+\S+\s+(\d+)-(\d+)", out)
    assert span is not None
    _, check, _ = run(capsys, "check", "--gpu", "Tesla M40", "--torch", "2.7.1", "--driver", "999")
    assert f"allowed are branches {span.group(1)} to {span.group(2)}" in check
    _, table, _ = run(capsys, "matrix", "--markdown")
    assert "| 5.2 | Maxwell |" in table
    assert f"| {span.group(1)}-{span.group(2)} |" in table.split("| 5.2 |")[1].splitlines()[0]


def test_explain_lists_the_known_errors(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "explain", "--list")
    assert code == 0
    assert "  no-kernel-image: No kernel image is available for execution on the device" in out
    code, out, _ = run(capsys, "explain", "hello", "world")
    assert code == 1
    assert "gpu-compat explain --list" in out
    assert "  no-kernel-image: " in out
    code, _, err = run(capsys, "explain")
    assert code == 2
    assert "--list" in err


def test_show_torch(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "torch")
    assert code == 0
    assert out.splitlines()[-1].startswith("2.15.0 ")


def _subcommands() -> set[str]:
    parser = _parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def test_every_gpu_compat_mention_names_a_subcommand_that_exists() -> None:
    """Messages (compat/, scripts/, roles/, plugins/, playbooks/), docs and the README."""
    files = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.split()
    known = _subcommands()
    mentions = []
    for name in files:
        if name.startswith("tests/") or not name.endswith(
            (".py", ".md", ".yml", ".yaml", ".j2", ".sh", ".cfg", ".toml", "Makefile")
        ):
            continue
        text = (ROOT / name).read_text(errors="replace")
        for match in re.finditer(r"gpu-compat ([a-z][a-z_-]*)", text):
            mentions.append((name, match.group(1)))
    assert len(mentions) > 20  # the scan sees the README, roles and scripts
    bad = [(f, word) for f, word in mentions if word not in known]
    assert not bad, f"gpu-compat mentions of no subcommand: {bad}"
