"""Run an Ansible module file as Ansible does (a program reading ANSIBLE_MODULE_ARGS on
stdin) and return its JSON result; for modules whose file name a filter plugin shares, or
whose real behaviour (warnings, check mode) is the point of the test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

MODULE_UTILS = Path(__file__).resolve().parents[2] / "plugins" / "module_utils"
# AnsiballZ ships a module's `ansible.module_utils.X` imports from ansible.cfg's module_utils
# path (plugins/module_utils); a module run as a program here gets the same files under the
# same names, then runs as __main__.
_BOOT = """
import importlib.util, runpy, sys
from pathlib import Path
for util in sorted(Path(sys.argv[1]).glob("*.py")):
    spec = importlib.util.spec_from_file_location("ansible.module_utils." + util.stem, util)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_module(
    path: Path, args: dict[str, Any], timeout: float = 120, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """The module's result (``env``: its environment, else this process's)."""
    proc = subprocess.run(
        [sys.executable, "-c", _BOOT, str(MODULE_UTILS), str(path)],
        input=json.dumps({"ANSIBLE_MODULE_ARGS": args}),
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        env=env,
    )
    assert proc.stdout, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    assert proc.returncode == (1 if result.get("failed") else 0), (proc.stderr, result)
    return result
