# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Ansible filter: the argv of a background job that makes a virtual environment (unless it
exists) and then installs into it with its own pip (roles/pytorch, roles/model_serving and
roles/object_storage, tasks/background-start.yml; issue 19)."""

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


def venv_install_argv(venv: str, python: str, arguments: Sequence[str]) -> list[str]:
    """``python -I -c CODE venv arguments...``; refuses a relative path or a string for the list."""
    if not venv.startswith("/"):
        raise ValueError(f"gpuprov_venv_install_argv: the environment must be absolute: {venv!r}")
    if isinstance(arguments, str):
        raise TypeError(f"gpuprov_venv_install_argv: arguments must be a list: {arguments!r}")
    return [python, "-I", "-c", CODE, venv, *map(str, arguments)]


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"gpuprov_venv_install_argv": venv_install_argv}
