"""The host plan: one host's GPUs (as ``gpu_info`` reports them), the driver branches its OS
packages and the inventory's pins -> one versioned document that the playbooks consume.

All driver-branch policy lives here (``playbooks/plan.yml`` only calls it):

1. Refusals (the inventory contradicts the hardware; nothing is resolved): a ``gpu_nodes``
   host without a detected GPU (unless ``expect_gpu`` is false), a GPU the matrix does not
   know without a driver pin, a pinned branch that does not drive every GPU.
2. Resolution without a driver constraint (``resolve``, or ``check`` of a pinned torch).
3. When the OS packages branches and the chosen one is not among them, resolution again for
   the newest packaged branch that drives every GPU; when none does, no plan.
4. A pinned branch is used as given ("some release of that branch").

The document's schema is in ``docs/design.md`` ("The host plan"); ``SCHEMA_VERSION`` changes
when a key is removed or changes meaning.

A fleet repeats itself (the same GPUs, pins and branches on many hosts), so the pure queries
behind a plan (resolution, the driving branches, a pin's verdict) are memoised per matrix on
their hashable inputs (``_memo``); each plan gets its own copy, so plans share no objects.
``scripts/bench_plan.py`` measures a fleet; ``tests/unit/test_bench_plan.py`` holds memoised
plans equal to unmemoised ones.
"""

from __future__ import annotations

import copy
import weakref

from compat import rules
from compat.branches import branch_check, driving_branches, parse_branch
from compat.data import Matrix
from compat.gpus import targets
from compat.install import install_data
from compat.resolution import check, resolve

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    T = TypeVar("T")

SCHEMA_VERSION = 2  # 2: the environment block
# Entries kept per matrix (about 4 KB each; when full, the table starts again); 0: no memo.
MEMO_SIZE = 8192
_MEMO: weakref.WeakKeyDictionary[Matrix, dict[tuple[Any, ...], Any]] = weakref.WeakKeyDictionary()


def plan_host(
    m: Matrix,
    gpus: list[dict[str, Any]] | tuple[dict[str, Any], ...],
    packaged_branches: list[Any] | tuple[Any, ...] = (),
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
    """The plan of one host; see the module docstring and ``docs/design.md``."""
    gpus = [dict(g) for g in gpus or ()]
    pin = None if driver_branch in (None, "") else parse_branch(driver_branch)
    torch_pin = None if torch in (None, "") else str(torch)
    packaged = sorted({int(b) for b in packaged_branches or ()})
    os_text = os_name or "this OS"
    who = host or "this host"
    unknown = [g for g in gpus if not g.get("compute_capability")]
    queries = [_query(m, g) for g in gpus if g.get("compute_capability")]
    allowed = list(
        _memo(m, ("allowed", *queries), lambda: driving_branches(m, targets(m, queries)))
    )
    names = ", ".join(str(g.get("name") or "unknown") for g in gpus)

    refused = _refusals(m, gpus, unknown, queries, pin, expect_gpu, who, names, sysfs_root)
    if refused:
        return _document(
            {"ok": False, "reasons": refused, "gpus": gpus, "driver": {}},
            gpus,
            allowed,
            packaged,
            pin,
            torch_pin,
            refused=refused,
            host=host,
            environment=environment,
        )

    notes: list[str] = []
    if not gpus:
        notes.append(f"{who} has no NVIDIA GPU and gpuprov_expect_gpu is false: CPU build")
    os_reasons: list[str] = []
    unpackaged = False
    branch = pin
    if unknown:
        resolved = _pinned_unknown(gpus, unknown, pin, torch_pin)
    else:
        free = _resolve(m, queries, torch_pin, None, python, channel)
        free_branch = free.get("driver", {}).get("branch")
        if pin is None and packaged and free_branch not in packaged:
            usable = [b for b in allowed if b in packaged]
            if usable:
                branch = usable[-1]
                os_reasons.append(
                    f"driver branch {free_branch} is not packaged for {os_text} (packaged: "
                    f"{_join(packaged)}); resolved for branch {branch}"
                    if free_branch is not None
                    else f"driver branch {branch}: the newest packaged for {os_text}"
                )
            else:
                unpackaged = True
                os_reasons.append(
                    f"no driver branch packaged for {os_text} ({_join(packaged)}) drives every "
                    f"GPU ({names}); branches that do: {_join(allowed)}"
                )
        resolved = (
            free
            if branch is None
            else _resolve(m, queries, torch_pin, str(branch), python, channel)
        )
    resolved["reasons"] = list(dict.fromkeys(os_reasons + list(resolved.get("reasons") or [])))
    resolved["notes"] = list(dict.fromkeys(list(resolved.get("notes") or []) + notes))
    resolved["ok"] = bool(resolved["ok"]) and not unpackaged
    return _document(
        resolved, gpus, allowed, packaged, pin, torch_pin, host=host, environment=environment
    )


def _query(m: Matrix, gpu: dict[str, Any]) -> str:
    """How a detected GPU is looked up: by PCI ID when the matrix knows it, else by the
    compute capability its driver reported (never guessed)."""
    pci = str(gpu.get("pci_id") or "")
    if pci and m.gpu_by_pci(pci.lower()) is not None:
        return pci
    return str(gpu["compute_capability"])


def _refusals(
    m: Matrix,
    gpus: list[dict[str, Any]],
    unknown: list[dict[str, Any]],
    queries: list[str],
    pin: int | None,
    expect_gpu: bool,
    who: str,
    names: str,
    sysfs_root: str | None,
) -> list[str]:
    if not gpus and expect_gpu:
        scanned = f"{sysfs_root or '/sys'}/bus/pci/devices"
        return [
            f"no NVIDIA GPU detected on {who}: NVML and nvidia-smi answered nothing and the PCI "
            f"scan of {scanned} found no NVIDIA display or 3D controller (vendor 10de). Check "
            "the hardware or its passthrough, or set gpuprov_expect_gpu: false for a host in "
            "gpu_nodes that is meant to have no GPU"
        ]
    if unknown and pin is None:
        return [
            f"{who} has GPUs the compat matrix does not know: "
            + ", ".join(str(g.get("pci_id")) for g in unknown)
            + " (bus "
            + ", ".join(str(g.get("bus_id")) for g in unknown)
            + "). Their compute capability is unknown, so no stack can be resolved. Pin one in "
            "the inventory (nvidia_driver_branch, and gpuprov_torch_version if torch is wanted) "
            "or add the GPU to compat/data/gpus.yaml with a source"
        ]
    if pin is not None:
        verdict = _memo(m, ("branch_check", pin, *queries), lambda: branch_check(m, pin, queries))
        if not verdict["ok"]:
            return [
                f"nvidia_driver_branch={pin} does not drive every GPU of {who} ({names}): "
                + "; ".join(verdict["reasons"])
                + f". Allowed branches for this host: {_join(verdict['allowed_branches'])}"
            ]
    return []


def _resolve(
    m: Matrix,
    queries: list[str],
    torch_pin: str | None,
    driver: str | None,
    python: str | None,
    channel: str | None,
) -> dict[str, Any]:
    """``resolve``, or ``check`` of the pinned torch made to look like a plan (a copy of the
    memoised answer: the caller completes it)."""
    key = ("resolve", torch_pin, driver, python, channel, *queries)
    found = _memo(m, key, lambda: _resolve_now(m, queries, torch_pin, driver, python, channel))
    answer: dict[str, Any] = _copy(found)
    return answer


def _resolve_now(
    m: Matrix,
    queries: list[str],
    torch_pin: str | None,
    driver: str | None,
    python: str | None,
    channel: str | None,
) -> dict[str, Any]:
    if torch_pin is None:
        return resolve(m, queries, driver=driver, python=python, channel=channel)
    verdict = check(m, queries, torch_pin, driver=driver, python=python, channel=channel)
    verdict["ok"] = verdict.pop("compatible")
    release = m.release(str(verdict["torch"]))
    variant = release.variant(verdict["variant"]) if release and verdict["variant"] else None
    verdict["torchvision"] = release.torchvision if release else None
    verdict["torchaudio"] = release.torchaudio if release else None
    verdict["install"] = install_data(release, variant) if release and variant else None
    verdict["container"] = None
    verdict["notes"] = []
    return verdict


def _memo(m: Matrix, key: tuple[Any, ...], compute: Callable[[], T]) -> T:
    """``compute()``, remembered for ``m`` (a matrix is not changed once built) under ``key``
    when every part of the key is None, an int or a str (so that equal keys are equal inputs:
    no 1 == 1.0 == True). The caller must not change what it gets: copy it first."""
    if MEMO_SIZE <= 0 or not all(p is None or type(p) in (str, int) for p in key):
        return compute()
    table = _MEMO.get(m)
    if table is None:
        table = _MEMO[m] = {}
    try:
        found: T = table[key]
    except KeyError:
        if len(table) >= MEMO_SIZE:
            table.clear()
        found = table[key] = compute()
    return found


def _copy(value: Any) -> Any:
    """A deep copy of a JSON-like answer (dicts, lists, tuples, scalars): copy.deepcopy's result
    at a fraction of its cost; anything else goes through copy.deepcopy."""
    kind = type(value)
    if kind is dict:
        return {k: _copy(v) for k, v in value.items()}
    if kind is list:
        return [_copy(v) for v in value]
    if kind in (str, int, bool, float) or value is None:
        return value
    if kind is tuple:
        return tuple(_copy(v) for v in value)
    return copy.deepcopy(value)


def _pinned_unknown(
    gpus: list[dict[str, Any]],
    unknown: list[dict[str, Any]],
    pin: int | None,
    torch_pin: str | None,
) -> dict[str, Any]:
    return {
        "ok": True,
        "torch": torch_pin,
        "variant": None,
        "cuda": None,
        "gpus": gpus,
        "driver": {"branch": pin, "given": str(pin)},
        "reasons": [
            "stack taken from inventory pins: GPUs "
            + ", ".join(str(g.get("pci_id")) for g in unknown)
            + " are not in the matrix, so the pins are not validated against them"
        ],
    }


def _document(
    resolved: dict[str, Any],
    gpus: list[dict[str, Any]],
    allowed: list[int],
    packaged: list[int],
    pin: int | None,
    torch_pin: str | None,
    refused: list[str] | None = None,
    host: str | None = None,
    environment: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The versioned plan document: every key present, whatever the outcome."""
    driver = dict(resolved.get("driver") or {})
    driver.setdefault("branch", None)
    driver.setdefault("given", None)
    driver.setdefault("min_version", None)
    driver.setdefault("minor_compat_min_version", None)
    driver.setdefault("compatibility", None)
    driver["allowed_branches"] = allowed
    driver["packaged_branches"] = packaged
    driver["pinned"] = pin is not None
    driver["required_version"] = (
        driver["minor_compat_min_version"]
        if driver["compatibility"] == rules.MINOR
        else driver["min_version"]
    )
    driver["why"] = (
        "refused (see the reasons)"
        if refused
        else _driver_why(driver, resolved.get("cuda"), bool(gpus))
    )
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "host": host,
        "ok": bool(resolved["ok"]),
        "refused": list(refused or []),
        "gpus": resolved.get("gpus", gpus),
        "driver": driver,
        "cuda": resolved.get("cuda"),
        "torch": resolved.get("torch"),
        "variant": resolved.get("variant"),
        "torchvision": resolved.get("torchvision"),
        "torchaudio": resolved.get("torchaudio"),
        "channel": resolved.get("channel"),
        "python": resolved.get("python"),
        "install": resolved.get("install"),
        "container": resolved.get("container"),
        "reasons": list(resolved.get("reasons") or []),
        "notes": list(resolved.get("notes") or []),
        "pinned": {"driver_branch": pin, "torch": torch_pin},
        "packaged_branches": packaged,
        "detected": gpu_summary(gpus),
        "environment": dict(environment) if environment else None,
    }
    doc["lines"] = plan_lines(doc)
    return doc


def _driver_why(driver: dict[str, Any], cuda: str | None, has_gpus: bool) -> str:
    """One sentence that states the branch and the minimum version together."""
    branch, need = driver["branch"], driver["required_version"]
    if branch is None:
        return "no driver needed (no GPU)" if not has_gpus else "no driver branch chosen"
    how = "pinned in the inventory" if driver["pinned"] else "newest that fits"
    if need is None or cuda is None:
        return f"branch {branch} ({how})"
    if driver["compatibility"] == rules.MINOR:
        return (
            f"branch {branch} ({how}): a {branch} driver >= {need} runs CUDA {cuda} through "
            f"minor-version compatibility (full support needs >= {driver['min_version']})"
        )
    need_branch = int(str(need).split(".")[0])
    if need_branch == branch:
        return f"branch {branch} ({how}): a {branch} driver >= {need}, the minimum of CUDA {cuda}"
    return f"branch {branch} ({how}): any {branch} driver (CUDA {cuda} needs >= {need})"


def gpu_summary(gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Detected GPUs, identical ones (same model, PCI ID and source) once with a count."""
    groups: dict[tuple[str, ...], dict[str, Any]] = {}
    for g in gpus:
        key = tuple(
            str(g.get(k) or "")
            for k in ("name", "pci_id", "compute_capability", "architecture", "source")
        )
        entry = groups.get(key)
        if entry is None:
            entry = groups[key] = {
                "count": 0,
                "indexes": [],
                "name": g.get("name") or "unknown",
                "pci_id": g.get("pci_id"),
                "compute_capability": g.get("compute_capability"),
                "architecture": g.get("architecture"),
                "source": g.get("source"),
            }
        entry["count"] += 1
        entry["indexes"].append(g.get("index"))
    return list(groups.values())


def plan_lines(plan: dict[str, Any]) -> list[str]:
    """The plan as the lines ``plan.yml`` prints (text for people, derived from the data)."""
    d = plan["driver"]
    pin_t = " (pinned)" if plan["pinned"]["torch"] else ""
    out = [f"host      {plan['host'] or '-'}  {'OK' if plan['ok'] else 'NO PLAN'}"]
    for g in plan["detected"]:
        idx = ",".join(str(i) for i in g["indexes"])
        count = f"{g['count']} x " if g["count"] > 1 else ""
        out.append(
            f"gpu {idx:<5} {count}{g['name']}  {g['pci_id']}  cc {g['compute_capability'] or '?'}"
            f"  {g['architecture'] or '?'}  ({g['source']})"
        )
    if not plan["detected"]:
        out.append("gpu       none detected")
    allowed = d["allowed_branches"]
    span = f"{allowed[0]}..{allowed[-1]}" if allowed else "none"
    out.append(f"driver    {d['why']}  branches for these GPUs {span}")
    out.append(f"cuda      {plan['cuda'] or '-'}")
    variant = f"+{plan['variant']}" if plan["variant"] else ""
    out.append(
        f"torch     {plan['torch'] or '-'}{variant}{pin_t}  torchvision "
        f"{plan['torchvision'] or '-'}  channel {plan['channel'] or '-'}"
    )
    if plan["container"]:
        out.append(f"container {plan['container']['image']}")
    out += [f"why       {r}" for r in plan["reasons"]]
    out += [f"note      {n}" for n in plan["notes"]]
    return out


def _join(values: list[int]) -> str:
    return ", ".join(str(v) for v in values) or "none"
