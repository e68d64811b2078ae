#!/usr/bin/env python3
"""Fleet report: per host, the GPUs, the plan, what is installed and each smoke verdict.

    scripts/report.py [--reports DIR] [--html] [--quiet]

Reads what the playbooks wrote on the controller:
  <DIR>/plan/<host>.json   playbooks/plan.yml  ({host, gpu_info, plan})
  <DIR>/smoke/<host>.json  playbooks/smoke.yml ({host, ok, required, not_passed, layers})
  <DIR>/notebook/<host>.json, <DIR>/storage/<host>.json  playbooks/notebook.yml and
                           playbooks/storage.yml (the "environment" section; never a token)
and writes <DIR>/fleet.json, <DIR>/fleet.md (and <DIR>/fleet.html with --html), then
prints a summary table.

Exit codes: 0 every host with verdicts passed its required layers, 1 some host did not
(or has no verdicts), 2 usage error or no reports at all.
"""

from __future__ import annotations

import argparse
import html
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
LAYERS = ("L0", "L1", "L2", "L3", "PERF", "L4", "L5")
SHORT = {"pass": "pass", "pass (cpu)": "cpu", "fail": "FAIL", "skipped": "skip"}


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
    return {
        "host": host,
        "gpus": gpu_summary(gpus),
        "gpu_count": len(gpus),
        "driver": facts.get("driver_version"),
        "planned_driver_branch": (plan.get("driver") or {}).get("branch"),
        "planned_torch": planned,
        "plan_ok": plan.get("ok") if plan_doc else None,
        "installed_torch": installed_torch(layers),
        "layers": {
            name: {
                "status": verdicts[name].get("status"),
                "reason": verdicts[name].get("reason"),
                "hint": verdicts[name].get("hint"),
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


def build(reports: Path) -> dict[str, Any]:
    plans = load_dir(reports / "plan")
    smokes = load_dir(reports / "smoke")
    hosts = sorted(set(plans) | set(smokes))
    if not hosts:
        raise ReportError(
            f"no reports under {reports}/plan or {reports}/smoke: run playbooks/plan.yml "
            "and playbooks/smoke.yml first"
        )
    rows = [host_row(h, plans.get(h), smokes.get(h)) for h in hosts]
    return {
        "hosts": rows,
        "environment": environment_rows(reports),
        "summary": {
            "hosts": len(rows),
            "ok": sum(1 for r in rows if r["ok"]),
            "failed": [r["host"] for r in rows if r["smoked"] and not r["ok"]],
            "not_smoked": [r["host"] for r in rows if not r["smoked"]],
        },
    }


def environment_rows(reports: Path) -> list[dict[str, Any]]:
    """Per host: the notebook URL to tunnel to, the kernel's torch/CUDA, each storage verdict.

    Only these named fields are copied from reports/notebook and reports/storage (no token
    is ever in them, and none could pass through here).
    """
    notebooks, storages = load_dir(reports / "notebook"), load_dir(reports / "storage")
    rows = []
    for host in sorted(set(notebooks) | set(storages)):
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
    return SHORT.get(str(v["status"]), str(v["status"])) if v else "-"


def table(fleet: Mapping[str, Any]) -> list[list[str]]:
    head = ["host", "gpus", "driver", "plan torch", "installed torch", *LAYERS, "ok"]
    rows = [head]
    for r in fleet["hosts"]:
        rows.append(
            [
                r["host"],
                r["gpus"],
                str(r["driver"] or "-"),
                str(r["planned_torch"] or "-"),
                str(r["installed_torch"] or "-"),
                *(cell(r, layer) for layer in LAYERS),
                "yes" if r["ok"] else ("NO" if r["smoked"] else "not smoked"),
            ]
        )
    return rows


def render_text(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"


def render_md(fleet: Mapping[str, Any]) -> str:
    rows = table(fleet)
    out = ["# Fleet report", ""]
    s = fleet["summary"]
    out.append(f"{s['ok']} of {s['hosts']} hosts passed their required smoke layers.")
    out.append("")
    out.append("| " + " | ".join(rows[0]) + " |")
    out.append("|" + "---|" * len(rows[0]))
    out.extend("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows[1:])
    out.append("")
    out.append(
        "pass = passed, cpu = pass (cpu), skip = skipped (never counts as a pass), - = not run"
    )
    problems = [(r["host"], v) for r in fleet["hosts"] for v in r["not_passed"]]
    if problems:
        out += ["", "## Required layers that did not pass", ""]
        for host, v in problems:
            hint = next(
                (
                    r["layers"].get(v["layer"], {}).get("hint")
                    for r in fleet["hosts"]
                    if r["host"] == host
                ),
                None,
            )
            line = f"- **{host}** {v['layer']} {v['status']}: {v['reason']}"
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
            f'<td style="background:{color.get(c, "#fff")}">{html.escape(c)}</td>' for c in r
        )
        body.append(f"<tr>{tds}</tr>")
    return (
        "<!doctype html><meta charset=utf-8><title>gpuprov fleet report</title>"
        '<table border="1" cellpadding="4" style="border-collapse:collapse">'
        + "".join(body)
        + "</table>\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reports", type=Path, default=REPO / "reports")
    parser.add_argument("--html", action="store_true", help="also write fleet.html")
    parser.add_argument("--quiet", action="store_true", help="do not print the table")
    args = parser.parse_args(argv)
    try:
        fleet = build(args.reports)
    except ReportError as exc:
        sys.stderr.write(f"report.py: {exc}\n")
        return 2
    (args.reports / "fleet.json").write_text(json.dumps(fleet, indent=2) + "\n", encoding="utf-8")
    (args.reports / "fleet.md").write_text(render_md(fleet), encoding="utf-8")
    if args.html:
        (args.reports / "fleet.html").write_text(render_html(fleet), encoding="utf-8")
    if not args.quiet:
        sys.stdout.write(render_text(table(fleet)))
        if fleet["environment"]:
            sys.stdout.write("\n" + render_text(environment_table(fleet["environment"])))
        s = fleet["summary"]
        sys.stdout.write(f"\n{s['ok']}/{s['hosts']} hosts ok; reports in {args.reports}\n")
    s = fleet["summary"]
    return 0 if not s["failed"] and not s["not_smoked"] else 1


if __name__ == "__main__":
    sys.exit(main())
