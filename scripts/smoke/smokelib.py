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
import contextlib
import importlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

PASS = "pass"  # noqa: S105  # a verdict status, not a password
PASS_CPU = "pass (cpu)"  # noqa: S105  # a verdict status
FAIL = "fail"
SKIPPED = "skipped"
STATUSES = (PASS, PASS_CPU, FAIL, SKIPPED)

NVIDIA_VENDOR = 0x10DE
GPU_CLASSES = (0x0300, 0x0302)  # VGA compatible controller, 3D controller
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
    for root in (*HERE.parents[1:2], HERE):  # HERE ends up first on sys.path
        if (root / "compat" / "inspect_torch.py").is_file() and str(root) not in sys.path:
            sys.path.insert(0, str(root))
    # By name: the copy is found at run time (mypy of the scripts does not see compat).
    return importlib.import_module("compat.inspect_torch"), importlib.import_module("compat.rules")


def parse_cc(text: str) -> CC:
    major, _, minor = str(text).partition(".")
    return int(major), int(minor or 0)


# ---------------------------------------------------------------------------
# Hardware probes (fail soft: None when the source is missing)


def strip_vendor(name: str) -> str:
    name = name.strip()
    return name[len("NVIDIA ") :] if name.startswith("NVIDIA ") else name


def _read_hex(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="ascii").strip(), 16)
    except (OSError, ValueError):
        return None


def scan_pci(sysfs_root: str = "/sys") -> list[dict[str, Any]]:
    """NVIDIA display/3D controllers under <sysfs_root>/bus/pci/devices, in bus order."""
    base = Path(sysfs_root) / "bus" / "pci" / "devices"
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return []
    found: list[dict[str, Any]] = []
    for dev in entries:
        vendor, device, klass = (_read_hex(dev / f) for f in ("vendor", "device", "class"))
        if vendor != NVIDIA_VENDOR or device is None or klass is None:
            continue
        if (klass >> 8) not in GPU_CLASSES:
            continue
        found.append(
            {
                "index": len(found),
                "bus_id": dev.name.lower(),
                "pci_id": f"{vendor:04x}:{device:04x}",
                "name": None,
                "source": "pci",
            }
        )
    return found


def import_pynvml() -> Any:  # pynvml ships no type hints
    """Narrow seam: unit tests replace this function with a fake NVML."""
    import pynvml  # optional on the host

    return pynvml


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvml_try(fn: Callable[..., Any], *args: Any, cast: Callable[[Any], Any] = str) -> Any:
    """``cast(fn(*args))``, or None when this GPU or driver does not support the query."""
    try:
        return cast(fn(*args))
    except Exception:  # NVMLError_NotSupported and friends: report null, never guess
        return None


def query_nvml() -> dict[str, Any] | None:
    """Driver version and per-GPU health from NVML; None when NVML is unusable."""
    try:
        nvml = import_pynvml()
    except ImportError:
        return None
    try:
        nvml.nvmlInit()
    except Exception:  # library missing or driver not loaded
        return None
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        gpus: list[dict[str, Any]] = []
        for index in range(int(nvml.nvmlDeviceGetCount())):
            h = nvml.nvmlDeviceGetHandleByIndex(index)
            pci = nvml.nvmlDeviceGetPciInfo(h)
            combined = int(pci.pciDeviceId)  # device << 16 | vendor
            mem = nvml.nvmlDeviceGetMemoryInfo(h)
            cc = _nvml_try(nvml.nvmlDeviceGetCudaComputeCapability, h, cast=tuple)
            gpus.append(
                {
                    "index": index,
                    "name": strip_vendor(_text(nvml.nvmlDeviceGetName(h))),
                    "uuid": _nvml_try(nvml.nvmlDeviceGetUUID, h, cast=_text),
                    "bus_id": _normalize_bus(_text(pci.busId)),
                    "pci_id": f"{combined & 0xFFFF:04x}:{(combined >> 16) & 0xFFFF:04x}",
                    "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
                    "memory_mib": int(mem.total) // (1024 * 1024),
                    # NVML_TEMPERATURE_GPU = 0
                    "temperature_c": _nvml_try(nvml.nvmlDeviceGetTemperature, h, 0, cast=int),
                    "persistence_mode": _nvml_try(nvml.nvmlDeviceGetPersistenceMode, h, cast=bool),
                    # NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1, NVML_VOLATILE_ECC = 0
                    "ecc_uncorrected": _nvml_try(
                        nvml.nvmlDeviceGetTotalEccErrors, h, 1, 0, cast=int
                    ),
                    "retired_pages_pending": _nvml_try(
                        nvml.nvmlDeviceGetRetiredPagesPendingStatus, h, cast=bool
                    ),
                    "source": "nvml",
                }
            )
    except Exception:  # any NVML failure mid-way: fall back to nvidia-smi
        return None
    else:
        return {"driver_version": driver, "gpus": gpus, "source": "nvml"}
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def _normalize_bus(bus: str) -> str:
    """'00000000:3B:00.0' -> '0000:3b:00.0'."""
    bus = bus.strip().lower()
    domain, _, rest = bus.partition(":")
    return f"{domain[-4:]}:{rest}" if rest else bus


SMI_FIELDS = (
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "pci.device_id",
    "driver_version",
    "memory.total",
    "temperature.gpu",
    "persistence_mode",
    "ecc.errors.uncorrected.volatile.total",
    "retired_pages.pending",
)


def _smi_value(text: str) -> str | None:
    text = text.strip()
    return None if text in ("", "[N/A]", "N/A", "[Not Supported]", "Not Supported") else text


def parse_smi_csv(text: str) -> dict[str, Any]:
    """Parse ``nvidia-smi --query-gpu=<SMI_FIELDS> --format=csv,noheader,nounits``."""
    gpus: list[dict[str, Any]] = []
    driver: str | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        cols = [c.strip() for c in line.split(",")]
        if len(cols) != len(SMI_FIELDS):
            raise ValueError(f"nvidia-smi: expected {len(SMI_FIELDS)} columns, got {line!r}")
        row = dict(zip(SMI_FIELDS, (_smi_value(c) for c in cols), strict=True))
        driver = driver or row["driver_version"]
        dev = row["pci.device_id"] or ""  # 0x102310DE: device in the high half
        combined = int(dev, 16) if dev else 0
        temp, ecc, mem = row["temperature.gpu"], row[SMI_FIELDS[9]], row["memory.total"]
        gpus.append(
            {
                "index": int(row["index"] or len(gpus)),
                "name": strip_vendor(row["name"] or ""),
                "uuid": row["uuid"],
                "bus_id": _normalize_bus(row["pci.bus_id"] or ""),
                "pci_id": f"{combined & 0xFFFF:04x}:{(combined >> 16) & 0xFFFF:04x}"
                if combined
                else None,
                "compute_capability": None,
                "memory_mib": int(float(mem)) if mem else None,
                "temperature_c": int(float(temp)) if temp else None,
                "persistence_mode": (row["persistence_mode"] or "").lower() == "enabled"
                if row["persistence_mode"]
                else None,
                "ecc_uncorrected": int(ecc) if ecc else None,
                "retired_pages_pending": (row["retired_pages.pending"] or "").lower() == "yes"
                if row["retired_pages.pending"]
                else None,
                "source": "nvidia-smi",
            }
        )
    return {"driver_version": driver, "gpus": gpus, "source": "nvidia-smi"}


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


def query_smi(smi: str | None = None) -> dict[str, Any] | None:
    """Same answer as query_nvml, from nvidia-smi; None when it is missing or fails."""
    smi = smi or shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        proc = run(
            [smi, f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"], 60
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return {"error": (proc.stdout + proc.stderr).strip(), "gpus": [], "driver_version": None}
    try:
        return parse_smi_csv(proc.stdout)
    except ValueError:
        return None


def driver_loaded() -> bool:
    return Path("/proc/driver/nvidia/version").exists()


def base_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", help="also write the JSON verdict to this file")
    return parser
