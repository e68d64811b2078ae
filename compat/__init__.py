"""gpuprov's compatibility matrix: GPUs, driver branches, CUDA toolkits and PyTorch builds.

The public API is small; every function reads the one dataset in ``compat/data/``.
Heavy modules load lazily so that the CLI starts fast.
"""

from __future__ import annotations

from compat.model import CompatDataError, CompatError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from compat.data import Matrix

__version__ = "0.1.0"
__all__ = [
    "CompatDataError",
    "CompatError",
    "__version__",
    "check",
    "explain",
    "load",
    "lookup",
    "resolve",
]


def load() -> Matrix:
    """The compatibility matrix (loaded once per process)."""
    from compat.data import load as _load

    return _load()


def lookup(query: str) -> list[dict[str, Any]]:
    """GPUs matching a name, PCI ID or compute capability, as dicts."""
    from compat import resolver

    m = load()
    return [g.to_dict(m.architecture_of(g)) for g in resolver.lookup(m, query)]


def resolve(
    gpus: list[Any], driver: str | None = None, python: str | None = None, channel: str = "pip"
) -> dict[str, Any]:
    """The newest official stack that runs on every GPU of a host (see ``gpu-compat resolve``)."""
    from compat import resolver

    return resolver.resolve(load(), gpus, driver=driver, python=python, channel=channel)


def check(
    gpus: list[Any],
    torch: str,
    driver: str | None = None,
    python: str | None = None,
    channel: str = "pip",
) -> dict[str, Any]:
    """Whether ``torch`` (``V`` or ``V+VARIANT``) runs on these GPUs (``gpu-compat check``)."""
    from compat import resolver

    return resolver.check(load(), gpus, torch, driver=driver, python=python, channel=channel)


def explain(text: str, gpus: list[Any] | None = None, driver: str | None = None) -> dict[str, Any]:
    """Cause and fix of a known error message (``gpu-compat explain``)."""
    from compat import resolver

    return resolver.explain(load(), text, gpus or [], driver=driver)
