"""The fleet report as text: the summary scripts/report.py prints (what `make lab` ends with)
and fleet.md. Pure functions of the fleet document (fleet.json)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SHORT = {"pass": "pass", "pass (cpu)": "cpu", "fail": "FAIL", "skipped": "skip"}


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
    if v and v.get("category") == "expected":
        mark = "exp"
    else:
        mark = SHORT.get(str(v["status"]), str(v["status"])) if v else "-"
        if v and v.get("category") == "fail" and mark != "FAIL":
            mark = f"FAIL:{mark}"  # a required layer that did not pass (pass (cpu) not allowed)
    return mark + ("*" if layer in row["required"] else "")


def table(fleet: Mapping[str, Any]) -> list[list[str]]:
    head = ["host", "gpus", "driver", "plan torch", "installed torch", "required"]
    head += [*fleet["layers"], "ok"]
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
                *(cell(r, layer) for layer in fleet["layers"]),
                "yes" if r["ok"] else ("NO" if r["smoked"] else "not smoked"),
            ]
        )
    return rows


LEGEND = (
    "pass = passed, cpu = pass (cpu), skip = skipped (never counts as a pass), - = not run, "
    "exp = did not pass where it cannot (expected: see below); * = required on that host; "
    "FAIL:cpu, FAIL:skip = a required layer that did not pass"
)


def finding_lines(fleet: Mapping[str, Any]) -> list[str]:
    """The layers that cannot pass where they ran (grouped by layer and reason), and the
    failures of layers a host does not require (they do not fail the host; they are named)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for e in fleet["findings"]["expected"]:
        groups.setdefault((e["layer"], e["reason"]), []).append(e["host"])
    lines = [f"expected: {layer} on {', '.join(h)}: {why}" for (layer, why), h in groups.items()]
    lines += [
        f"not required, failed: {f['host']} {f['layer']} {f['status']}: {f['reason']}"
        for f in fleet["findings"]["failopt"]
    ]
    return lines


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
    lines += finding_lines(fleet)
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
    if finding_lines(fleet):
        out += ["", "## Layers that did not pass outside the required ones", ""]
        out += [f"- {line}" for line in finding_lines(fleet)]
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
