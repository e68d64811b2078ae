"""Shared helpers of the gpuprov smoke scripts (stdlib only; copied to each host).

The smoke scripts run on hosts where the `compat` package is NOT installed; the gpu_smoke
role copies its stdlib-only modules (compat.HOST_MODULES: the fatbin reader and compat.rules)
to <scripts dir>/compat/, and L3 imports them through import_compat() (checked by
tests/unit/test_smoke_coverage.py: the role copies exactly these, and they import with
no third-party package).

A verdict is a JSON object:

    {"layer": "L3", "name": "cuda", "status": "pass" | "fail" | "skipped" | "pass (cpu)",
     "reason": "...", "hint": "gpu-compat explain '...'" | null, "details": {...},
     "duration_s": 1.2}

A skipped layer never counts as a pass; "pass (cpu)" exists only for L4 on a host
without NVIDIA devices when the caller allows CPU runs.
"""

from __future__ import annotations

import argparse
import fcntl
import importlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

PASS = "pass"  # noqa: S105  # a verdict status, not a password
PASS_CPU = "pass (cpu)"  # noqa: S105  # a verdict status
FAIL = "fail"
SKIPPED = "skipped"
STATUSES = (PASS, PASS_CPU, FAIL, SKIPPED)

NO_DEVICE = "no NVIDIA device on this host"
LC_ENV = {"LC_ALL": "C", "LANG": "C"}

CC = tuple[int, int]


# ---------------------------------------------------------------------------
# Verdicts


def verdict(
    layer: str,
    name: str,
    status: str,
    reason: str,
    details: Mapping[str, Any] | None = None,
    hint: str | None = None,
    started: float | None = None,
) -> dict[str, Any]:
    """Build one layer's verdict; a fail without a hint gets a generic explain hint."""
    if status not in STATUSES:
        raise ValueError(f"unknown status {status!r}: want one of {', '.join(STATUSES)}")
    if status == FAIL and hint is None:
        hint = explain_hint(reason)
    return {
        "layer": layer,
        "name": name,
        "status": status,
        "reason": reason,
        "hint": hint if status == FAIL else None,
        "details": dict(details or {}),
        "duration_s": round(time.monotonic() - started, 3) if started is not None else 0.0,
    }


def explain_hint(text: str) -> str:
    """The controller-side command that explains an error text from the compat data,
    shell-quoted so that it can be pasted as it is (apostrophes included)."""
    short = " ".join(text.split())[:160]
    return f"gpu-compat explain {shlex.quote(short)}"


def counts_as_pass(v: Mapping[str, Any], allow_cpu: bool = False) -> bool:
    """Whether a verdict satisfies a required layer (skipped never does)."""
    status = v.get("status")
    return status == PASS or (status == PASS_CPU and allow_cpu)


def summarize(
    verdicts: Sequence[Mapping[str, Any]], required: Iterable[str], allow_cpu: bool = False
) -> dict[str, Any]:
    """Which required layers did not pass (failed, skipped or missing)."""
    by_layer = {str(v["layer"]): v for v in verdicts}
    not_passed: list[dict[str, str]] = []
    for layer in required:
        v = by_layer.get(layer)
        if v is None:
            not_passed.append({"layer": layer, "status": "missing", "reason": "layer not run"})
        elif not counts_as_pass(v, allow_cpu):
            not_passed.append(
                {"layer": layer, "status": str(v["status"]), "reason": str(v["reason"])}
            )
    return {"ok": not not_passed, "required": list(required), "not_passed": not_passed}


def emit(payload: Mapping[str, Any], out: str | None = None) -> None:
    """Print the JSON payload; also write it to ``out`` when given."""
    text = json.dumps(payload, indent=2, sort_keys=False)
    if out:
        Path(out).write_text(text + "\n", encoding="utf-8")
    sys.stdout.write(text + "\n")


def exit_code(v: Mapping[str, Any]) -> int:
    """0 pass / pass (cpu) / skipped, 1 fail (the caller decides what is required)."""
    return 1 if v.get("status") == FAIL else 0


# ---------------------------------------------------------------------------
# gpuprov's stdlib-only compat modules, copied next to the scripts

# The modules the gpu_smoke role copies to <scripts dir>/compat/ are compat.HOST_MODULES.
HERE = Path(__file__).resolve().parent


def import_compat() -> tuple[Any, Any]:
    """``(compat.inspect_torch, compat.rules)``: from <scripts dir>/compat/ (the role's copy),
    else from the gpuprov checkout the scripts live in (scripts/gpu-check.sh).
    Raises ImportError when neither is there. Narrow seam for the unit tests."""
    # A runtime path, not a test hack: on a host the scripts run as `python3 <script>` from
    # <scripts dir>, where gpuprov is not installed and compat/ is the role's stdlib-only copy;
    # putting its directory on sys.path is how that copy is found (allow-listed in
    # tests/unit/test_no_path_hacks.py).
    # HERE ends up first on sys.path; list(): slicing Path.parents needs Python 3.10.
    for root in (*list(HERE.parents)[1:2], HERE):
        if (root / "compat" / "inspect_torch.py").is_file() and str(root) not in sys.path:
            sys.path.insert(0, str(root))
    # By name: the copy is found at run time (mypy of the scripts does not see compat).
    return importlib.import_module("compat.inspect_torch"), importlib.import_module("compat.rules")


def parse_cc(text: str) -> CC:
    major, _, minor = str(text).partition(".")
    return int(major), int(minor or 0)


# ---------------------------------------------------------------------------
# Hardware probes (fail soft: None when the source is missing)
#
# The probe itself is gpuprov's one hardware probe, plugins/module_utils/gpu_probe.py (the
# gpu_info module's too). The gpu_smoke role copies it next to these scripts; in a gpuprov
# checkout (scripts/gpu-check.sh) it is read from plugins/module_utils/. Imported on first
# use, so the scripts that need no hardware probe (L5, L6, copied by other roles) do not
# need the file.


def probe_module() -> ModuleType:
    """gpu_probe: next to the scripts (the role's copy), else the checkout's module_utils."""
    checkout = HERE.parents[1] / "plugins" / "module_utils"
    beside = (HERE / "gpu_probe.py").is_file()
    if not beside and (checkout / "gpu_probe.py").is_file() and str(checkout) not in sys.path:
        sys.path.append(str(checkout))
    import gpu_probe  # stdlib only

    return gpu_probe


def strip_vendor(name: str) -> str:
    """'NVIDIA A100-SXM4-40GB' -> 'A100-SXM4-40GB'."""
    return str(probe_module().strip_vendor(name))


def scan_pci(sysfs_root: str = "/sys") -> list[dict[str, Any]]:
    """NVIDIA display/3D controllers under <sysfs_root>/bus/pci/devices, in bus order
    (the PCI IDs only: name None, the driver was not asked)."""
    return [
        {
            "index": g["index"],
            "bus_id": g["bus_id"],
            "pci_id": g["pci_id"],
            "name": None,
            "source": "pci",
        }
        for g in probe_module().read_pci(sysfs_root)
    ]


def import_pynvml() -> Any:  # pynvml ships no type hints
    """Narrow seam: unit tests replace this function with a fake NVML."""
    import pynvml  # optional on the host

    return pynvml


def query_nvml() -> dict[str, Any] | None:
    """Driver version and per-GPU health from NVML; None when NVML is unusable."""
    answer: dict[str, Any] | None = probe_module().query_nvml(import_pynvml, health=True)
    return answer


def run(
    args: Sequence[str], timeout: float = 60, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a command with LC_ALL=C, text output and a timeout (never check=True here)."""
    full_env = dict(os.environ)
    full_env.update(LC_ENV)
    full_env.update(env or {})
    return subprocess.run(
        list(args), capture_output=True, text=True, timeout=timeout, env=full_env, check=False
    )


def run_for_result(
    argv: Sequence[str], result_path: Path, timeout: float
) -> tuple[int, str, dict[str, Any] | None]:
    """Run a launcher whose workers write a JSON result to result_path (removed first, so a
    stale one is never read): its exit code (124 on timeout), its output, and the result or
    None when no worker wrote one. The caller's environment is passed on as it is."""
    result_path.unlink(missing_ok=True)
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, check=False, timeout=timeout
        )
        rc, output = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, output = 124, str(exc)
    result = json.loads(result_path.read_text(encoding="utf-8")) if result_path.exists() else None
    return rc, output, result


def query_smi(smi: str | None = None) -> dict[str, Any] | None:
    """Same answer as query_nvml, from nvidia-smi; None when it is missing. When it fails,
    ``error`` holds what it said and ``gpus`` is empty."""
    smi = smi or shutil.which("nvidia-smi")
    if not smi:
        return None
    gp = probe_module()
    answer: dict[str, Any] | None = gp.query_smi(gp.smi_runner(smi, 60), health=True)
    return answer


def driver_loaded() -> bool:
    return Path("/proc/driver/nvidia/version").exists()


def base_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", help="also write the JSON verdict to this file")
    return parser


# ---------------------------------------------------------------------------
# The torch environment's install lock

INSTALL_HINT = (
    "the pytorch role's background pip install of torch still runs (site.yml starts it early; "
    "an interrupted run leaves it running): wait for it, or run playbooks/pytorch.yml, then "
    "smoke.yml again"
)


def add_install_wait(parser: argparse.ArgumentParser) -> None:
    """--wait-lock FILE and --wait-timeout S: see install_wait."""
    parser.add_argument(
        "--wait-lock",
        default="",
        metavar="FILE",
        help="the torch environment's install lock: wait until no install holds it before "
        "the torch layers run",
    )
    parser.add_argument("--wait-timeout", type=float, default=3600)


def install_wait(lock: str, timeout: float) -> tuple[float | None, str]:
    """Wait until no install holds ``lock`` (the pytorch role's background job takes it
    exclusively, with flock(1)): a shared flock of our own, on an open file of our own, let go
    at once. Returns (the seconds waited, or None when the file does not exist: no install since
    boot; "" or why the torch layers cannot run: the lock still held after ``timeout`` seconds,
    or the file unreadable)."""
    try:
        fd = os.open(lock, os.O_RDONLY)
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, f"cannot open the torch environment's install lock {lock}: {exc.strerror}"
    start = time.monotonic()
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                waited = time.monotonic() - start
                if waited >= timeout:
                    return round(waited, 3), (
                        f"an install into the torch environment still holds {lock} after "
                        f"{timeout:g} s"
                    )
                time.sleep(0.5)
            else:
                return round(time.monotonic() - start, 3), ""
    finally:
        os.close(fd)
