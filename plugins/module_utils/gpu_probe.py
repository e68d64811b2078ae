# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""gpuprov's one NVIDIA GPU hardware probe: NVML -> nvidia-smi -> PCI scan (stdlib only).

Used by the gpu_info module (as ``ansible.module_utils.gpu_probe``), by the smoke scripts
(the gpu_smoke role copies this file next to them) and by scripts/fabfile.py (which runs
this file on a host with ``python3 - --sysfs-root ROOT`` and reads the JSON it prints).
It runs on managed hosts: Python 3.9+, standard library only, no Ansible imports. Inputs are
explicit (the sysfs root, an importer for pynvml, a runner for nvidia-smi) so that unit tests
fake exactly the parts a GPU-less machine cannot have.

The probe never guesses: a GPU seen only by its PCI IDs has name "unknown" and a null compute
capability; a value the driver does not report stays null.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence, Tuple

NVIDIA_VENDOR = 0x10DE
# PCI class codes: 0x0300xx VGA controller, 0x0302xx 3D controller (datacenter GPUs).
GPU_CLASSES = (0x0300, 0x0302)
UNKNOWN = "unknown"
# The fields every nvidia-smi query asks for (gpu_info's; the order is the CSV's).
SMI_FIELDS = ("index", "pci.bus_id", "pci.device_id", "name", "memory.total", "driver_version")
# Health fields, asked for only with health=True (smoke L1, fabfile status).
SMI_HEALTH_FIELDS = (
    "uuid",
    "temperature.gpu",
    "utilization.gpu",
    "persistence_mode",
    "ecc.errors.uncorrected.volatile.total",
    "retired_pages.pending",
)
SMI_NA = ("", "[N/A]", "N/A", "[Not Supported]", "Not Supported")
LC_ENV = {"LC_ALL": "C", "LANG": "C", "LC_MESSAGES": "C"}

# typing aliases that Python 3.9 evaluates at run time (no PEP 604 unions here).
GPU = Dict[str, Any]
Answer = Dict[str, Any]
SmiResult = Tuple[int, str, str]
SmiRunner = Callable[[Tuple[str, ...]], SmiResult]
NvmlImporter = Callable[[], Any]


# ---------------------------------------------------------------------------
# Small pure helpers


def normalize_bus_id(bus_id: str) -> str:
    """Return a bus ID as sysfs spells it: '00000000:3B:00.0' (nvidia-smi) -> '0000:3b:00.0';
    a kernel log's '0000:3B:00' keeps its parts; '3b:00.0' (no domain) gets domain 0000."""
    parts = bus_id.strip().lower().split(":")
    if len(parts) == 2 and "." in parts[1]:
        parts.insert(0, "0000")
    if len(parts) == 3:
        parts[0] = parts[0][-4:].rjust(4, "0")
    return ":".join(parts)


def pci_id_from_combined(value: int) -> str:
    """Split NVML/nvidia-smi's 0xDDDDVVVV device ID into '10de:dddd'."""
    return f"{value & 0xFFFF:04x}:{(value >> 16) & 0xFFFF:04x}"


def strip_vendor(name: str) -> str:
    """'NVIDIA A100-SXM4-40GB' -> 'A100-SXM4-40GB' (data files name GPUs without the vendor)."""
    name = name.strip()
    return name[len("NVIDIA ") :] if name.startswith("NVIDIA ") else name


def empty_gpu(index: int, source: str) -> GPU:
    """A GPU record with every field gpu_info reports, unknown until a source fills it."""
    return {
        "index": index,
        "pci_id": None,
        "bus_id": None,
        "name": UNKNOWN,
        "compute_capability": None,
        "architecture": None,
        "memory_mib": None,
        "driver_version": None,
        "source": source,
    }


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _read_hex(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="ascii").strip(), 16)
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------------------
# PCI scan


def read_pci(sysfs_root: str) -> List[GPU]:
    """NVIDIA display/3D controllers under <sysfs_root>/bus/pci/devices, in bus order."""
    devices_dir = Path(sysfs_root) / "bus" / "pci" / "devices"
    try:
        entries = sorted(devices_dir.iterdir())
    except OSError:
        return []
    gpus: List[GPU] = []
    for base in entries:
        vendor = _read_hex(base / "vendor")
        device = _read_hex(base / "device")
        pci_class = _read_hex(base / "class")
        if vendor != NVIDIA_VENDOR or device is None or pci_class is None:
            continue
        if (pci_class >> 8) not in GPU_CLASSES:
            continue
        gpu = empty_gpu(len(gpus), "pci")
        gpu["pci_id"] = f"{vendor:04x}:{device:04x}"
        gpu["bus_id"] = normalize_bus_id(base.name)
        gpus.append(gpu)
    return gpus


# ---------------------------------------------------------------------------
# NVML


def import_pynvml() -> Any:  # pynvml ships no type hints
    """The real nvidia-ml-py (raises ImportError when it is not installed)."""
    import pynvml  # optional dependency, imported only when NVML is tried

    return pynvml


def _nvml_try(nvml: Any, name: str, *args: Any, cast: Callable[[Any], Any] = str) -> Any:
    """``cast(nvml.<name>(*args))``, or None when this GPU, driver or pynvml does not support
    the query (NVMLError_NotSupported, a pynvml without the function): null, never guessed."""
    try:
        return cast(getattr(nvml, name)(*args))
    except Exception:  # NVMLError_NotSupported and friends
        return None


def _nvml_health(nvml: Any, handle: Any) -> Dict[str, Any]:
    util = _nvml_try(nvml, "nvmlDeviceGetUtilizationRates", handle, cast=lambda u: int(u.gpu))
    return {
        "uuid": _nvml_try(nvml, "nvmlDeviceGetUUID", handle, cast=_text),
        # NVML_TEMPERATURE_GPU = 0
        "temperature_c": _nvml_try(nvml, "nvmlDeviceGetTemperature", handle, 0, cast=int),
        "utilization_pct": util,
        "persistence_mode": _nvml_try(nvml, "nvmlDeviceGetPersistenceMode", handle, cast=bool),
        # NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1, NVML_VOLATILE_ECC = 0
        "ecc_uncorrected": _nvml_try(nvml, "nvmlDeviceGetTotalEccErrors", handle, 1, 0, cast=int),
        "retired_pages_pending": _nvml_try(
            nvml, "nvmlDeviceGetRetiredPagesPendingStatus", handle, cast=bool
        ),
    }


def query_nvml(importer: NvmlImporter, health: bool = False) -> Answer | None:
    """Ask NVML: ``{"source": "nvml", "driver_version", "gpus", "error": None}``; None when
    pynvml or libnvidia-ml is missing, the driver does not answer, or NVML fails mid-way."""
    try:
        nvml = importer()
    except ImportError:
        return None
    try:
        nvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...: fall back
        return None
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        gpus: List[GPU] = []
        for index in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            pci = nvml.nvmlDeviceGetPciInfo(handle)
            gpu = empty_gpu(index, "nvml")
            gpu["pci_id"] = pci_id_from_combined(int(pci.pciDeviceId))
            gpu["bus_id"] = normalize_bus_id(_text(pci.busId))
            gpu["name"] = strip_vendor(_text(nvml.nvmlDeviceGetName(handle)))
            gpu["memory_mib"] = int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // (1024 * 1024)
            gpu["driver_version"] = driver
            cc = _nvml_try(nvml, "nvmlDeviceGetCudaComputeCapability", handle, cast=tuple)
            gpu["compute_capability"] = f"{cc[0]}.{cc[1]}" if cc else None
            if health:
                gpu.update(_nvml_health(nvml, handle))
            gpus.append(gpu)
    except Exception:  # any NVML failure mid-way: fall back to nvidia-smi
        return None
    else:
        return {"source": "nvml", "driver_version": driver, "gpus": gpus, "error": None}
    finally:
        with contextlib.suppress(Exception):  # a failed shutdown changes nothing we report
            nvml.nvmlShutdown()


# ---------------------------------------------------------------------------
# nvidia-smi


def smi_command(smi: str, fields: Sequence[str], units: bool = True) -> List[str]:
    """The nvidia-smi query for ``fields`` (CSV without header; units kept unless ``units``
    is false, as the metrics collector asks)."""
    return [
        smi,
        "--query-gpu=" + ",".join(fields),
        "--format=csv,noheader" + ("" if units else ",nounits"),
    ]


def run_command(argv: Sequence[str], timeout: float = 60) -> SmiResult:
    """Run a command in the C locale: (rc, stdout, stderr); 127/124 when it cannot run."""
    env = dict(os.environ)
    env.update(LC_ENV)
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, env=env, check=False
        )
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]}: timed out after {timeout:g}s"
    except OSError as exc:
        return 127, "", f"{argv[0]}: {exc}"
    return proc.returncode, proc.stdout, proc.stderr


def smi_runner(smi: str, timeout: float = 60) -> SmiRunner:
    """A runner for query_smi that runs the real ``smi`` binary."""
    return lambda fields: run_command(smi_command(smi, fields), timeout)


def _smi_value(text: str) -> str | None:
    text = text.strip()
    return None if text in SMI_NA else text


def _leading_int(text: str | None) -> int | None:
    """'40960 MiB' -> 40960, '33' -> 33, '5 %' -> 5, '12.0' -> 12; None when not a number."""
    match = re.match(r"\s*(\d+)", text or "")
    return int(match.group(1)) if match else None


def _flag(text: str | None, true_word: str) -> bool | None:
    return None if text is None else text.lower() == true_word


def smi_rows(
    text: str, fields: Sequence[str], strict: bool = True
) -> List[Tuple[List[str], Dict[str, str | None]]]:
    """The lines of ``nvidia-smi --query-gpu=<fields> --format=csv,noheader[,nounits]``: each
    as its raw cells and as field -> value, with what a GPU does not report ("[N/A]",
    "[Not Supported]") as None. A line with another number of columns raises ValueError, or
    is left out when not ``strict``."""
    rows: List[Tuple[List[str], Dict[str, str | None]]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(fields):
            if not strict:
                continue
            raise ValueError(
                f"unexpected nvidia-smi line: expected {len(fields)} columns, got {line!r}"
            )
        rows.append((cells, {field: _smi_value(cell) for field, cell in zip(fields, cells)}))
    return rows


def parse_smi_csv(text: str, fields: Sequence[str]) -> List[GPU]:
    """Parse ``nvidia-smi --query-gpu=<fields> --format=csv,noheader[,nounits]`` output.

    ``fields`` starts with SMI_FIELDS; health fields and ``compute_cap`` are optional.
    Raises ValueError on a line with another number of columns or an unreadable ID."""
    gpus: List[GPU] = []
    for cells, row in smi_rows(text, fields):
        gpu = empty_gpu(int(cells[0]), "nvidia-smi")
        gpu["bus_id"] = normalize_bus_id(cells[1])
        gpu["pci_id"] = pci_id_from_combined(int(cells[2], 16))
        gpu["name"] = strip_vendor(cells[3])
        gpu["memory_mib"] = _leading_int(row["memory.total"])
        gpu["driver_version"] = cells[5]
        if "compute_cap" in row and re.fullmatch(r"\d+\.\d+", row["compute_cap"] or ""):
            gpu["compute_capability"] = row["compute_cap"]
        if "uuid" in row:
            gpu["uuid"] = row["uuid"]
        if "temperature.gpu" in row:
            gpu["temperature_c"] = _leading_int(row["temperature.gpu"])
        if "utilization.gpu" in row:
            gpu["utilization_pct"] = _leading_int(row["utilization.gpu"])
        if "persistence_mode" in row:
            gpu["persistence_mode"] = _flag(row["persistence_mode"], "enabled")
        if "ecc.errors.uncorrected.volatile.total" in row:
            gpu["ecc_uncorrected"] = _leading_int(row["ecc.errors.uncorrected.volatile.total"])
        if "retired_pages.pending" in row:
            gpu["retired_pages_pending"] = _flag(row["retired_pages.pending"], "yes")
        gpus.append(gpu)
    return gpus


def smi_fields(health: bool = False, compute_cap: bool = True) -> Tuple[str, ...]:
    """The fields of one query: SMI_FIELDS [+ SMI_HEALTH_FIELDS] [+ compute_cap, last]."""
    return (
        *SMI_FIELDS,
        *(SMI_HEALTH_FIELDS if health else ()),
        *(("compute_cap",) if compute_cap else ()),
    )


def query_smi(run: SmiRunner | None, health: bool = False) -> Answer | None:
    """Ask nvidia-smi through ``run(fields) -> (rc, stdout, stderr)``; None without one.

    R470-era drivers lack the compute_cap field: the query is retried without it. When no
    query answers, the answer has no GPUs and ``error`` says what nvidia-smi said (e.g.
    'Failed to initialize NVML: Driver/library version mismatch')."""
    if run is None:
        return None
    error = "nvidia-smi gave no answer"
    for with_cc in (True, False):
        fields = smi_fields(health, with_cc)
        rc, out, err = run(fields)
        if rc != 0:
            error = (out + err).strip() or f"nvidia-smi exited with {rc}"
            continue
        try:
            gpus = parse_smi_csv(out, fields)
        except ValueError as exc:
            error = str(exc)
            continue
        driver = next((str(g["driver_version"]) for g in gpus if g.get("driver_version")), None)
        return {"source": "nvidia-smi", "driver_version": driver, "gpus": gpus, "error": None}
    return {"source": "nvidia-smi", "driver_version": None, "gpus": [], "error": error}


# ---------------------------------------------------------------------------
# The whole probe, in gpu_info's order


def merge_pci(found: List[GPU], pci: List[GPU]) -> List[GPU]:
    """Fill a missing PCI ID from the PCI scan by bus ID (defensive; NVML/smi usually report it)."""
    by_bus = {gpu["bus_id"]: gpu for gpu in pci}
    for gpu in found:
        if not gpu.get("pci_id") and gpu.get("bus_id") in by_bus:
            gpu["pci_id"] = by_bus[gpu["bus_id"]]["pci_id"]
    return found


def probe(
    sysfs_root: str,
    importer: NvmlImporter,
    run_smi: SmiRunner | None,
    health: bool = False,
) -> Answer:
    """Every GPU from the first source that answers: NVML, nvidia-smi, else the PCI scan.

    ``{"gpus", "source" (nvml, nvidia-smi, pci, unknown when no GPU), "driver_version",
    "smi_error" (what a failing nvidia-smi said, else None)}``."""
    pci = read_pci(sysfs_root)
    answer = query_nvml(importer, health)
    smi_error = None
    if answer is None:
        answer = query_smi(run_smi, health)
        if answer is not None and answer["error"]:
            smi_error, answer = answer["error"], None
    gpus = pci if answer is None else merge_pci(answer["gpus"], pci)
    gpus.sort(key=lambda gpu: int(gpu["index"]))
    driver_version = next((str(g["driver_version"]) for g in gpus if g.get("driver_version")), None)
    return {
        "gpus": gpus,
        "source": str(gpus[0]["source"]) if gpus else UNKNOWN,
        "driver_version": driver_version,
        "smi_error": smi_error,
    }


def build_labels(gpus: List[GPU], driver_version: str | None) -> Dict[str, str]:
    """GPU Feature Discovery style labels, taken from the first GPU (GFD's convention)."""
    labels: Dict[str, str] = {"nvidia.com/gpu.count": str(len(gpus))}
    if gpus:
        first = gpus[0]
        labels["nvidia.com/gpu.product"] = re.sub(r"\s+", "-", str(first.get("name") or UNKNOWN))
        labels["nvidia.com/gpu.family"] = str(first.get("architecture") or UNKNOWN)
        cc = first.get("compute_capability")
        if cc:
            major, _, minor = str(cc).partition(".")
            labels["nvidia.com/gpu.compute.major"] = major
            labels["nvidia.com/gpu.compute.minor"] = minor
        if first.get("memory_mib") is not None:
            labels["nvidia.com/gpu.memory"] = str(first["memory_mib"])
    if driver_version:
        labels["nvidia.com/cuda.driver-version.full"] = driver_version
        for key, value in zip(("major", "minor", "revision"), driver_version.split(".")):
            labels[f"nvidia.com/cuda.driver-version.{key}"] = value
    return labels


# ---------------------------------------------------------------------------
# Command line: `python3 gpu_probe.py` (or `python3 -` with this file on stdin)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print this host's NVIDIA GPUs as JSON.")
    parser.add_argument("--sysfs-root", default="/sys", help="root of the sysfs tree (/sys)")
    parser.add_argument("--nvidia-smi", help="path to nvidia-smi (default: search PATH)")
    parser.add_argument("--timeout", type=float, default=60, help="nvidia-smi timeout (s)")
    args = parser.parse_args(argv)
    smi = args.nvidia_smi or shutil.which("nvidia-smi")
    runner = smi_runner(smi, args.timeout) if smi else None
    answer = probe(args.sysfs_root, import_pynvml, runner, health=True)
    sys.stdout.write(json.dumps(answer, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
