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
- :mod:`compat.containers`: NGC containers and how sure their GPU floors are
- :mod:`compat.cudalibs`: the CUDA libraries (cuDNN, cuBLAS, ...) of an install, measured
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
    "compute_capabilities",
    "debian_packages",
    "explain",
    "horovod_explain",
    "horovod_note",
    "inspect",
    "install_for",
    "known_errors",
    "load",
    "lookup",
    "parse_driver",
    "perf_floors",
    "plan_host",
    "releases_for_gpu",
    "resolve",
    "serving_onnx",
    "serving_onnx_runtimes",
    "serving_torchserve",
    "serving_triton",
    "show",
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
    return [g.to_dict(m.architecture_of(g)) for g in gpus.lookup(m, query, every=True)]


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


def horovod_note(torch: str | None) -> str:
    """The one line on Horovod that ``gpu-compat resolve`` adds to a plan's notes."""
    from compat import horovod

    return horovod.note(torch)


def horovod_explain(text: str) -> dict[str, Any] | None:
    """The answer to an error message or question about Horovod, None when it is not one."""
    from compat import horovod

    return horovod.explain(text)


def compute_capabilities(gpus: list[Any]) -> list[str]:
    """The compute capability ("X.Y") of each GPU: a ``gpu_info`` dict (its
    ``compute_capability``, else its ``pci_id`` or ``name``) or a name or PCI ID."""
    out: list[str] = []
    for g in gpus:
        if isinstance(g, dict) and g.get("compute_capability"):
            out.append(str(g["compute_capability"]))
            continue
        query = (g.get("pci_id") or g.get("name")) if isinstance(g, dict) else g
        found = lookup(str(query))
        if not found:
            raise CompatError(f"unknown GPU {query!r} (gpu-compat lookup NAME)")
        out.append(str(found[0]["compute_capability"]))
    return out


def serving_onnx(
    torch: str, onnxruntime: str, opset: int | None = None, exporter: str = "torchscript"
) -> dict[str, Any]:
    """Whether onnxruntime runs the ONNX opset that torch exports (``gpu-compat serving onnx``):
    ok (True, False or None when unknown), opset, reasons."""
    from compat import serving

    return serving.onnx_check(serving.load(), torch, onnxruntime, opset, exporter)


def serving_triton(
    driver: str | None,
    gpus: list[Any],
    forward_compat: bool = False,
    tag: str | None = None,
) -> dict[str, Any]:
    """The tritonserver images that run on a host (``gpu-compat serving triton``): pick (the
    newest that runs, or None) and images (every verdict, with reasons)."""
    from compat import serving

    ccs = compute_capabilities(gpus)
    tables = serving.load()
    if tag:
        verdicts = [serving.triton_check(tables, tag, driver, ccs, forward_compat)]
    else:
        verdicts = serving.triton_images(tables, driver, ccs, forward_compat)
    return {"pick": next((v for v in verdicts if v["ok"]), None), "images": verdicts}


def serving_onnx_runtimes() -> list[dict[str, Any]]:
    """The onnxruntime releases and the highest ONNX opset each runs (compat/data/onnx.yaml)."""
    from compat import serving

    rows = serving.load()["onnx.yaml"]["runtimes"]
    return [{"onnxruntime": r["onnxruntime"], "max_opset": r["max_opset"]} for r in rows]


def serving_torchserve(version: str, torch: str, java: int | None = None) -> dict[str, Any]:
    """Whether a TorchServe release runs with this torch (and Java major): ok, reasons."""
    from compat import serving

    return serving.torchserve_check(serving.load(), version, torch, java)


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
            for r, vs in resolution.releases_for(m, t, channel)
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


def inspect(path: str, gpus: list[Any] | None = None) -> dict[str, Any]:
    """Measure torch's arch list and every CUDA library (cuDNN, cuBLAS, ...) at ``path`` (a
    wheel, a directory of wheels, an install or a .so) and judge both for each GPU
    (``gpu-compat inspect``): ``torch`` (None when the path holds no torch), ``libraries``,
    ``gpus`` [{..., ``torch``, ``libraries``, ``weakest_link``}] and ``ok``."""
    from compat import cudalibs, rules
    from compat import gpus as _gpus
    from compat.inspect_torch import InspectError, inspect_path

    m = load()
    tgts = _gpus.targets(m, list(gpus or []))
    try:
        libs = cudalibs.inspect_libraries(path)
    except cudalibs.LibraryError as exc:
        raise CompatError(str(exc)) from exc
    try:
        measured: dict[str, Any] | None = inspect_path(path).to_dict()
    except InspectError as exc:
        if not libs:
            raise CompatError(str(exc)) from exc
        measured = None  # only CUDA libraries here (an nvidia-* wheel or their site-packages)
    ok = True
    per_gpu = []
    for t in tgts:
        d = t.to_dict()
        if measured is not None and not measured["cpu_only"]:
            cov = rules.coverage(tuple(measured["sass"]), tuple(measured["ptx"]), t.cc)
            d["torch"] = {
                "result": cov[0] if cov else "none",
                "covered_by": cov[1] if cov else None,
            }
            ok = ok and cov is not None
        covs = cudalibs.library_coverage(libs, t.cc)
        weak = cudalibs.weakest_link(covs)
        d["libraries"] = [c.to_dict() for c in covs]
        d["weakest_link"] = weak.to_dict() if weak is not None else None
        ok = ok and all(c.entry is not None for c in covs)
        per_gpu.append(d)
    return {
        "path": str(path),
        "torch": measured,
        "libraries": [lib.to_dict() for lib in libs],
        "gpus": per_gpu,
        "ok": ok,
    }


def known_errors() -> list[dict[str, str]]:
    """The error messages ``explain`` recognises: id and title (``gpu-compat explain --list``)."""
    return [{"id": e.id, "title": e.title} for e in load().errors]


SHOW_TOPICS = ("torch", "gpus", "branches", "cuda", "containers", "errors")


def show(topic: str) -> list[dict[str, Any]]:
    """The rows of one table, briefly (``gpu-compat show TOPIC``)."""
    m = load()
    if topic == "torch":
        return [
            {"torch": r.version, "variants": [v.name for v in r.variants], "python": list(r.python)}
            for r in m.releases
        ]
    if topic == "gpus":
        return lookup_all(m)
    if topic == "branches":
        return [
            {"branch": b.branch, "max_cuda": ".".join(map(str, b.max_cuda))} for b in m.branches
        ]
    if topic == "cuda":
        return [{"cuda": t.version_text, "min_driver": t.min_driver_text} for t in m.toolkits]
    if topic == "containers":
        return [{"tag": c.tag, "torch": c.torch, "cuda": c.cuda} for c in m.containers]
    if topic == "errors":
        return known_errors()
    raise CompatError(f"unknown topic {topic!r}: allowed are {', '.join(SHOW_TOPICS)}")


def lookup_all(m: Matrix) -> list[dict[str, Any]]:
    return [
        {"name": g.name, "compute_capability": ".".join(map(str, g.compute_capability))}
        for g in m.gpus
    ]


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
    environment: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One host's plan from its ``gpu_info`` GPUs, the OS's packaged driver branches and the
    inventory pins: the versioned document described in docs/design.md ("The host plan");
    ``environment`` (compat.environment's block) is carried as the plan's own."""
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
        environment=environment,
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


def perf_floors() -> list[dict[str, Any]]:
    """The performance floors per GPU model (compat/data/perf.yaml, validated; GPU_COMPAT_DATA's
    when it holds one) that the gpu_smoke role's PERF layer judges a host by."""
    from compat.data import load_raw

    return [dict(row) for row in load_raw()["floors"]]


def debian_packages() -> dict[str, dict[int, dict[str, list[str]]]]:
    """Debian version -> driver branch -> {kernel, userspace} packages (the nvidia_driver role's
    package map; compat/data/drivers.yaml is its one source)."""
    from compat import branches

    return branches.debian_packages(load())
