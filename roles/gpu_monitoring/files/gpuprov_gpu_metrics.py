#!/usr/bin/env python3
"""gpuprov's textfile collector: per-GPU metrics from nvidia-smi plus gpuprov's own facts.

Run by the gpu_monitoring role's systemd timer as an unprivileged user; writes
<out>/gpuprov.prom atomically for node_exporter's textfile collector:

- per GPU, from `nvidia-smi --query-gpu=...` (every driver branch has it, R470 included):
  utilisation, memory, temperature, power, SM/memory clocks, ECC error counts where the
  GPU reports them (what it does not report is left out, never written as 0);
- Xid errors per GPU and code from the kernel log (`journalctl -k`), when readable;
- the driver state: gpuprov_gpu_driver_loaded (0 when no NVIDIA driver answers, as in
  the lab's simulated GPUs), the NVIDIA devices on the PCI bus, whether nvidia-smi answered;
- gpuprov's facts (the JSON the role writes): the planned driver branch/CUDA/torch next to
  what is installed (measured here), the smoke verdict per layer and its time.

Standard library only, and gpuprov's one hardware probe (gpu_probe.py, installed beside this
file by the role): the nvidia-smi query and its parsing, bus IDs and the PCI scan are the
probe's, as for gpu_info and the smoke tests. Exit 0 when the file was written (even with no
driver), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gpu_probe  # beside this file on the host; plugins/module_utils in the checkout

# (nvidia-smi field, metric suffix, help, scale to base unit)
SMI_FIELDS: tuple[tuple[str, str, str, float], ...] = (
    ("utilization.gpu", "utilization_ratio", "GPU utilisation (0-1)", 0.01),
    ("utilization.memory", "memory_utilization_ratio", "Memory controller utilisation (0-1)", 0.01),
    ("memory.total", "memory_total_bytes", "Framebuffer memory", 1024 * 1024),
    ("memory.used", "memory_used_bytes", "Framebuffer memory used", 1024 * 1024),
    ("temperature.gpu", "temperature_celsius", "GPU core temperature", 1.0),
    ("power.draw", "power_draw_watts", "Power draw", 1.0),
    ("power.limit", "power_limit_watts", "Power limit", 1.0),
    ("clocks.sm", "sm_clock_hertz", "SM clock", 1e6),
    ("clocks.mem", "memory_clock_hertz", "Memory clock", 1e6),
    (
        "ecc.errors.corrected.volatile.total",
        "ecc_corrected_errors",
        "Corrected ECC errors since the driver loaded",
        1.0,
    ),
    (
        "ecc.errors.uncorrected.volatile.total",
        "ecc_uncorrected_errors",
        "Uncorrected ECC errors since the driver loaded",
        1.0,
    ),
)
ID_FIELDS = ("index", "uuid", "name", "pci.bus_id", "driver_version")
QUERY_FIELDS = (*ID_FIELDS, *(f for f, *_ in SMI_FIELDS))
XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+)")
LAYERS = ("L0", "L1", "L2", "L3", "PERF", "L4", "L5")


# ---------------------------------------------------------------------------
# Pure parts (unit-tested)


def _number(text: str | None) -> float | None:
    try:
        return None if text is None else float(text)
    except ValueError:
        return None


def parse_smi(text: str) -> list[dict[str, Any]]:
    """Rows of `nvidia-smi --query-gpu=QUERY_FIELDS --format=csv,noheader,nounits` (a line
    with another number of columns is left out; a value the GPU does not report is None)."""
    rows = []
    for _, cells in gpu_probe.smi_rows(text, QUERY_FIELDS, strict=False):
        row: dict[str, Any] = {field: cells[field] or "" for field in ID_FIELDS}
        for field, *_ in SMI_FIELDS:
            row[field] = _number(cells[field])
        rows.append(row)
    return rows


def parse_xid(text: str) -> dict[tuple[str, str], int]:
    """(bus id, Xid code) -> count, from kernel log lines `NVRM: Xid (PCI:...): N, ...`."""
    counts: dict[tuple[str, str], int] = {}
    for m in XID.finditer(text):
        key = (gpu_probe.normalize_bus_id(m.group(1)), m.group(2))
        counts[key] = counts.get(key, 0) + 1
    return counts


def _esc(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: Mapping[str, object]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items()) + "}"


class Metrics:
    """Prometheus text exposition, HELP/TYPE once per family, in insertion order."""

    def __init__(self) -> None:
        self._families: dict[str, tuple[str, str, list[str]]] = {}

    def add(
        self,
        name: str,
        value: float,
        labels: Mapping[str, object] | None = None,
        help_text: str = "",
        kind: str = "gauge",
    ) -> None:
        fam = self._families.setdefault(name, (help_text, kind, []))
        number = repr(float(value)) if value != int(value) else str(int(value))
        fam[2].append(f"{name}{_labels(labels or {})} {number}")

    def text(self) -> str:
        out = []
        for name, (help_text, kind, samples) in self._families.items():
            out.append(f"# HELP {name} {help_text or name}")
            out.append(f"# TYPE {name} {kind}")
            out.extend(samples)
        return "\n".join(out) + "\n"


def gpu_metrics(
    m: Metrics, rows: Sequence[Mapping[str, Any]], xids: Mapping[tuple[str, str], int]
) -> None:
    for row in rows:
        ident = {
            "gpu": row["index"],
            "uuid": row["uuid"],
            "name": row["name"],
            "bus_id": gpu_probe.normalize_bus_id(row["pci.bus_id"]),
        }
        m.add(
            "gpuprov_gpu_info",
            1,
            {**ident, "driver": row["driver_version"]},
            "GPUs nvidia-smi reports",
        )
        for field, suffix, help_text, scale in SMI_FIELDS:
            value = row.get(field)
            if value is not None:
                m.add(f"gpuprov_gpu_{suffix}", value * scale, ident, help_text)
    for (bus, code), count in sorted(xids.items()):
        m.add(
            "gpuprov_gpu_xid_errors",
            count,
            {"bus_id": bus, "xid": code},
            "Xid errors in the kernel log since boot",
        )


def _version_key(text: str | None) -> str:
    return str(text or "")


def stack_match(planned: Mapping[str, Any], installed: Mapping[str, Any]) -> dict[str, int | None]:
    """Per component: 1 installed matches the plan, 0 it does not, None nothing planned.

    driver: the installed version's branch (first number) equals the planned branch;
    cuda: the torch build's CUDA equals the planned CUDA (a CPU build: none planned = match);
    torch: the installed version without its local part equals the planned one.
    """
    out: dict[str, int | None] = {}
    branch = planned.get("driver_branch")
    drv = installed.get("driver")
    out["driver"] = (
        None if branch in (None, "") else int(bool(drv) and str(drv).split(".")[0] == str(branch))
    )
    torch_plan = planned.get("torch")
    torch_have = installed.get("torch")
    out["torch"] = (
        None
        if not torch_plan
        else int(
            bool(torch_have) and str(torch_have).split("+")[0] == str(torch_plan).split("+")[0]
        )
    )
    cuda_plan = planned.get("cuda")
    out["cuda"] = (
        None
        if not torch_plan
        else int(_version_key(cuda_plan) == _version_key(installed.get("cuda")))
    )
    return out


def facts_metrics(
    m: Metrics,
    facts: Mapping[str, Any],
    installed: Mapping[str, Any],
    facts_time: float | None = None,
) -> None:
    """The plan and the smoke verdicts gpuprov shipped (the facts file), and ``facts_time``,
    the file's modification time: gpuprov rewrites it only when they change."""
    planned = dict(facts.get("plan") or {})
    if planned:
        m.add(
            "gpuprov_plan_info",
            1,
            {
                k: "" if planned.get(k) is None else planned[k]
                for k in ("driver_branch", "cuda", "torch", "variant")
            },
            "The stack gpuprov planned for this host (playbooks/plan.yml)",
        )
        m.add("gpuprov_plan_ok", int(bool(planned.get("ok"))), None, "1 when the plan resolved")
    m.add(
        "gpuprov_installed_info",
        1,
        {k: "" if installed.get(k) is None else installed[k] for k in ("driver", "cuda", "torch")},
        "The stack measured on this host",
    )
    for component, ok in stack_match(planned, installed).items():
        if ok is not None:
            m.add(
                "gpuprov_stack_matches_plan",
                ok,
                {"component": component},
                "1 when the installed component is the planned one",
            )
    smoke = dict(facts.get("smoke") or {})
    m.add(
        "gpuprov_smoke_report_present", int(bool(smoke)), None, "1 when a smoke verdict was shipped"
    )
    for layer in smoke.get("layers") or []:
        status = str(layer.get("status"))
        m.add(
            "gpuprov_smoke_layer_passed",
            int(status in ("pass", "pass (cpu)")),
            {"layer": layer.get("layer"), "status": status},
            "Smoke verdict per layer (1 pass, 0 fail or skipped; the status label says which)",
        )
    if smoke:
        m.add(
            "gpuprov_smoke_ok",
            int(bool(smoke.get("ok"))),
            None,
            "1 when every required layer passed",
        )
    if smoke and facts_time:
        m.add(
            "gpuprov_smoke_last_verdict_timestamp_seconds",
            float(facts_time),
            None,
            "When the shipped smoke verdicts (or the plan) last changed (Unix time)",
        )


# ---------------------------------------------------------------------------
# Measurements on the host


def driver_version() -> str | None:
    try:
        text = Path("/proc/driver/nvidia/version").read_text(encoding="utf-8")
    except OSError:
        return None
    m = re.search(r"Kernel Module\s+(?:for\s+\S+\s+)?([0-9]+\.[0-9.]+)", text)
    return m.group(1) if m else None


def torch_installed(venv: str) -> dict[str, str | None]:
    """torch's version and CUDA from its files in the venv (no import: fast, no GPU touch)."""
    if not venv:
        return {"torch": None, "cuda": None}
    for version_py in sorted(Path(venv).glob("lib/python3*/site-packages/torch/version.py")):
        text = version_py.read_text(encoding="utf-8", errors="replace")
        ver = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", text, re.M)
        cuda = re.search(r"^cuda\s*(?::\s*\S+\s*)?=\s*['\"]([^'\"]+)", text, re.M)
        return {"torch": ver.group(1) if ver else None, "cuda": cuda.group(1) if cuda else None}
    return {"torch": None, "cuda": None}


def collect(args: argparse.Namespace) -> str:
    started = time.monotonic()
    m = Metrics()
    smi = shutil.which("nvidia-smi")
    rows: list[dict[str, Any]] = []
    if smi:
        query = gpu_probe.smi_command(smi, QUERY_FIELDS, units=False)
        rc, out, _ = gpu_probe.run_command(query, args.smi_timeout)
        rows = parse_smi(out) if rc == 0 else []
    drv = driver_version() or (rows[0]["driver_version"] if rows else None)
    m.add(
        "gpuprov_gpu_driver_loaded", int(drv is not None), None, "1 when an NVIDIA driver answers"
    )
    m.add("gpuprov_gpu_smi_up", int(bool(rows)), None, "1 when nvidia-smi answered with GPUs")
    m.add(
        "gpuprov_gpu_pci_devices",
        len(gpu_probe.read_pci(args.sysfs_root)),
        None,
        "NVIDIA GPUs on the PCI bus (with or without a driver)",
    )
    xids: dict[tuple[str, str], int] = {}
    journalctl = shutil.which("journalctl")
    if journalctl and drv is not None:
        journal = [journalctl, "-k", "-b", "-o", "cat", "--no-pager", "-g", "NVRM: Xid"]
        rc, out, _ = gpu_probe.run_command(journal, 10)
        xids = parse_xid(out) if rc in (0, 1) else {}
    gpu_metrics(m, rows, xids)
    facts: dict[str, Any] = {}
    facts_time: float | None = None
    if args.facts and Path(args.facts).exists():
        facts = json.loads(Path(args.facts).read_text(encoding="utf-8"))
        facts_time = Path(args.facts).stat().st_mtime
    installed = {"driver": drv, **torch_installed(args.venv)}
    facts_metrics(m, facts, installed, facts_time)
    m.add(
        "gpuprov_collector_last_run_timestamp_seconds",
        time.time(),
        None,
        "When this file was written",
    )
    m.add(
        "gpuprov_collector_duration_seconds",
        round(time.monotonic() - started, 3),
        None,
        "Collection time",
    )
    return m.text()


def write_atomic(directory: str, text: str, name: str = "gpuprov.prom") -> Path:
    target = Path(directory, name)
    tmp = Path(directory, f".{name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(0o644)
    tmp.replace(target)
    return target


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", required=True, help="textfile collector directory")
    parser.add_argument("--facts", default="/etc/gpuprov/monitoring.json")
    parser.add_argument("--venv", default="", help="the torch environment (none: no torch)")
    parser.add_argument("--sysfs-root", default="/sys")
    parser.add_argument("--smi-timeout", type=float, default=20)
    parser.add_argument("--stdout", action="store_true", help="print instead of writing")
    args = parser.parse_args(argv)
    text = collect(args)
    if args.stdout:
        sys.stdout.write(text)
        return 0
    try:
        write_atomic(args.out, text)
    except OSError as exc:
        sys.stderr.write(f"gpuprov_gpu_metrics: cannot write {args.out}/gpuprov.prom: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
