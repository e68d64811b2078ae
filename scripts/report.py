#!/usr/bin/env python3
"""Fleet report: per host, the GPUs, the plan, what is installed and each smoke verdict.

    scripts/report.py [--reports DIR] [--inventory INVENTORY] [--html] [--quiet]

Reads what the playbooks wrote on the controller:
  <DIR>/plan/<host>.json   playbooks/plan.yml  ({host, gpu_info, plan})
  <DIR>/smoke/<host>.json  playbooks/smoke.yml ({host, ok, required, not_passed, layers,
                           driver, torch_expected})
  <DIR>/notebook/<host>.json, <DIR>/storage/<host>.json  playbooks/notebook.yml and
                           playbooks/storage.yml (the "environment" section; never a token)
and writes <DIR>/fleet.json, <DIR>/fleet.md (and <DIR>/fleet.html with --html), then
prints a summary: a headline (hosts that passed their required layers, and the ones that
did not with why), the required layers, a table, notes and warnings.

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
import functools
import html
import importlib.util
import io
import json
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
LAYERS = ("L0", "L1", "L2", "L3", "PERF", "L4", "L5", "L6")
SHORT = {"pass": "pass", "pass (cpu)": "cpu", "fail": "FAIL", "skipped": "skip"}
NO_KERNEL_MODULE = "userspace only: no kernel module"


class ReportError(Exception):
    """Bad input (exit 2)."""


def load_dir(path: Path) -> dict[str, dict[str, Any]]:
    """host -> JSON document of every <host>.json in ``path`` (missing dir: empty)."""
    out: dict[str, dict[str, Any]] = {}
    if not path.is_dir():
        return out
    for f in sorted(path.glob("*.json")):
        try:
            doc = json.loads(f.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ReportError(f"{f}: not JSON ({exc})") from exc
        if not isinstance(doc, dict):
            raise ReportError(f"{f}: expected a JSON object")
        out[str(doc.get("host") or f.stem)] = doc
    return out


def gpu_summary(gpus: Sequence[Mapping[str, Any]]) -> str:
    """'2x Tesla M40, 1x Tesla K40m' in first-seen order; '-' for none."""
    counts: dict[str, int] = {}
    for g in gpus:
        name = str(g.get("name") or g.get("pci_id") or "unknown")
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{n}x {name}" for name, n in counts.items()) or "-"


def installed_torch(layers: Sequence[Mapping[str, Any]]) -> str | None:
    """The torch version the smoke layers saw on the host (L3, L4 or L5 details)."""
    for layer in ("L3", "L4", "L5"):
        for v in layers:
            if v.get("layer") == layer and (v.get("details") or {}).get("torch"):
                return str(v["details"]["torch"])
    return None


def upstream_version(debian_version: str) -> str:
    """'470.256.02' from a Debian package version such as '1:470.256.02-1~deb12u1'."""
    return re.sub(r"^\d+:", "", debian_version).rsplit("-", 1)[0]


def installed_driver(running: str | None, smoke_driver: Mapping[str, Any] | None) -> str | None:
    """What drives the GPUs: the running driver's version (NVML/nvidia-smi answered), else
    the installed NVIDIA package's version, marked when no kernel module is loaded (the lab:
    a container has no kernel of its own). None: no driver package and none running."""
    if running:
        return str(running)
    packages: Mapping[str, str] = dict((smoke_driver or {}).get("packages") or {})
    if not packages:
        return None
    # The package that carries nvidia-smi names the branch best; else any NVIDIA package.
    smi = sorted(n for n in packages if n.endswith("-smi"))
    name = smi[0] if smi else sorted(packages)[0]
    version = upstream_version(str(packages[name]))
    if (smoke_driver or {}).get("kernel_module") is False:
        return f"{version} ({NO_KERNEL_MODULE})"
    return version


def torch_notes(
    host: str, planned: str | None, installed: str | None, expected: Mapping[str, Any] | None
) -> tuple[list[str], list[str]]:
    """(notes, warnings) about planned vs installed torch.

    A difference is a note when the inventory declares it (gpu_smoke_expected_torch: the
    version the host is meant to have instead of the plan's, with the reason), else a
    warning."""
    if not planned or not installed or planned == installed:
        return [], []
    want = str((expected or {}).get("torch") or "")
    why = str((expected or {}).get("reason") or "").strip()
    if want and want == installed:
        note = f"{host}: torch {installed} instead of the plan's {planned}, on purpose"
        return [note + (f": {why}" if why else "")], []
    declared = f" (the inventory expects {want})" if want else ""
    return [], [
        f"{host}: installed torch {installed} is not the plan's {planned}{declared}; "
        "re-run site.yml, or declare the intent with gpu_smoke_expected_torch"
    ]


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
    verdicts = {str(v.get("layer")): v for v in layers}
    variant = plan.get("variant")
    planned = f"{plan['torch']}+{variant}" if plan.get("torch") and variant else plan.get("torch")
    torch = installed_torch(layers)
    notes, warnings = torch_notes(host, planned, torch, (smoke_doc or {}).get("torch_expected"))
    smoke_driver = (smoke_doc or {}).get("driver")

    def hint(v: Mapping[str, Any]) -> str | None:
        h = v.get("hint")
        return str(h) if h and hint_runs(str(h)) else None

    return {
        "host": host,
        "gpus": gpu_summary(gpus),
        "gpu_count": len(gpus),
        "driver": installed_driver(facts.get("driver_version"), smoke_driver),
        "driver_packages": dict((smoke_driver or {}).get("packages") or {}),
        "planned_driver_branch": (plan.get("driver") or {}).get("branch"),
        "planned_torch": planned,
        "plan_ok": plan.get("ok") if plan_doc else None,
        "installed_torch": torch,
        "notes": notes,
        "warnings": warnings,
        "layers": {
            name: {
                "status": verdicts[name].get("status"),
                "reason": verdicts[name].get("reason"),
                "hint": hint(verdicts[name]),
            }
            for name in LAYERS
            if name in verdicts
        },
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


def build(reports: Path, hosts: Sequence[str] | None = None) -> dict[str, Any]:
    """The fleet document. `hosts`: the current inventory's hosts (None: every report)."""
    plans = load_dir(reports / "plan")
    smokes = load_dir(reports / "smoke")
    found = set(plans) | set(smokes)
    current = sorted(found) if hosts is None else sorted(hosts)
    ignored = sorted(found - set(current))
    if not current or not (set(current) & found):
        where = f" for the hosts of the inventory ({', '.join(current)})" if hosts else ""
        raise ReportError(
            f"no reports under {reports}/plan or {reports}/smoke{where}: run playbooks/plan.yml "
            "and playbooks/smoke.yml first"
        )
    rows = [host_row(h, plans.get(h), smokes.get(h)) for h in current]
    required: dict[str, list[str]] = {}
    for r in rows:
        for layer in r["required"]:
            required.setdefault(layer, []).append(r["host"])
    return {
        "hosts": rows,
        "required": {k: required[k] for k in LAYERS if k in required},
        "environment": environment_rows(reports, current),
        "summary": {
            "hosts": len(rows),
            "ok": sum(1 for r in rows if r["ok"]),
            "failed": [r["host"] for r in rows if r["smoked"] and not r["ok"]],
            "not_smoked": [r["host"] for r in rows if not r["smoked"]],
            "why": {r["host"]: why_not(r) for r in rows if not r["ok"]},
            "ignored": ignored,
        },
    }


def headline(fleet: Mapping[str, Any]) -> str:
    s = fleet["summary"]
    line = f"{s['ok']}/{s['hosts']} hosts passed their required layers"
    if s["why"]:
        line += "; did not: " + "; ".join(f"{h} ({why})" for h, why in s["why"].items())
    return line


def required_line(fleet: Mapping[str, Any]) -> str:
    """'required layers: L0 on every host; L5 on a, b' (skipped never counts as a pass)."""
    everyone = {r["host"] for r in fleet["hosts"]}
    parts = [
        f"{layer} on {'every host' if set(hosts) == everyone else ', '.join(hosts)}"
        for layer, hosts in fleet["required"].items()
    ]
    return "required layers: " + ("; ".join(parts) if parts else "none")


def environment_rows(reports: Path, hosts: Sequence[str]) -> list[dict[str, Any]]:
    """Per host of `hosts`: the notebook URL to tunnel to, the kernel's torch/CUDA, each
    storage verdict.

    Only these named fields are copied from reports/notebook and reports/storage (no token
    is ever in them, and none could pass through here).
    """
    notebooks, storages = load_dir(reports / "notebook"), load_dir(reports / "storage")
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
                    str(p["reason"]) for p in profiles if p.get("verdict") != "pass"
                ],
            }
        )
    return rows


def environment_table(rows: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    out = [["host", "notebook", "url (tunnel to it)", "kernel", "torch", "cuda", "storage"]]
    for r in rows:
        storage = ", ".join(f"{k} {v}" for k, v in r["storage"].items())
        out.append(
            [
                r["host"],
                str(r["notebook"] or "-"),
                str(r["url"] or "-"),
                str(r["kernel"] or "-"),
                str(r["kernel_torch"] or "-"),
                str(r["kernel_cuda"] or "none"),
                storage or "-",
            ]
        )
    return out


def cell(row: Mapping[str, Any], layer: str) -> str:
    v = row["layers"].get(layer)
    mark = SHORT.get(str(v["status"]), str(v["status"])) if v else "-"
    return mark + ("*" if layer in row["required"] else "")


def table(fleet: Mapping[str, Any]) -> list[list[str]]:
    head = ["host", "gpus", "driver", "plan torch", "installed torch", "required", *LAYERS, "ok"]
    rows = [head]
    for r in fleet["hosts"]:
        rows.append(
            [
                r["host"],
                r["gpus"],
                str(r["driver"] or "-"),
                str(r["planned_torch"] or "-"),
                str(r["installed_torch"] or "-"),
                ",".join(r["required"]) or "-",
                *(cell(r, layer) for layer in LAYERS),
                "yes" if r["ok"] else ("NO" if r["smoked"] else "not smoked"),
            ]
        )
    return rows


LEGEND = (
    "pass = passed, cpu = pass (cpu), skip = skipped (never counts as a pass), - = not run; "
    "* = required on that host"
)


def problems(fleet: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any], str | None]]:
    """(host, verdict, hint) of each required layer that did not pass."""
    out = []
    for r in fleet["hosts"]:
        for v in r["not_passed"]:
            out.append((r["host"], v, (r["layers"].get(v.get("layer")) or {}).get("hint")))
    return out


def aligned(rows: Sequence[Sequence[str]]) -> list[str]:
    """A text table: the first row is the header, a rule under it, columns padded."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    body = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    body.insert(1, "  ".join("-" * w for w in widths))
    return body


def render_text(fleet: Mapping[str, Any]) -> str:
    lines = [headline(fleet), required_line(fleet), ""]
    lines += aligned(table(fleet))
    lines.append(LEGEND)
    for r in fleet["hosts"]:
        lines += [f"note: {n}" for n in r["notes"]]
        lines += [f"WARNING: {w}" for w in r["warnings"]]
    for host, v, hint in problems(fleet):
        lines.append(f"{host} {v.get('layer')} {v.get('status')}: {v.get('reason')}")
        if hint:
            lines.append(f"  hint: {hint}")
    ignored = fleet["summary"]["ignored"]
    if ignored:
        lines.append(
            f"ignored: reports of {len(ignored)} host(s) not in the inventory "
            f"({', '.join(ignored)})"
        )
    return "\n".join(lines) + "\n"


def render_md(fleet: Mapping[str, Any]) -> str:
    rows = table(fleet)
    out = ["# Fleet report", "", headline(fleet) + ".", "", required_line(fleet) + ".", ""]
    out.append("| " + " | ".join(rows[0]) + " |")
    out.append("|" + "---|" * len(rows[0]))
    out.extend("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows[1:])
    out += ["", LEGEND]
    notes = [n for r in fleet["hosts"] for n in r["notes"]]
    warnings = [w for r in fleet["hosts"] for w in r["warnings"]]
    if notes or warnings:
        out += ["", "## Notes and warnings", ""]
        out += [f"- {n}" for n in notes] + [f"- **warning**: {w}" for w in warnings]
    if problems(fleet):
        out += ["", "## Required layers that did not pass", ""]
        for host, v, hint in problems(fleet):
            line = f"- **{host}** {v.get('layer')} {v.get('status')}: {v.get('reason')}"
            out.append(line + (f" (hint: `{hint}`)" if hint else ""))
    env = environment_table(fleet.get("environment") or [])
    if len(env) > 1:
        out += ["", "## Notebooks and storage", "", "| " + " | ".join(env[0]) + " |"]
        out.append("|" + "---|" * len(env[0]))
        out.extend("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in env[1:])
    return "\n".join(out) + "\n"


def render_html(fleet: Mapping[str, Any]) -> str:
    rows = table(fleet)
    color = {"pass": "#c8f7c5", "cpu": "#e4f7c5", "FAIL": "#f7c5c5", "skip": "#eeeeee"}
    body = ["<tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in rows[0]) + "</tr>"]
    for r in rows[1:]:
        tds = "".join(
            f'<td style="background:{color.get(c.rstrip("*"), "#fff")}">{html.escape(c)}</td>'
            for c in r
        )
        body.append(f"<tr>{tds}</tr>")
    return (
        "<!doctype html><meta charset=utf-8><title>gpuprov fleet report</title>"
        f"<p>{html.escape(headline(fleet))}</p><p>{html.escape(required_line(fleet))}</p>"
        '<table border="1" cellpadding="4" style="border-collapse:collapse">'
        + "".join(body)
        + "</table>\n"
    )


def inventory_hosts(path: Path) -> list[str]:
    """The hosts of an Ansible inventory (Ansible's own inventory API)."""
    from gpuprov_lab.ansible_inventory import InventoryError, load

    try:
        return sorted(load(path, with_vars=False))
    except InventoryError as exc:
        raise ReportError(str(exc)) from exc


# --- Serving (roles/model_serving): <DIR>/serving/<host>.json -----------------------------


def serving_rows(directory: Path, hosts: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """One row per host and endpoint: the host's L6 export verdict, health, inference, latency
    (`hosts`: only these, as for the fleet table)."""
    rows: list[dict[str, Any]] = []
    for host, doc in sorted(load_dir(directory).items()):
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


def render_serving(rows: Sequence[Mapping[str, Any]]) -> str:
    """The serving table (latency is the median round trip, printed, never judged)."""
    head = ["host", "export (L6)", "stack", "endpoint", "health", "inference", "median ms"]
    body = [
        [
            str(r["host"]),
            str(r["export"]),
            str(r["stack"]),
            str(r["endpoint"]),
            str(r["health"]),
            str(r["inference"]),
            "-" if r["median_ms"] is None else f"{r['median_ms']:.2f} (n={r['requests']})",
        ]
        for r in rows
    ]
    return "\n".join(aligned([head, *body])) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reports", type=Path, default=REPO / "reports")
    parser.add_argument(
        "--inventory", type=Path, help="only the hosts of this inventory (others ignored)"
    )
    parser.add_argument("--html", action="store_true", help="also write fleet.html")
    parser.add_argument("--quiet", action="store_true", help="do not print the summary")
    args = parser.parse_args(argv)
    if importlib.util.find_spec("compat") is None:  # the hints are checked by running compat
        sys.stderr.write(
            f"report.py: the compat package is not installed for {sys.executable}: run it with "
            "the virtualenv's Python (`make report`, or .venv/bin/python scripts/report.py)\n"
        )
        return 2
    try:
        hosts = inventory_hosts(args.inventory) if args.inventory else None
        fleet = build(args.reports, hosts)
    except ReportError as exc:
        sys.stderr.write(f"report.py: {exc}\n")
        return 2
    fleet["serving"] = serving_rows(args.reports / "serving", hosts)
    (args.reports / "fleet.json").write_text(json.dumps(fleet, indent=2) + "\n", encoding="utf-8")
    (args.reports / "fleet.md").write_text(render_md(fleet), encoding="utf-8")
    if args.html:
        (args.reports / "fleet.html").write_text(render_html(fleet), encoding="utf-8")
    if not args.quiet:
        sys.stdout.write(render_text(fleet))
        if fleet["serving"]:
            sys.stdout.write("\nServing\n" + render_serving(fleet["serving"]))
        if fleet["environment"]:
            env = environment_table(fleet["environment"])
            sys.stdout.write("\nNotebooks and storage\n" + "\n".join(aligned(env)) + "\n")
        sys.stdout.write(f"reports in {args.reports} (fleet.md, fleet.json)\n")
    s = fleet["summary"]
    return 0 if not s["failed"] and not s["not_smoked"] else 1


if __name__ == "__main__":
    sys.exit(main())
