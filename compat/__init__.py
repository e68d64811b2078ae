"""gpuprov's compatibility matrix: GPUs, driver branches, CUDA toolkits and PyTorch builds.

The public API (everything the CLI, the Ansible filters and the scripts use) is this module;
every function reads the one dataset in ``compat/data/``. Heavy modules load lazily so that
the CLI starts fast. The modules behind it, by concept:

- :mod:`compat.model`: value objects (``ComputeCapability``, ``DriverVersion``, matrix records)
- :mod:`compat.gpus`: GPU queries (name, PCI ID, capability, ``gpu_info`` dicts)
- :mod:`compat.branches`: which driver branches drive which GPUs and run which CUDA
- :mod:`compat.evaluation`: the verdict of one build against a host
- :mod:`compat.resolution`: ``resolve`` and ``check``
- :mod:`compat.install`: how a build is installed (as data)
- :mod:`compat.plan`: one host's plan (driver-branch policy, pins, packaged branches)
- :mod:`compat.explainer`: error messages, their causes and fixes
- :mod:`compat.support`: the support table
"""

from __future__ import annotations

from compat.model import (
    CompatDataError,
    CompatError,
    ComputeCapability,
    DriverVersion,
    parse_driver,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from compat.data import Matrix

__version__ = "0.1.0"

# The stdlib-only modules copied to hosts next to the smoke scripts (the gpu_smoke role reads
# this through the gpu_compat_host_modules filter): the fatbin reader measures the arch list
# of the host's torch, and compat.rules is THE sm/compute coverage rule.
HOST_MODULES = ("__init__.py", "model.py", "rules.py", "fatbin.py", "inspect_torch.py")
__all__ = [
    "HOST_MODULES",
    "CompatDataError",
    "CompatError",
    "ComputeCapability",
    "DriverVersion",
    "__version__",
    "allowed_branches",
    "branch_check",
    "check",
    "check_measured",
    "debian_packages",
    "explain",
    "install_for",
    "load",
    "lookup",
    "parse_driver",
    "plan_host",
    "releases_for_gpu",
    "resolve",
    "suggestions",
    "support_rows",
]


def load() -> Matrix:
    """The compatibility matrix (loaded once per process)."""
    from compat.data import load as _load

    return _load()


def lookup(query: str) -> list[dict[str, Any]]:
    """GPUs matching a name, PCI ID or compute capability, as dicts."""
    from compat import gpus

    m = load()
    return [g.to_dict(m.architecture_of(g)) for g in gpus.lookup(m, query)]


def suggestions(query: str, n: int = 3) -> list[str]:
    """GPU names close to a query that matched nothing."""
    from compat import gpus

    return gpus.suggestions(load(), query, n)


def resolve(
    gpus: list[Any], driver: str | None = None, python: str | None = None, channel: str = "pip"
) -> dict[str, Any]:
    """The newest official stack that runs on every GPU of a host (see ``gpu-compat resolve``)."""
    from compat import resolution

    return resolution.resolve(load(), gpus, driver=driver, python=python, channel=channel)


def check(
    gpus: list[Any],
    torch: str,
    driver: str | None = None,
    python: str | None = None,
    channel: str = "pip",
) -> dict[str, Any]:
    """Whether ``torch`` (``V`` or ``V+VARIANT``) runs on these GPUs (``gpu-compat check``)."""
    from compat import resolution

    return resolution.check(load(), gpus, torch, driver=driver, python=python, channel=channel)


def check_measured(
    gpus: list[Any],
    measured: dict[str, Any],
    driver: str | None = None,
    python: str | None = None,
) -> dict[str, Any]:
    """``check`` on the arch list measured from a binary (``gpu-compat check --installed``)."""
    from compat import resolution

    return resolution.check_measured(load(), gpus, measured, driver=driver, python=python)


def explain(text: str, gpus: list[Any] | None = None, driver: str | None = None) -> dict[str, Any]:
    """Cause and fix of a known error message (``gpu-compat explain``)."""
    from compat import explainer

    return explainer.explain(load(), text, gpus or [], driver=driver)


def releases_for_gpu(query: str, channel: str = "pip") -> dict[str, Any]:
    """Every release with a build for one GPU (``gpu-compat matrix --gpu``)."""
    from compat import gpus, resolution

    m = load()
    t = gpus.target(m, query)
    return {
        "gpu": t.to_dict(),
        "channel": channel,
        "releases": [
            {"torch": r.version, "python": list(r.python), "variants": [v.name for v in vs]}
            for r, vs in resolution.releases_for(m, t.cc, channel)
        ],
    }


def support_rows() -> list[dict[str, Any]]:
    """The support table: the newest stack per compute capability (``gpu-compat matrix``)."""
    from compat import support

    return support.support_rows(load())


def branch_check(branch: Any, gpus: list[Any]) -> dict[str, Any]:
    """Whether driver branch ``branch`` drives every GPU: ok, branch, reasons, allowed_branches."""
    from compat import branches

    return branches.branch_check(load(), branch, gpus)


def allowed_branches(gpus: list[Any]) -> list[int]:
    """The driver branches in the matrix that drive every GPU, oldest first."""
    from compat import branches
    from compat import gpus as _gpus

    m = load()
    return branches.driving_branches(m, _gpus.targets(m, list(gpus)))


def plan_host(
    gpus: list[dict[str, Any]],
    packaged_branches: list[Any] | None = None,
    os_name: str | None = None,
    driver_branch: Any = None,
    torch: Any = None,
    channel: str | None = None,
    python: str | None = None,
    expect_gpu: bool = True,
    host: str | None = None,
    sysfs_root: str | None = None,
) -> dict[str, Any]:
    """One host's plan from its ``gpu_info`` GPUs, the OS's packaged driver branches and the
    inventory pins: the versioned document described in docs/design.md ("The host plan")."""
    from compat import plan

    return plan.plan_host(
        load(),
        gpus,
        packaged_branches=packaged_branches or [],
        os_name=os_name,
        driver_branch=driver_branch,
        torch=torch,
        channel=channel,
        python=python,
        expect_gpu=expect_gpu,
        host=host,
        sysfs_root=sysfs_root,
    )


def install_for(
    base: dict[str, Any] | str,
    local_version: bool = False,
    companions: bool = True,
    torchvision: str | None = None,
    torchaudio: str | None = None,
) -> dict[str, Any]:
    """The install document for one host: ``base`` is a plan's ``install`` or a pinned torch
    (``2.5.1`` or ``2.5.1+cu124``); see :func:`compat.install.tailor` for the options."""
    from compat import install, resolution

    doc = resolution.pinned_install(load(), base) if isinstance(base, str) else base
    return install.tailor(
        doc,
        local_version=local_version,
        companions=companions,
        torchvision=torchvision or None,
        torchaudio=torchaudio or None,
    )


def debian_packages() -> dict[str, dict[int, dict[str, list[str]]]]:
    """Debian version -> driver branch -> {kernel, userspace} packages (the nvidia_driver role's
    package map; compat/data/drivers.yaml is its one source)."""
    from compat import branches

    return branches.debian_packages(load())
