"""gpuprov_venv_install_argv (plugins/filter/gpuprov_venv.py): the background jobs' argv, run
here for real with this interpreter (gpuprov_pip_download_argv's job: test_pip_download_argv.py;
the argv shape of both here): it makes the venv (with pip) when it is missing, keeps
one that exists, and hands over to the venv's pip, whose exit status is the job's."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from gpuprov_venv import (  # plugins/filter (pythonpath)
    CODE,
    DOWNLOAD_CODE,
    FilterModule,
    pip_download_argv,
    venv_install_argv,
)


@pytest.mark.parametrize(
    ("name", "function", "code"),
    [
        ("gpuprov_venv_install_argv", venv_install_argv, CODE),
        ("gpuprov_pip_download_argv", pip_download_argv, DOWNLOAD_CODE),
    ],
)
def test_the_argv_is_python_c_the_code_the_directory_then_the_arguments(
    name: str, function: Callable[[str, str, list[str]], list[str]], code: str
) -> None:
    argv = function("/opt/x/venv", "/usr/bin/python3", ["awscli==1.2", "boto3==3.4"])
    assert argv == [
        "/usr/bin/python3",
        "-I",
        "-c",
        code,
        "/opt/x/venv",
        "awscli==1.2",
        "boto3==3.4",
    ]
    assert FilterModule().filters()[name] is function
    # A relative directory would be made wherever the job's cwd is; a string of arguments
    # would become one argument per letter.
    with pytest.raises(ValueError, match=name):
        function("opt/venv", "/usr/bin/python3", ["boto3"])
    with pytest.raises(TypeError, match=name):
        function("/opt/venv", "/usr/bin/python3", "boto3")  # type: ignore[arg-type]


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
