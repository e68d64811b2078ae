"""gpuprov_venv_install_argv (plugins/filter/gpuprov_venv.py): the background jobs' argv, run
here for real with this interpreter: it makes the venv (with pip) when it is missing, keeps
one that exists, and hands over to the venv's pip, whose exit status is the job's."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gpuprov_venv import CODE, FilterModule, venv_install_argv  # plugins/filter (pythonpath)


def test_the_argv_is_python_c_the_code_the_venv_then_the_arguments() -> None:
    argv = venv_install_argv("/opt/x/venv", "/usr/bin/python3", ["awscli==1.2", "boto3==3.4"])
    assert argv == [
        "/usr/bin/python3",
        "-I",
        "-c",
        CODE,
        "/opt/x/venv",
        "awscli==1.2",
        "boto3==3.4",
    ]
    assert FilterModule().filters()["gpuprov_venv_install_argv"] is venv_install_argv


@pytest.mark.parametrize(
    ("venv", "arguments", "error"),
    [
        ("opt/venv", ["boto3"], ValueError),  # relative: made wherever the job's cwd is
        ("/opt/venv", "boto3", TypeError),  # a string would become one argument per letter
    ],
)
def test_a_relative_venv_or_a_string_of_arguments_is_refused(
    venv: str, arguments: list[str], error: type[Exception]
) -> None:
    with pytest.raises(error, match="gpuprov_venv_install_argv"):
        venv_install_argv(venv, "/usr/bin/python3", arguments)


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)


def test_the_job_makes_the_venv_with_pip_then_runs_its_pip_install(tmp_path: Path) -> None:
    venv = tmp_path / "deep" / "venv"  # missing parents too, as python -m venv makes them
    offline = ["--no-index", "--find-links", str(tmp_path), "gpuprov-no-such-distribution"]
    first = _run(venv_install_argv(str(venv), sys.executable, offline))
    # The venv's own pip ran the install (and failed it: nothing to install from offline).
    assert first.returncode == 1, first.stderr
    assert "gpuprov-no-such-distribution" in first.stderr, first.stderr
    assert (venv / "bin" / "python").exists()
    assert (venv / "bin" / "pip").exists()
    # An existing venv is kept (not made again) and the arguments reach pip as they are.
    marker = venv / "kept"
    marker.write_text("")
    made = (venv / "pyvenv.cfg").stat()  # rewritten by every EnvBuilder.create
    second = _run(venv_install_argv(str(venv), sys.executable, ["--no-index", "pip"]))
    assert second.returncode == 0, second.stderr
    # "Requirement already satisfied: pip in <venv>/lib/...": the venv's own pip installed
    assert f"satisfied: pip in {venv}/lib/" in second.stdout, second.stdout
    assert marker.exists()
    assert (venv / "pyvenv.cfg").stat().st_mtime_ns == made.st_mtime_ns  # not made again
    # A venv that a killed ensurepip left with python and no pip is made again in place.
    for script in (venv / "bin").glob("pip*"):
        script.unlink()
    for installed in (venv / "lib").glob("python3*/site-packages/pip*"):
        shutil.rmtree(installed)
    third = _run(venv_install_argv(str(venv), sys.executable, ["--no-index", "pip"]))
    assert third.returncode == 0, third.stderr
    assert (venv / "bin" / "pip").exists()
    assert marker.exists()
