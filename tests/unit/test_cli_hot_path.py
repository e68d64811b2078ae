"""The CLI's hot path (issue 19 item 5): a plain `gpu-compat resolve` reads the matrix and the
Horovod data from the cache in the user's cache directory, without argparse, PyYAML or
packaging, and prints exactly what the slow path prints. Times are measured by
scripts/bench_cli.py, never asserted here."""

from __future__ import annotations

import marshal
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

import compat.data
from compat import horovod
from compat.cli import _parser, main
from compat.cliargs import resolve_args

ROOT = Path(__file__).resolve().parents[2]
# A plain resolve line, then every module it imported (stderr's last line).
_PROBE = (
    "import sys\n"
    "from compat.cli import main\n"
    "main(sys.argv[1:])\n"
    "print(' '.join(sorted(sys.modules)), file=sys.stderr)\n"
)
# What makes the CLI slow to start: none of it may come back on the hot path.
_HEAVY = {"argparse", "json", "packaging", "pathlib", "typing", "yaml"}
# Beyond compat's own and the built-in modules: none (the cache key is hashed in Python).
_EXTENSIONS: set[str] = set()


def _modules(env: dict[str, str], cwd: Path, *argv: str) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        check=True,
    )
    return set(proc.stderr.splitlines()[-1].split())


def test_hot_path_imports_nothing_but_compat_and_builtins(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    env.pop("GPU_COMPAT_NO_CACHE", None)
    env.pop("GPU_COMPAT_DATA", None)
    bare = subprocess.run(
        [sys.executable, "-c", "import sys; print(' '.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=True,
    ).stdout.split()
    cold = _modules(env, tmp_path, "resolve", "--gpu", "K40m")
    # The first run compiles the YAML into the cache: the probe sees such imports.
    assert {"yaml", "packaging"} <= cold
    warm = set(_modules(env, tmp_path, "resolve", "--gpu", "K40m", "--gpu", "M40")) - set(bare)
    assert not warm & _HEAVY, sorted(warm & _HEAVY)
    other = {m for m in warm if m.partition(".")[0] != "compat"} - _EXTENSIONS
    assert other <= set(sys.builtin_module_names), sorted(other - set(sys.builtin_module_names))


def _answers(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    compat.data._MATRIX = None  # a new process each time, as on the command line
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


_COMMANDS = {
    "resolve": ["resolve", "--gpu", "K40m"],
    "resolve-json": ["resolve", "--gpu", "K40m", "--json"],
    "resolve-host": ["resolve", "--gpu=A100", "--gpu", "T4", "--driver", "535.183.01"],
    "resolve-conda": ["resolve", "--gpu", "H100", "--channel", "conda", "--python", "3.11"],
    "resolve-none": ["resolve", "--gpu", "K40m", "--python", "3.11"],
    "resolve-bad": ["resolve", "--gpu", "T4", "--python", "9.9"],
    "check": ["check", "--gpu", "K40m", "--torch", "1.7.1+cu101"],
    "explain-horovod": ["explain", "horovod with torch 1.13", "--json"],
}


@pytest.mark.parametrize("argv", list(_COMMANDS.values()), ids=list(_COMMANDS))
def test_same_answer_without_cache_cold_and_warm(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    argv: list[str],
) -> None:
    monkeypatch.setattr(compat.data, "_MATRIX", None)
    monkeypatch.setenv("GPU_COMPAT_NO_CACHE", "1")
    parsed = _answers(capsys, argv)
    monkeypatch.delenv("GPU_COMPAT_NO_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert _answers(capsys, argv) == parsed  # cold: compiles and writes the cache
    kinds = {p.name.split("-")[0] for p in (tmp_path / "gpuprov").iterdir()}
    assert "matrix" in kinds
    assert kinds <= {"horovod", "matrix"}  # and no temporary file left behind
    assert _answers(capsys, argv) == parsed  # warm: from the cache


def test_an_unwritable_cache_dir_still_answers(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(compat.data, "_MATRIX", None)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "ok"))
    argv = _COMMANDS["resolve"]
    expected = _answers(capsys, argv)
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # makedirs fails under a file
    assert _answers(capsys, argv) == expected
    assert _answers(capsys, argv) == expected
    assert blocked.read_text() == ""


def _edit(path: Path, old: str, new: str) -> None:
    """Same size, new content, a later modification time (however coarse the clock)."""
    text = path.read_text()
    assert len(old) == len(new)
    assert text.count(old) == 1
    before = path.stat().st_mtime_ns
    path.write_text(text.replace(old, new))
    os.utime(path, ns=(before + 2_000_000_000, before + 2_000_000_000))


def test_an_edited_yaml_file_is_read_again(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    shutil.copytree(compat.data.DATA_DIR, data)
    monkeypatch.setenv("GPU_COMPAT_DATA", str(data))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("GPU_COMPAT_NO_CACHE", raising=False)
    monkeypatch.setattr(compat.data, "_MATRIX", None)
    argv = _COMMANDS["resolve"]
    _, first, _ = _answers(capsys, argv)
    assert _answers(capsys, argv)[1] == first  # from the cache
    assert "Tesla K40m (sm_35)" in first
    assert "launched with torchrun or mpirun" in first
    _edit(data / "gpus.yaml", 'name: "Tesla K40m"', 'name: "Tesla K4Om"')
    _edit(data / "horovod.yaml", "launched with torchrun", "launched with TORCHRUN")
    code, again, _ = _answers(capsys, argv)
    assert code == 0
    assert "Tesla K4Om (sm_35)" in again
    assert "launched with TORCHRUN or mpirun" in again
    assert again.replace("K4Om", "K40m").replace("TORCHRUN", "torchrun") == first


def test_a_cache_entry_of_another_stamp_is_not_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("GPU_COMPAT_NO_CACHE", raising=False)
    files = [horovod.DATA_FILE]
    assert compat.data.cached("test", files, lambda: "built") == "built"
    assert compat.data.cached("test", files, lambda: "again") == "built"  # a hit
    cache = next((tmp_path / "gpuprov").glob("test-*.marshal"))
    doc = marshal.loads(cache.read_bytes())  # noqa: S302 - the cache this test made
    doc["stamp"] += "\nsomething else"  # as if two stamps had one file name
    cache.write_bytes(marshal.dumps(doc))
    assert compat.data.cached("test", files, lambda: "rebuilt") == "rebuilt"


_LINES = {
    "plain": ["resolve", "--gpu", "K40m"],
    "equals": ["resolve", "--gpu=K40m", "--json"],
    "host": ["resolve", "--json", "--gpu", "A100", "--gpu", "T4", "--driver", "535.183.01"],
    "all": ["resolve", "--gpu", "H100", "--python", "3.11", "--channel=conda", "--python=3.12"],
    "spaces": ["resolve", "--gpu", "Tesla K40m", "--channel", "pip"],
}
_OTHERS = {
    "no-gpu": ["resolve"],
    "json-only": ["resolve", "--json"],
    "abbrev": ["resolve", "--gp", "K40m"],
    "abbrev-json": ["resolve", "--gpu", "K40m", "--js"],
    "help": ["resolve", "--gpu", "K40m", "-h"],
    "positional": ["resolve", "--gpu", "K40m", "extra"],
    "dashdash": ["resolve", "--gpu", "K40m", "--", "x"],
    "dash-value": ["resolve", "--gpu", "-x"],
    "missing-value": ["resolve", "--gpu", "K40m", "--driver"],
    "empty-value": ["resolve", "--gpu="],
    "bad-choice": ["resolve", "--gpu", "K40m", "--channel", "apt"],
    "json-value": ["resolve", "--json=1", "--gpu", "K40m"],
    "other-command": ["check", "--gpu", "K40m", "--torch", "1.2.0"],
    "top-help": ["--help"],
    "empty": [],
}


@pytest.mark.parametrize("argv", list(_LINES.values()), ids=list(_LINES))
def test_plain_resolve_lines_skip_argparse_with_its_answer(argv: list[str]) -> None:
    assert resolve_args(argv) == vars(_parser().parse_args(argv))


@pytest.mark.parametrize("argv", list(_OTHERS.values()), ids=list(_OTHERS))
def test_every_other_line_is_left_to_argparse(argv: list[str]) -> None:
    assert resolve_args(argv) is None


_SPECS = [">=1.5,<2.1", ">=2.1", "<2", "==2.1", "!=2.1.0", ">1.13", "<=1.13.1", "<2.1.0.0", ""]
_TORCHES = ["1.3.0", "1.5", "1.5.0", "2.0.1", "2.1", "2.1.0", "2.1.0.0", "2.1.1", "2.10", "2"]


@pytest.mark.parametrize("spec", _SPECS, ids=[s or "any" for s in _SPECS])
def test_cached_specifiers_judge_as_packaging_does(spec: str) -> None:
    clauses = horovod._clauses(spec)
    assert clauses is not None
    for torch in _TORCHES:
        assert horovod._matches(torch, spec, clauses) is (Version(torch) in SpecifierSet(spec))


@pytest.mark.parametrize("spec", ["==2.*", "~=2.1", ">=2.1rc1", "===2.1", ">=2.1.dev0"], ids=str)
def test_other_specifiers_are_left_to_packaging(spec: str) -> None:
    assert horovod._clauses(spec) is None
    for torch in [*_TORCHES, "2.1.0rc1"]:
        assert horovod._matches(torch, spec, None) is (Version(torch) in SpecifierSet(spec))


def test_installed_script_is_ours_without_re() -> None:
    """The installed `gpu-compat` is bin/gpu-compat, not pip's console-script wrapper, whose
    `import re` alone costs about 1.6x a bare start (issue 19; the ratio is measured by
    scripts/bench_cli.py). A [project.scripts] entry would install the wrapper and fail here."""
    installed = (Path(sys.executable).parent / "gpu-compat").read_text().splitlines()
    ours = (ROOT / "bin" / "gpu-compat").read_text().splitlines()
    assert installed[1:] == ours[1:], "the installed gpu-compat is not bin/gpu-compat"
    imports = [ln for ln in ours if ln.startswith(("import ", "from "))]
    assert imports == ["import sys", "from compat.cli import main"], imports
