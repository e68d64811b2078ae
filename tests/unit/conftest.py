"""Shared fixtures: the real matrix, and a small synthetic one for rules that the real data
cannot pin down (its values may be corrected as sources improve)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests_mini import mini_tables  # pytest puts tests/unit (no __init__.py) on sys.path

from compat.data import Matrix, load


def _register_action_plugins() -> None:
    """plugins/action/gpu_info.py has the file name of the module it drives (gpu_info), so the
    action plugins cannot share pytest's pythonpath with plugins/modules: each one is
    importable as ``<name>_action`` instead (the one loader by path in the unit tests)."""
    for path in sorted((Path(__file__).resolve().parents[2] / "plugins" / "action").glob("*.py")):
        name = f"{path.stem}_action"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)


# plugins/module_utils/X.py is ansible.module_utils.X to the modules and action plugins that
# import it (ansible.cfg's module_utils; AnsiballZ ships it with the module). Outside Ansible the
# same file is importable as X (pytest's pythonpath): give it its Ansible name too.
for _util in sorted(
    (Path(__file__).resolve().parents[2] / "plugins" / "module_utils").glob("*.py")
):
    sys.modules.setdefault(
        f"ansible.module_utils.{_util.stem}", importlib.import_module(_util.stem)
    )
_register_action_plugins()


# coverage's `patch = ["subprocess"]` (pyproject.toml) starts coverage in every Python child
# that inherits this variable: the host scripts the tests run as programs need that; the
# ansible-playbook, ansible-builder and pip children of some tests run none of the measured
# files: without coverage in them `make unit` took 87 s against 96-99 s (2026-12-05, twice
# side by side).
COVERAGE_CHILDREN = "COVERAGE_PROCESS_CONFIG"


@pytest.fixture(scope="module")
def unmeasured_children() -> Iterator[None]:
    """The module's children start without coverage (its Python of its own is still measured)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(COVERAGE_CHILDREN, raising=False)
        yield


@pytest.fixture(scope="session")
def real() -> Matrix:
    return load()


@pytest.fixture
def mini() -> Matrix:
    return Matrix(mini_tables())
