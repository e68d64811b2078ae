#!/usr/bin/env python3
"""Fleet report: per host, the GPUs, the plan, what is installed and each smoke verdict.

    scripts/report.py [--reports DIR] [--inventory INVENTORY] [--html] [--history N] [--quiet]

Reads what the playbooks wrote on the controller:
  <DIR>/plan/<host>.json   playbooks/plan.yml  ({host, gpu_info, plan})
  <DIR>/smoke/<host>.json  playbooks/smoke.yml ({host, ok, required, not_passed, layers,
                           driver, torch_expected, time})
  <DIR>/jupyterlab/<host>.json, <DIR>/storage/<host>.json  playbooks/jupyterlab.yml and
                           playbooks/storage.yml (the "environment" section; never a token)
  <DIR>/serving/<host>.json, <DIR>/monitoring/prometheus-gpuprov.yml  playbooks/serving.yml
                           and playbooks/monitoring.yml
and writes <DIR>/fleet.json, <DIR>/fleet.md (and <DIR>/fleet.html with --html: one
self-contained page, docs/report.md), keeps the last N runs of each host in
<DIR>/history/<host>.json, then prints a summary: a headline (hosts that passed their
required layers, and the ones that did not with why), the required layers, a table, notes
(why a host's torch is not the plan's, layers that cannot pass there) and warnings.

A layer that cannot pass in a host's environment (the lab: no kernel module in a container)
reads "exp" (EXPECTED on the page), with its reason: scripts/report_verdicts.py says how that
is decided from declared data. It never counts as a pass.

With --inventory only the hosts of that inventory count (read with Ansible's inventory
API); report files of other hosts (earlier labs, removed hosts) are ignored and named
in one line, never shown as current.

A hint is shown only when it is a `gpu-compat` command that runs: each hint is run
through the CLI in-process (`explain` must recognise its text).

Exit codes: 0 every host with verdicts passed its required layers, 1 some host did not
(or has no verdicts), 2 usage error or no reports at all.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import importlib.util
import io
import json
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import report_history
import report_page
from report_inputs import (
    NoReportsError,
    ReportError,
    environment_rows,
    load_dir,
    monitoring_targets,
    serving_rows,
)
from report_text import (
    aligned,
    environment_table,
    headline,
    render_md,
    render_serving,
    render_text,
    required_line,
)
from report_verdicts import NO_KERNEL_MODULE, PACKAGES_UNREAD, findings, layer_rows, torch_notes

# The report's API for tests and other scripts, wherever each piece lives.
__all__ = [
    "LAYERS",
    "ReportError",
    "build",
    "environment_rows",
    "headline",
    "hint_runs",
    "installed_driver",
    "main",
    "monitoring_targets",
    "render_md",
    "render_serving",
    "render_text",
    "required_line",
    "serving_rows",
]

REPO = Path(__file__).resolve().parent.parent
LAYERS = ("L0", "L1", "L2", "L3", "PERF", "L4", "L5", "L6")
# A host's verdicts this much older than the fleet's newest are named (unreachable since?).
STALE_AFTER = dt.timedelta(hours=1)


def gpu_summary(gpus: Sequence[Mapping[str, Any]]) -> str:
    """'2x Tesla M40, 1x Tesla K40m' in first-seen order; '-' for none."""
    counts: dict[str, int] = {}
    for g in gpus:
        name = str(g.get("name") or g.get("pci_id") or "unknown")
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{n}x {name}" for name, n in counts.items()) or "-"


def layer_detail(layers: Sequence[Mapping[str, Any]], names: Sequence[str], key: str) -> str | None:
    """``details[key]`` of the first of the layers ``names`` (in that order) that reported it."""
    for name in names:
        for v in layers:
            if v.get("layer") == name and (v.get("details") or {}).get(key):
                return str(v["details"][key])
    return None


def installed_torch(layers: Sequence[Mapping[str, Any]]) -> str | None:
    """The torch version the smoke layers saw on the host (L3, L4 or L5 details)."""
    return layer_detail(layers, ("L3", "L4", "L5"), "torch")


def running_driver(layers: Sequence[Mapping[str, Any]], facts: Mapping[str, Any]) -> str | None:
    """The driver version that answered: L1's (the smoke run, after the driver play changed
    what it would), else the plan's GPU scan's (taken before the driver play ran)."""
    version = layer_detail(layers, ("L1",), "driver_version") or facts.get("driver_version")
    return str(version) if version else None


def upstream_version(debian_version: str) -> str:
    """'470.256.02' from a Debian package version such as '1:470.256.02-1~deb12u1'."""
    return re.sub(r"^\d+:", "", debian_version).rsplit("-", 1)[0]


def installed_driver(running: str | None, smoke_driver: Mapping[str, Any] | None) -> str | None:
    """What drives the GPUs: the running driver's version (NVML/nvidia-smi answered), else
    the installed NVIDIA package's version, marked when no kernel module is loaded (the lab:
    a container has no kernel of its own). Unknown when the smoke run could not read the
    packages (``packages_unread``, roles/gpu_smoke). None: no driver package and none running."""
    if running:
        return str(running)
    packages: Mapping[str, str] = dict((smoke_driver or {}).get("packages") or {})
    if not packages:
        return PACKAGES_UNREAD if (smoke_driver or {}).get("packages_unread") else None
    # The package that carries nvidia-smi names the branch best; else any NVIDIA package.
    smi = sorted(n for n in packages if n.endswith("-smi"))
    name = smi[0] if smi else sorted(packages)[0]
    version = upstream_version(str(packages[name]))
    if (smoke_driver or {}).get("kernel_module") is False:
        return f"{version} ({NO_KERNEL_MODULE})"
    return version


@functools.cache
def hint_runs(hint: str) -> bool:
    """Whether a hint may be shown: advice in words is; a `gpu-compat` command is when each
    of its commands succeeds (for `explain`: the text is a known error message). Run
    in-process, output discarded."""
    from compat import cli

    try:
        lexer = shlex.shlex(hint, posix=True, punctuation_chars=";")
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: not paste-able
        return False
    commands: list[list[str]] = [[]]
    for tok in tokens:
        if tok == ";":
            commands.append([])
        else:
            commands[-1].append(tok)
    commands = [c for c in commands if c]
    if not commands:
        return False
    if commands[0][0] != "gpu-compat":
        return True  # advice in words ("run the pytorch role ..."), not a command
    for argv in commands:
        if argv[0] != "gpu-compat":
            return False
        sink = io.StringIO()
        try:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                rc = cli.main(argv[1:])
        except SystemExit as exc:  # argparse: a usage error in the hint
            rc = exc.code if isinstance(exc.code, int) else 2
        if rc != 0:
            return False
    return True


def host_row(
    host: str, plan_doc: Mapping[str, Any] | None, smoke_doc: Mapping[str, Any] | None
) -> dict[str, Any]:
    plan = dict((plan_doc or {}).get("plan") or {})
    facts = dict((plan_doc or {}).get("gpu_info") or {})
    layers: list[Mapping[str, Any]] = list((smoke_doc or {}).get("layers") or [])
    gpus: list[Mapping[str, Any]] = list(facts.get("gpus") or [])
    if not gpus:
        for v in layers:
            if v.get("layer") == "L0":
                gpus = list((v.get("details") or {}).get("gpus") or [])
    variant = plan.get("variant")
    planned = f"{plan['torch']}+{variant}" if plan.get("torch") and variant else plan.get("torch")
    torch = installed_torch(layers)
    notes, warnings = torch_notes(host, planned, torch, smoke_doc)
    verdicts, contradictions = layer_rows(smoke_doc, plan_doc, torch, LAYERS)
    notes += [f"{host}: {n}" for n in contradictions]
    for v in verdicts.values():
        h = v.get("hint")
        v["hint"] = str(h) if h and hint_runs(str(h)) else None
    smoke_driver = (smoke_doc or {}).get("driver")
    keys = ("index", "name", "pci_id", "bus_id", "compute_capability", "memory_mib")
    return {
        "host": host,
        "gpus": gpu_summary(gpus),
        "gpu_count": len(gpus),
        "gpu_list": [{k: g.get(k) for k in keys if g.get(k) is not None} for g in gpus],
        "container": facts.get("virtualization") if facts.get("virtualization") != "none" else None,
        "driver": installed_driver(running_driver(layers, facts), smoke_driver),
        "driver_packages": dict((smoke_driver or {}).get("packages") or {}),
        "planned_driver_branch": (plan.get("driver") or {}).get("branch"),
        "planned_torch": planned,
        "plan_ok": plan.get("ok") if plan_doc else None,
        "installed_torch": torch,
        "notes": notes,
        "warnings": warnings,
        "layers": verdicts,
        "required": list((smoke_doc or {}).get("required") or []),
        "not_passed": list((smoke_doc or {}).get("not_passed") or []),
        "smoke_time": (smoke_doc or {}).get("time"),
        "ok": bool(smoke_doc.get("ok")) if smoke_doc else False,
        "smoked": smoke_doc is not None,
    }


def why_not(row: Mapping[str, Any]) -> str:
    """Why a host did not pass its required layers, in one short phrase."""
    if not row["smoked"]:
        return "no smoke verdicts (playbooks/smoke.yml did not run on it)"
    parts = [
        f"{v.get('layer')} {v.get('status')}: {v.get('reason')}" for v in row["not_passed"]
    ] or ["not ok"]
    return "; ".join(parts)


def _when(text: object) -> dt.datetime | None:
    """A smoke report's time (UTC, as run_all.py writes it); None when absent or unreadable."""
    try:
        when = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00")) if text else None
    except ValueError:
        return None
    return when.replace(tzinfo=dt.UTC) if when and when.tzinfo is None else when


def note_stale(rows: Sequence[dict[str, Any]]) -> None:
    """A warning on each host whose verdicts are much older than the fleet's newest: reports
    are rewritten per run, so an old one is the last run that reached the host, and a pass in
    it says nothing of the host now (the page lists it under "Needs attention")."""
    times = {r["host"]: _when(r["smoke_time"]) for r in rows}
    known = [t for t in times.values() if t is not None]
    if not known:
        return
    newest = max(known)
    for r in rows:
        t = times[r["host"]]
        if t is not None and newest - t > STALE_AFTER:
            hours = (newest - t).total_seconds() / 3600
            r["warnings"].append(
                f"{r['host']}: its verdicts are from {r['smoke_time']}, {hours:.1f} h before the "
                "fleet's newest: the last smoke run did not reach it (unreachable, or --limit)"
            )


def empty_fleet(message: str) -> dict[str, Any]:
    """The fleet document when there are no reports (the page says so instead of going stale)."""
    summary = {"hosts": 0, "ok": 0, "failed": [], "not_smoked": [], "why": {}, "ignored": []}
    return {
        "layers": list(LAYERS),
        "hosts": [],
        "required": {},
        "environment": [],
        "findings": findings([]),
        "summary": summary,
        "message": message,
    }


def build(reports: Path, hosts: Sequence[str] | None = None) -> dict[str, Any]:
    """The fleet document. `hosts`: the current inventory's hosts (None: every report)."""
    plans = load_dir(reports / "plan", hosts)
    smokes = load_dir(reports / "smoke", hosts)
    found = set(plans) | set(smokes)
    current = sorted(found) if hosts is None else sorted(hosts)
    ignored = sorted(found - set(current))
    if not current or not (set(current) & found):
        where = f" for the hosts of the inventory ({', '.join(current)})" if hosts else ""
        raise NoReportsError(
            f"no reports under {reports}/plan or {reports}/smoke{where}: run playbooks/plan.yml "
            "and playbooks/smoke.yml first"
        )
    rows = [host_row(h, plans.get(h), smokes.get(h)) for h in current]
    note_stale(rows)
    required: dict[str, list[str]] = {}
    for r in rows:
        for layer in r["required"]:
            required.setdefault(layer, []).append(r["host"])
    return {
        "layers": list(LAYERS),
        "hosts": rows,
        "required": {k: required[k] for k in LAYERS if k in required},
        "environment": environment_rows(reports, current),
        "findings": findings(rows),
        "summary": {
            "hosts": len(rows),
            "ok": sum(1 for r in rows if r["ok"]),
            "failed": [r["host"] for r in rows if r["smoked"] and not r["ok"]],
            "not_smoked": [r["host"] for r in rows if not r["smoked"]],
            "why": {r["host"]: why_not(r) for r in rows if not r["ok"]},
            "ignored": ignored,
        },
    }


def inventory_hosts(path: Path) -> list[str]:
    """The hosts of an Ansible inventory (Ansible's own inventory API)."""
    from gpuprov_lab.ansible_inventory import InventoryError, load

    try:
        return sorted(load(path, with_vars=False))
    except InventoryError as exc:
        raise ReportError(str(exc)) from exc


OUTPUTS = ("fleet.json", "fleet.md", "fleet.html")


def remove_outputs(reports: Path, keep: Sequence[str] = ()) -> list[str]:
    """Remove the fleet.* files an earlier run wrote in ``reports`` (but ``keep``), so that a
    run that cannot report leaves no older report looking current; the names removed."""
    removed = []
    for name in OUTPUTS:
        if name not in keep and (reports / name).is_file():
            (reports / name).unlink()
            removed.append(name)
    return removed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reports", type=Path, default=REPO / "reports")
    parser.add_argument(
        "--inventory", type=Path, help="only the hosts of this inventory (others ignored)"
    )
    parser.add_argument("--html", action="store_true", help="also write fleet.html (one page)")
    parser.add_argument(
        "--history",
        type=int,
        default=report_history.KEEP,
        metavar="N",
        help=f"runs kept per host in <reports>/history (default {report_history.KEEP}; 0: none)",
    )
    parser.add_argument("--quiet", action="store_true", help="do not print the summary")
    args = parser.parse_args(argv)
    if importlib.util.find_spec("compat") is None:  # the hints are checked by running compat
        sys.stderr.write(
            f"report.py: the compat package is not installed for {sys.executable}: run it with "
            "the virtualenv's Python (`make report`, or .venv/bin/python scripts/report.py)\n"
        )
        return 2
    from compat import __version__

    about = {
        "generated": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "inventory": str(args.inventory) if args.inventory else None,
        "version": __version__,
    }
    try:  # an --inventory that cannot be read says nothing of the reports: they stay
        hosts = inventory_hosts(args.inventory) if args.inventory else None
    except ReportError as exc:
        sys.stderr.write(f"report.py: {exc}\n")
        return 2
    try:
        fleet = build(args.reports, hosts)
        fleet["serving"] = serving_rows(args.reports / "serving", hosts)
        fleet["monitoring"] = monitoring_targets(args.reports, hosts)
        fleet["history"] = report_history.record(
            args.reports / "history", fleet["hosts"], args.history
        )
    except ReportError as exc:
        sys.stderr.write(f"report.py: {exc}\n")
        page = None
        if isinstance(exc, NoReportsError) and args.html and args.reports.is_dir():
            page = report_page.render({**empty_fleet(str(exc)), **about})
            (args.reports / "fleet.html").write_text(page, encoding="utf-8")
        removed = remove_outputs(args.reports, keep=["fleet.html"] if page else [])
        if removed:
            sys.stderr.write(
                f"report.py: removed {', '.join(removed)} of an earlier run: they do not describe"
                f" the reports under {args.reports} now\n"
            )
        return 2
    fleet.update(about)
    (args.reports / "fleet.json").write_text(json.dumps(fleet, indent=2) + "\n", encoding="utf-8")
    (args.reports / "fleet.md").write_text(render_md(fleet), encoding="utf-8")
    written = ["fleet.md", "fleet.json"]
    if args.html:
        (args.reports / "fleet.html").write_text(report_page.render(fleet), encoding="utf-8")
        written.append("fleet.html")
    if not args.quiet:
        sys.stdout.write(render_text(fleet))
        if fleet["serving"]:
            sys.stdout.write("\nServing\n" + render_serving(fleet["serving"]))
        if fleet["environment"]:
            env = environment_table(fleet["environment"])
            sys.stdout.write("\nNotebooks and storage\n" + "\n".join(aligned(env)) + "\n")
        sys.stdout.write(f"reports in {args.reports} ({', '.join(written)})\n")
    s = fleet["summary"]
    return 0 if not s["failed"] and not s["not_smoked"] else 1


if __name__ == "__main__":
    sys.exit(main())
