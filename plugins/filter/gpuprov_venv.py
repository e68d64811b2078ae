# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Ansible filters: the argv of a background job that makes a virtual environment (unless it
exists) and then installs into it with its own pip (roles/pytorch, roles/model_serving and
roles/object_storage, tasks/background-start.yml), and of one that downloads packages for an
environment that may not exist yet (roles/jupyterlab, tasks/background-start.yml; issue 19)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

DOCUMENTATION = r"""
name: gpuprov_venv_install_argv
short_description: One argv that makes a venv if it is missing, then runs its pip install
description:
  - A role that starts a long pip install in the background (an async command under a lock)
    made the environment first with a task of its own (C(python3 -m venv), about 3 s of
    ensurepip on the lab), which the play waited for. This argv does both in the job, as
    C(python -I -c <code> <venv> <arg>...) (isolated, so that no module in the job's working
    directory or the environment's PYTHON variables reaches it), where the code makes
    C(<venv>) as C(python -m venv) does (with pip, symlinks on POSIX) unless
    C(<venv>/bin/pip) exists (a venv that a killed ensurepip left without pip is made again
    in place), then replaces itself with
    C(<venv>/bin/pip install --disable-pip-version-check <arg>...), so the job's exit status
    and output are pip's.
  - No shell, so every argument stays one argv element.
positional: python, arguments
options:
  _input:
    description: The environment's directory (absolute).
    type: str
    required: true
  python:
    description: The interpreter that makes the environment (e.g. /usr/bin/python3).
    type: str
    required: true
  arguments:
    description: What follows C(pip install) (requirements, options).
    type: list
    elements: str
    required: true
"""

# Runs on the host as `python -I -c CODE VENV ARG...`: stdlib only, any Python 3.
CODE = """\
import os, sys, venv
target = sys.argv[1]
pip = os.path.join(target, "bin", "pip")
if not os.path.exists(pip):
    venv.EnvBuilder(with_pip=True, symlinks=os.name != "nt").create(target)
os.execv(pip, [pip, "install", "--disable-pip-version-check"] + sys.argv[2:])
"""


# The download job (gpuprov_pip_download_argv). Its own pip, in a scratch venv that the base
# interpreter makes (the environment the packages are for may not exist yet, and Debian's
# python3 has no pip of its own), downloads into <dir>/wheels, emptied first, under a lock
# file in <dir> that it holds to the end: a second job (an interrupted run's, still going)
# exits with DOWNLOAD_BUSY and changes nothing of it. The scratch venv goes at the end, and
# so do the wheels of a download that failed: what stays is the lock file, and the wheels of
# a download that ended well (the install phase removes the directory once it used them).
DOWNLOAD_BUSY = 75  # EX_TEMPFAIL
DOWNLOAD_CODE = f"""\
import fcntl, os, shutil, subprocess, sys, venv
top = sys.argv[1]
os.makedirs(top, mode=0o700, exist_ok=True)
lock = os.open(os.path.join(top, "lock"), os.O_RDWR | os.O_CREAT, 0o600)
try:
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    sys.exit({DOWNLOAD_BUSY})
os.chmod(top, 0o700)
wheels, scratch = os.path.join(top, "wheels"), os.path.join(top, "pip")
shutil.rmtree(wheels, ignore_errors=True)
rc = 1
try:
    venv.EnvBuilder(with_pip=True, symlinks=True, clear=True).create(scratch)
    pip = os.path.join(scratch, "bin", "pip")
    argv = [pip, "download", "--disable-pip-version-check", "--dest", wheels] + sys.argv[2:]
    rc = subprocess.call(argv)
finally:
    shutil.rmtree(scratch, ignore_errors=True)
    if rc != 0:
        shutil.rmtree(wheels, ignore_errors=True)
sys.exit(rc)
"""


def _job_argv(
    name: str, what: str, code: str, path: str, python: str, arguments: Sequence[str]
) -> list[str]:
    """``python -I -c code path arguments...`` for filter ``name``; refuses a relative ``path``
    (it would be made wherever the job's working directory is) or a string for the list (one
    argument per letter)."""
    if not path.startswith("/"):
        raise ValueError(f"{name}: the {what} must be absolute: {path!r}")
    if isinstance(arguments, str):
        raise TypeError(f"{name}: arguments must be a list: {arguments!r}")
    return [python, "-I", "-c", code, path, *map(str, arguments)]


def venv_install_argv(venv: str, python: str, arguments: Sequence[str]) -> list[str]:
    """``python -I -c CODE venv arguments...``; refuses a relative path or a string for the list."""
    return _job_argv("gpuprov_venv_install_argv", "environment", CODE, venv, python, arguments)


def pip_download_argv(top: str, python: str, arguments: Sequence[str]) -> list[str]:
    """``python -I -c DOWNLOAD_CODE top arguments...``: a job that downloads what
    ``pip install arguments...`` would install into ``top``/wheels, with a pip of ``python``'s
    (a scratch venv in ``top``/pip, made afresh and removed at the end), so that an install
    into an environment of that Python can later run with ``--no-index --find-links
    top/wheels``. ``top`` is made root's alone (0700); exit status DOWNLOAD_BUSY when another
    job holds ``top``/lock (nothing changed), else pip's (a failed download leaves no
    wheels). Refuses what venv_install_argv refuses."""
    name = "gpuprov_pip_download_argv"
    return _job_argv(name, "directory", DOWNLOAD_CODE, top, python, arguments)


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "gpuprov_venv_install_argv": venv_install_argv,
            "gpuprov_pip_download_argv": pip_download_argv,
        }
