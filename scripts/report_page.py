"""The fleet report as one page people read: <reports>/fleet.html (scripts/report.py --html).

A pure function of the fleet document (what fleet.json holds): a header (inventory, when,
gpuprov's version, host counts), what needs attention, a fleet overview (hosts x layers, each
cell saying its verdict in words as well as colour), the layers that cannot pass where they
ran (EXPECTED, with why), then one section per host, failing hosts first: GPUs, driver,
planned vs installed stack with the reason where they differ, each layer's verdict with its
reason and hint (<details>), recent runs, serving, notebook, storage and monitoring.
Self-contained (inline style and script, no external asset); readable without JavaScript,
which only adds filtering and sorting. docs/report.md describes it.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from report_assets import SCRIPT, css
from report_text import headline, required_line
from report_verdicts import LABELS

RESULT = {0: ("FAILED", "v-fail"), 1: ("NO VERDICTS", "v-unknown"), 2: ("PASSED", "v-pass")}
SRC = "derived from the reports' facts, not required there: docs/report.md"
GLYPH = {True: ("\u2713", "v-pass", "passed"), False: ("\u2717", "v-fail", "did not pass")}


def esc(value: object) -> str:
    return html.escape("" if value is None else str(value))


def anchor(host: str) -> str:
    """The id of a host's section: letters, digits and "-" as they are, every other character
    as _XX_ (its code point in hex), so that two host names never share an id (gpu.a01 and
    gpu-a01 did)."""
    return "host-" + re.sub(r"[^A-Za-z0-9-]", lambda m: f"_{ord(m.group()):x}_", host)


def rank(row: Mapping[str, Any]) -> int:
    """0 failed, 1 no verdicts, 2 passed with warnings or failures outside the required
    layers, 3 passed: the page's order (failing hosts first) and its "problems" filter."""
    if not row["smoked"]:
        return 1
    if not row["ok"]:
        return 0
    if row["warnings"] or any(v["category"] == "failopt" for v in row["layers"].values()):
        return 2
    return 3


def result(row: Mapping[str, Any]) -> tuple[str, str]:
    return RESULT[min(rank(row), 2)]


def ordered(hosts: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted(hosts, key=lambda r: (rank(r), str(r["host"])))


def badge(text: str, cls: str) -> str:
    return f'<span class="badge {cls}">{esc(text)}</span>'


def own(host: str, text: str) -> str:
    """A host's note without the leading "host: " (the section already names it)."""
    return text[len(host) + 2 :] if text.startswith(f"{host}: ") else text


def word(text: object) -> str:
    """A verdict word of the serving, notebook and storage reports as a badge (in words too)."""
    t = str(text if text is not None else "-")
    cls = {"pass": "v-pass", "ok": "v-pass", "ready": "v-pass", "fail": "v-fail"}.get(t.lower())
    return badge(t, cls or ("v-fail" if t.lower().startswith("not") else "v-skip"))


def ul(items: Iterable[str], cls: str = "") -> str:
    body = "".join(f"<li>{i}</li>" for i in items)
    return f'<ul class="{cls}">{body}</ul>' if body else ""


def table(head: Sequence[str], rows: Iterable[Sequence[str]], caption: str = "") -> str:
    """A table of already escaped cells; the first cell of each row is its header."""
    th = "".join(f'<th scope="col">{h}</th>' for h in head)
    trs = "".join(
        f'<tr><th scope="row">{r[0]}</th>' + "".join(f"<td>{c}</td>" for c in r[1:]) + "</tr>"
        for r in rows
    )
    cap = f"<caption>{caption}</caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"


def cell(row: Mapping[str, Any], layer: str) -> str:
    v = row["layers"].get(layer)
    cat = v["category"] if v else "none"
    text = LABELS[cat]
    if v and cat == "pass" and v["status"] != "pass":
        text = str(v["status"])  # pass (cpu)
    if v and cat == "fail" and v["status"] != "fail":
        text = f"FAIL ({v['status']})"  # a required layer skipped or missing
    req = (
        '<span class="req" aria-hidden="true">*</span><span class="sr"> (required)</span>'
        if layer in row["required"]
        else ""
    )
    why = v.get("expected") or v.get("reason") if v else "no verdict"
    return f'<td class="cell {"v-" + cat}" title="{esc(why)}">{esc(text)}{req}</td>'


def timeline(runs: Sequence[Mapping[str, Any]], with_time: bool) -> str:
    if not runs:
        return '<span class="muted">no runs kept yet</span>'
    items = []
    for run in runs:
        glyph, cls, said = GLYPH[bool(run.get("ok"))]
        layers = ", ".join(run.get("failed") or [])
        detail = f"{run.get('time')}: {said}" + (f" ({layers})" if layers else "")
        when = f"<small>{esc(str(run.get('time'))[5:16].replace('T', ' '))}</small>"
        items.append(
            f'<li class="{cls}" title="{esc(detail)}"><span aria-hidden="true">{glyph}</span>'
            f'<span class="sr">{esc(detail)}</span>{when if with_time else ""}</li>'
        )
    return f'<ol class="timeline">{"".join(items)}</ol>'


def overview(fleet: Mapping[str, Any]) -> str:
    layers = fleet["layers"]
    names: dict[str, str] = {}
    for r in fleet["hosts"]:
        for layer, v in r["layers"].items():
            names.setdefault(layer, str(v.get("name") or ""))
    head = "".join(
        f'<th scope="col">{esc(x)} <small>{esc(names.get(x, ""))}</small></th>' for x in layers
    )
    rows = []
    for r in ordered(fleet["hosts"]):
        text, cls = result(r)
        history = (fleet.get("history") or {}).get(r["host"]) or []
        rows.append(
            f'<tr data-host="{esc(r["host"])}" data-rank="{rank(r)}">'
            f'<th scope="row"><a href="#{anchor(r["host"])}">{esc(r["host"])}</a></th>'
            f'<td class="cell {cls}">{text}</td>'
            + "".join(cell(r, layer) for layer in layers)
            + f"<td>{timeline(history[-10:], False)}</td></tr>"
        )
    caption = (
        "Each cell says its verdict: pass, FAIL, EXPECTED (cannot pass there; not a pass), "
        "skipped, or not run; * marks a layer the host requires. Hover a cell for its reason."
    )
    return (
        f'<table class="overview" id="overview"><caption>{caption}</caption><thead><tr>'
        f'<th scope="col">Host</th><th scope="col">Result</th>{head}'
        f'<th scope="col">Recent runs</th></tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )


def controls() -> str:
    return (
        '<form class="controls" id="controls" hidden role="search" '
        'onsubmit="return false">'
        '<label for="filter-host">Host name contains<input id="filter-host" type="search">'
        "</label>"
        '<label for="filter-show">Show<select id="filter-show">'
        '<option value="all">every host</option>'
        '<option value="problems">hosts with problems</option>'
        '<option value="failed">failed or without verdicts</option></select></label>'
        '<label for="sort-by">Order<select id="sort-by">'
        '<option value="problems">problems first</option>'
        '<option value="name">by name</option></select></label>'
        '<p id="shown" aria-live="polite"></p></form>'
    )


def attention(fleet: Mapping[str, Any]) -> str:
    items = []
    for r in ordered(fleet["hosts"]):
        link = f'<a href="#{anchor(r["host"])}">{esc(r["host"])}</a>'
        if not r["ok"]:
            why = fleet["summary"]["why"].get(r["host"], "")
            items.append(f"{badge(*result(r))} {link}: {esc(why)}")
        items += [
            f"{badge('WARNING', 'warn')} {link}: {esc(own(r['host'], w))}" for w in r["warnings"]
        ]
    for f in fleet["findings"]["failopt"]:
        items.append(
            f"{badge('FAIL', 'v-failopt')} "
            f'<a href="#{anchor(f["host"])}">{esc(f["host"])}</a> {esc(f["layer"])} '
            f"(not required, so the host still passes): {esc(f['reason'])}"
        )
    if not items:
        return "<p>Nothing: every host passed its required layers, without warnings.</p>"
    return ul(items, "notes")


def expected_section(fleet: Mapping[str, Any]) -> str:
    groups: dict[tuple[str, str, str], list[str]] = {}
    for e in fleet["findings"]["expected"]:
        groups.setdefault((e["layer"], e["reason"], e["source"]), []).append(e["host"])
    if not groups:
        return ""
    items = [
        f"{badge('EXPECTED', 'v-expected')} {esc(layer)} on {esc(', '.join(hosts))}: "
        f"{esc(why)} <small>({'declared: gpu_smoke_cannot_pass' if src == 'declared' else SRC})"
        "</small>"
        for (layer, why, src), hosts in groups.items()
    ]
    return (
        '<section aria-labelledby="expected-h"><h2 id="expected-h">Expected in this '
        "environment</h2><p>These layers did not pass, and cannot where they ran. They are "
        "not counted as passes, and no host fails for them (none of them is required "
        f"there).</p>{ul(items, 'notes')}</section>"
    )


def facts(r: Mapping[str, Any]) -> str:
    gpus = esc(r["gpus"]) + ul(
        (
            esc(
                " ".join(
                    f"{k} {g[k]}" if k != "name" else str(g[k])
                    for k in ("index", "name", "pci_id", "bus_id", "compute_capability")
                    if k in g
                )
            )
            for g in r.get("gpu_list") or []
        ),
    )
    packages = ", ".join(f"{k} {v}" for k, v in sorted(r["driver_packages"].items()))
    driver = esc(r["driver"] or "none found") + (
        f' <small class="muted">({esc(packages)})</small>' if packages else ""
    )
    branch = r["planned_driver_branch"]
    rows = [
        ("GPUs", gpus),
        ("Driver", driver + (f"; the plan's branch: {esc(branch)}" if branch else "")),
        ("PyTorch, planned", esc(r["planned_torch"] or "no plan")),
        ("PyTorch, installed", esc(r["installed_torch"] or "none found")),
        ("Required layers", esc(", ".join(r["required"]) or "none")),
        ("Verdicts from", esc(r["smoke_time"] or ("no smoke run" if not r["smoked"] else "-"))),
    ]
    if r.get("container"):
        rows.append(("Runs in", f"a {esc(r['container'])} container"))
    return '<dl class="facts">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows) + "</dl>"


def layer_details(layer: str, v: Mapping[str, Any]) -> str:
    cat = v["category"]
    label = LABELS[cat] if cat != "pass" else str(v["status"])
    required = ' <span class="req">required</span>' if v["required"] else ""
    body = []
    if label.lower() != str(v["status"]).lower():
        body.append(f"<p>Reported <code>{esc(v['status'])}</code>.</p>")
    if v.get("expected"):
        source = (
            "declared by the inventory: gpu_smoke_cannot_pass"
            if v["expected_source"] == "declared"
            else "derived from the report's facts; the inventory does not require it here"
        )
        body.append(f"<p>Expected here ({source}): {esc(v['expected'])}</p>")
    if cat == "failopt":
        body.append("<p>Not required on this host: the host still passes, but this is no pass.</p>")
    if v.get("hint"):
        body.append(f"<p>Hint: <code>{esc(v['hint'])}</code></p>")
    line = (
        f"{badge(label, 'v-' + cat)} <strong>{esc(layer)} {esc(v.get('name') or '')}</strong>"
        f"{required}: {esc(v.get('reason') or 'no reason given')}"
    )
    if not body:  # nothing more to say: a plain line, not an empty disclosure
        return f'<div class="layer plain">{line}</div>'
    open_ = " open" if cat in ("fail", "failopt", "expected") else ""
    return (
        f'<details class="layer"{open_}><summary>{line}</summary><div class="body">'
        + "".join(body)
        + "</div></details>"
    )


def environment(r: Mapping[str, Any], fleet: Mapping[str, Any]) -> str:
    host = r["host"]
    out = []
    serving = [s for s in fleet.get("serving") or [] if s["host"] == host]
    if serving:
        rows = [
            [
                esc(s["stack"]),
                f"<code>{esc(s['endpoint'])}</code>",
                word(s["health"]),
                word(s["inference"]) + (f" {esc(s['error'])}" if s.get("error") else ""),
                "-" if s["median_ms"] is None else f"{s['median_ms']:.2f} (n={s['requests']})",
            ]
            for s in serving
        ]
        head = ["Stack", "Endpoint", "Health", "Inference", "Median ms"]
        out.append(
            f"<h4>Serving</h4>{table(head, rows, 'Export (L6): ' + esc(serving[0]['export']))}"
        )
    env = next((e for e in fleet.get("environment") or [] if e["host"] == host), None)
    if env and env["notebook"]:
        items = [
            ("Verdict", word(env["notebook"])),
            ("URL (tunnel to it)", f"<code>{esc(env['url'])}</code>"),
            ("Tunnel", f"<code>{esc(env['tunnel'])}</code>" if env["tunnel"] else "not needed"),
            ("Kernel", esc(env["kernel"] or "-")),
            (
                "Kernel's torch, CUDA",
                f"{esc(env['kernel_torch'] or '-')}, {esc(env['kernel_cuda'] or 'none')}",
            ),
        ]
        dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in items)
        out.append(f'<h4>Notebook</h4><dl class="facts">{dl}</dl>')
    if env and env["storage"]:
        rows = [[esc(p), word(v)] for p, v in env["storage"].items()]
        out.append("<h4>Storage</h4>" + table(["Profile", "Round trip"], rows))
        out.append(ul((esc(x) for x in env["storage_reasons"]), "notes"))
    targets = (fleet.get("monitoring") or {}).get(host) or []
    if targets:
        out.append("<h4>Monitoring</h4>" + ul(f"scraped as <code>{esc(t)}</code>" for t in targets))
    return "".join(out)


def host_section(r: Mapping[str, Any], fleet: Mapping[str, Any]) -> str:
    host = r["host"]
    text, cls = result(r)
    why = fleet["summary"]["why"].get(host)
    notes = [f"<strong>Note:</strong> {esc(own(host, n))}" for n in r["notes"]]
    warnings = [f"<strong>Warning:</strong> {esc(own(host, w))}" for w in r["warnings"]]
    layers = "".join(layer_details(x, r["layers"][x]) for x in fleet["layers"] if x in r["layers"])
    history = (fleet.get("history") or {}).get(host) or []
    return (
        f'<article class="host rank-{rank(r)}" id="{anchor(host)}" data-host="{esc(host)}" '
        f'data-rank="{rank(r)}"><h3>{esc(host)} {badge(text, cls)}</h3>'
        + (f"<p>Did not pass: {esc(why)}</p>" if why else "")
        + facts(r)
        + (
            '<ul class="notes">'
            + "".join(f'<li class="warn">{w}</li>' for w in warnings)
            + "".join(f'<li class="note">{n}</li>' for n in notes)
            + "</ul>"
            if notes or warnings
            else ""
        )
        + f"<h4>Layers</h4>{layers or '<p>No verdicts.</p>'}"
        + f"<h4>Recent runs</h4>{timeline(history, True)}"
        + environment(r, fleet)
        + "</article>"
    )


def header(fleet: Mapping[str, Any]) -> str:
    s = fleet["summary"]
    inventory = fleet.get("inventory")
    where = f"inventory <code>{esc(inventory)}</code>" if inventory else "every host with reports"
    when = esc(fleet.get("generated") or "unknown")
    counts = [
        ("passed", "v-pass", s["ok"], "passed their required layers"),
        ("failed", "v-fail", len(s["failed"]), "failed"),
        (
            "no-verdicts",
            "v-unknown",
            len(s["not_smoked"]),
            "without verdicts (unreachable, or not smoked)",
        ),
        (
            "expected",
            "v-expected",
            len(fleet["findings"]["expected"]),
            "layers EXPECTED not to pass",
        ),
    ]
    items = "".join(
        f'<li class="{c if n else "v-none"}" data-count="{k}"><strong>{n}</strong>{esc(t)}</li>'
        for k, c, n, t in counts
    )
    body = (
        f"<p>{esc(headline(fleet))}.</p><p>{esc(required_line(fleet))}.</p>"
        if s["hosts"]
        else f"<p>{esc(fleet.get('message') or 'No hosts in this report.')}</p>"
    )
    return (
        "<header><h1>gpuprov fleet report</h1>"
        f'<p class="meta">{s["hosts"]} hosts of {where}; generated <time datetime="{when}">'
        f"{when}</time> by gpuprov {esc(fleet.get('version') or '?')}</p>"
        f'<ul class="counts" aria-label="Host counts">{items}</ul>{body}</header>'
    )


def render(fleet: Mapping[str, Any]) -> str:
    s = fleet["summary"]
    title = f"gpuprov fleet report: {s['ok']}/{s['hosts']} hosts passed"
    sections = [header(fleet), "<main>"]
    if fleet["hosts"]:
        sections += [
            '<section aria-labelledby="attention-h"><h2 id="attention-h">Needs attention</h2>',
            attention(fleet),
            "</section>",
            '<section aria-labelledby="overview-h"><h2 id="overview-h">Fleet overview</h2>',
            controls(),
            overview(fleet),
            "</section>",
            expected_section(fleet),
            '<section aria-labelledby="hosts-h"><h2 id="hosts-h">Hosts</h2><div id="hostlist">',
            *(host_section(r, fleet) for r in ordered(fleet["hosts"])),
            "</div></section>",
        ]
    if s["ignored"]:
        sections.append(
            '<section aria-labelledby="ignored-h"><h2 id="ignored-h">Not in the inventory</h2>'
            f"<p>Reports of these hosts were ignored: {esc(', '.join(s['ignored']))}.</p></section>"
        )
    sections.append("</main>")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{css()}</style></head>\n<body>"
        + "\n".join(sections)
        + f"\n<script>{SCRIPT}</script></body></html>\n"
    )
