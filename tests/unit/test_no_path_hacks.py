"""No sys.path or load-by-path hacks (issue 8 item 6): tests import the code under test by name
(pytest's ``pythonpath`` in pyproject.toml, the action plugins through tests/unit/conftest.py).
The few places that must touch the import path are allow-listed below, each with its reason;
a new one fails here, and so does an allow-listed file that no longer needs its entry."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("tests", "scripts", "plugins", "compat")
HACK = re.compile(r"\bsys\.path\.(insert|append)\b|\bsys\.path\[|\bspec_from_file_location\b")
ALLOWED = {
    # The one loader by path of the unit tests: the action plugins' file names clash with
    # their modules' (plugins/action/gpu_info.py vs plugins/modules/gpu_info.py), so they
    # cannot share pytest's pythonpath; registered as <name>_action.
    "tests/unit/conftest.py": "action plugins by path (name clash with the modules)",
    # Runs on the hosts: the smoke scripts find the role's stdlib-only copy of compat/ next
    # to them (gpuprov is not installed there).
    "scripts/smoke/smokelib.py": "host runtime: the role's copy of compat/ next to the scripts",
    # The sys.path line is inside the code string a clean `python -S -I` subprocess runs, as
    # the host does: it proves the copied compat modules import with the stdlib alone.
    "tests/unit/test_smoke_coverage.py": "a host's interpreter, simulated in a subprocess",
    "tests/unit/test_gpu_probe.py": "smokelib alone on a host, simulated in a subprocess",
    # Controller-side action plugin: Ansible ships plugins/module_utils/gpu_probe.py to hosts
    # as ansible.module_utils.gpu_probe but does not resolve that name for an action plugin
    # on the controller, so the plugin loads the same file by path (one probe, not a copy).
    "plugins/action/gpu_info.py": "Ansible action plugin: the hardware probe's one file",
    # A module run as a program gets its ansible.module_utils imports from
    # plugins/module_utils, as AnsiballZ ships them (the code string its subprocess runs).
    "tests/unit/module_run.py": "a module's module_utils as AnsiballZ ships them",
}


def _python_files() -> list[Path]:
    this = Path(__file__).resolve()  # its examples below are not hacks
    return sorted(
        p
        for d in SCANNED
        for p in (ROOT / d).rglob("*.py")
        if "__pycache__" not in p.parts and p.resolve() != this
    )


def test_the_pattern_catches_each_hack() -> None:
    for line in (
        "sys.path.insert(0, str(ROOT))",
        "sys.path.append('scripts')",
        "sys.path[0:0] = ['x']",
        "spec = importlib.util.spec_from_file_location(name, path)",
    ):
        assert HACK.search(line), line
    assert not HACK.search("import report  # scripts/ is on pytest's pythonpath")


def test_no_import_path_hacks_outside_the_allow_list() -> None:
    found = {
        str(p.relative_to(ROOT))
        for p in _python_files()
        if HACK.search(p.read_text(encoding="utf-8"))
    }
    assert found - set(ALLOWED) == set(), (
        "import the code by name instead (pyproject.toml's pytest pythonpath, or a loader in "
        "tests/unit/conftest.py), or allow-list the file here with its reason"
    )
    assert set(ALLOWED) - found == set(), "stale allow-list entries: remove them"
