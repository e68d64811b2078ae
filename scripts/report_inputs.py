"""The fleet report's readers of what the playbooks wrote on the controller (reports/).

  <DIR>/<kind>/<host>.json     plan, smoke, jupyterlab, storage, serving (roles/gpuprov_report)
  <DIR>/monitoring/prometheus-gpuprov.yml   roles/gpu_monitoring's scrape config

Only named fields are copied out of the notebook and storage reports (no token is ever in them,
and none could pass through here). Used by scripts/report.py.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import yaml

SCRAPE_FILE = Path("monitoring") / "prometheus-gpuprov.yml"


class ReportError(Exception):
    """Bad input (exit 2)."""


class NoReportsError(ReportError):
    """No plan or smoke report of any current host (exit 2; the page says so)."""


# The lists the reports hold (smoke layers and not_passed, storage profiles, serving endpoints):
# each a list of objects where it is there at all.
LISTS = ("layers", "not_passed", "profiles", "endpoints")


def check_shape(path: Path, doc: dict[str, Any]) -> None:
    """Refuse, naming the file, a report whose lists are not lists of objects or whose latency
    is not a number: a report edited by hand, or another tool's, not what gpuprov's roles write."""
    for key in LISTS:
        items = doc.get(key)
        if items is not None and not (
            isinstance(items, list) and all(isinstance(i, dict) for i in items)
        ):
            raise ReportError(f"{path}: {key} must be a list of JSON objects")
    for e in doc.get("endpoints") or []:
        latency = e.get("latency") or {}
        if not isinstance(latency, dict):
            raise ReportError(f"{path}: latency must be a JSON object, not {latency!r}")
        median = latency.get("median_ms")
        if median is not None and (isinstance(median, bool) or not isinstance(median, int | float)):
            raise ReportError(f"{path}: latency.median_ms must be a number, not {median!r}")


def load_dir(path: Path, hosts: Collection[str] | None = None) -> dict[str, dict[str, Any]]:
    """host -> JSON document of every <host>.json in ``path`` (missing dir: empty). With
    ``hosts`` (the inventory's), the reports of other hosts are kept unchecked: the report
    ignores them, so their shape, or a second copy, refuses nothing."""
    out: dict[str, dict[str, Any]] = {}
    files: dict[str, Path] = {}
    if not path.is_dir():
        return out
    for f in sorted(path.glob("*.json")):
        try:
            doc = json.loads(f.read_text(encoding="utf-8"))
        except UnicodeDecodeError as exc:
            raise ReportError(f"{f}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
        except json.JSONDecodeError as exc:
            raise ReportError(f"{f}: not JSON ({exc})") from exc
        if not isinstance(doc, dict):
            raise ReportError(f"{f}: expected a JSON object")
        host = str(doc.get("host") or f.stem)
        if hosts is not None and host not in hosts:
            out.setdefault(host, doc)
            continue
        check_shape(f, doc)
        if host in files:  # an older run's copy, or a file renamed: which is current is unknown
            raise ReportError(
                f"{files[host]} and {f} are both reports of host {host}: remove the one that is"
                " not current"
            )
        files[host] = f
        out[host] = doc
    return out


def environment_rows(reports: Path, hosts: Sequence[str]) -> list[dict[str, Any]]:
    """Per host of `hosts`: the notebook URL to tunnel to, the kernel's torch/CUDA, each
    storage verdict."""
    notebooks = load_dir(reports / "jupyterlab", hosts)
    storages = load_dir(reports / "storage", hosts)
    rows = []
    for host in sorted((set(notebooks) | set(storages)) & set(hosts)):
        nb = notebooks.get(host) or {}
        profiles = list((storages.get(host) or {}).get("profiles") or [])
        rows.append(
            {
                "host": host,
                "notebook": nb.get("verdict"),
                "url": nb.get("url"),
                "tunnel": nb.get("tunnel"),
                "kernel": nb.get("display_name"),
                "kernel_torch": nb.get("torch"),
                "kernel_cuda": nb.get("cuda"),
                "cuda_available": nb.get("cuda_available"),
                "storage": {str(p.get("profile")): str(p.get("verdict")) for p in profiles},
                "storage_reasons": [
                    str(p.get("reason") or "no reason given")
                    for p in profiles
                    if p.get("verdict") != "pass"
                ],
            }
        )
    return rows


def serving_rows(directory: Path, hosts: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """One row per host and endpoint of <DIR>/serving/<host>.json (roles/model_serving): the
    host's L6 export verdict, health, inference, latency (`hosts`: only these)."""
    rows: list[dict[str, Any]] = []
    for host, doc in sorted(load_dir(directory, hosts).items()):
        if hosts is not None and host not in hosts:
            continue
        export = str((doc.get("export") or {}).get("status") or "not run")
        for e in doc.get("endpoints") or []:
            latency = e.get("latency") or {}
            rows.append(
                {
                    "host": host,
                    "export": export,
                    "stack": e.get("stack"),
                    "endpoint": e.get("endpoint"),
                    "health": e.get("health", "not ready"),
                    "inference": "ok" if (e.get("inference") or {}).get("ok") else "FAIL",
                    "median_ms": latency.get("median_ms"),
                    "requests": latency.get("requests"),
                    "error": e.get("error"),
                }
            )
    return rows


def monitoring_targets(reports: Path, hosts: Sequence[str] | None = None) -> dict[str, list[str]]:
    """host -> ["job target", ...] from roles/gpu_monitoring's scrape config (the `host` label
    of each static target); empty when the monitoring play has not written one."""
    path = reports / SCRAPE_FILE
    if not path.is_file():
        return {}
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ReportError(f"{path}: not YAML ({exc})") from exc
    if not isinstance(doc, dict):
        raise ReportError(f"{path}: expected a mapping with scrape_configs")
    out: dict[str, list[str]] = {}
    for job in doc.get("scrape_configs") or []:
        for static in job.get("static_configs") or []:
            host = str((static.get("labels") or {}).get("host") or "")
            if not host or (hosts is not None and host not in hosts):
                continue
            for target in static.get("targets") or []:
                out.setdefault(host, []).append(f"{job.get('job_name', '?')}: {target}")
    return out
