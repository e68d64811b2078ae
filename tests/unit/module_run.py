"""Run an Ansible module file as Ansible does (a program reading ANSIBLE_MODULE_ARGS on
stdin) and return its JSON result; for modules whose file name a filter plugin shares, or
whose real behaviour (warnings, check mode) is the point of the test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any


def run_module(path: Path, args: dict[str, Any], timeout: float = 120) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(path)],
        input=json.dumps({"ANSIBLE_MODULE_ARGS": args}),
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
    assert proc.stdout, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    assert proc.returncode == (1 if result.get("failed") else 0), (proc.stderr, result)
    return result
