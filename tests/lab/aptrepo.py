"""Re-export of scripts/lab/aptrepo.py for the tests (the builder moved there so that
``scripts/lab.py up`` can serve it to the lab without the test suite).

The repository it builds is a signed STAND-IN for NVIDIA's container toolkit repository
(stub packages with NVIDIA's package names); see scripts/lab/aptrepo.py.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "scripts" / "lab" / "aptrepo.py"
_NAME = "gpuprov_lab_aptrepo"

if _NAME in sys.modules:
    _module = sys.modules[_NAME]
else:
    _spec = importlib.util.spec_from_file_location(_NAME, _PATH)
    assert _spec is not None
    assert _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    sys.modules[_NAME] = _module
    _spec.loader.exec_module(_module)

DEFAULT_VERSIONS = _module.DEFAULT_VERSIONS
build_signed_repo = _module.build_signed_repo
ensure_repo = _module.ensure_repo
gateway_ip = _module.gateway_ip
host_arch = _module.host_arch
recipe_hash = _module.recipe_hash
role_vars = _module.role_vars
selfcheck = _module.selfcheck
serve = _module.serve
shutdown = _module.shutdown

__all__ = [
    "DEFAULT_VERSIONS",
    "build_signed_repo",
    "ensure_repo",
    "gateway_ip",
    "host_arch",
    "recipe_hash",
    "role_vars",
    "selfcheck",
    "serve",
    "shutdown",
]

if __name__ == "__main__":
    sys.exit(_module.main())
