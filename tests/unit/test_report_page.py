"""The fleet page (scripts/report.py --html, scripts/report_page.py): its DOM for the empty,
all-pass, mixed and unreachable report trees (tests/unit/report_fixtures.py), parsed into a
tree (html_tree), and its accessibility: real headings in order, scoped header cells, words
beside every colour, and a contrast of at least 4.5:1 computed from the CSS it emits.

What the page reads like without JavaScript is what these tests see; tests/unit/
test_report_browser.py renders the same page in Chromium."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest
import report  # scripts/report.py (pythonpath)
import report_fixtures as fx
import report_page
from html_tree import Node, parse

VERDICT_CLASSES = ("v-pass", "v-fail", "v-failopt", "v-expected", "v-skip", "v-none", "v-unknown")


def render(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    reports = tmp_path / case
    inventory = fx.write_case(case, reports)
    rc = report.main(["--reports", str(reports), "--inventory", str(inventory), "--html"])
    out = capsys.readouterr()
    text = (reports / "fleet.html").read_text(encoding="utf-8")
    return rc, text, parse(text), reports, out


@pytest.fixture
def mixed(tmp_path, capsys):
    return render("mixed", tmp_path, capsys)


def counts(root: Node) -> dict[str, int]:
    items = root.find("ul", class_="counts").find_all("li")
    return {li.attrs["data-count"]: int(li.find("strong").words) for li in items}


def overview_rows(root: Node) -> dict[str, dict[str, Node]]:
    table = root.by_id("overview")
    head = [th.words for th in table.find("thead").find_all("th")]
    out = {}
    for tr in table.find("tbody").find_all("tr"):
        cells = [c for c in tr.children if isinstance(c, Node)]
        out[tr.attrs["data-host"]] = dict(zip(head, cells, strict=True))
    return out


def section(root: Node, host: str) -> Node:
    return root.by_id(f"host-{host}")


# --- the four cases ------------------------------------------------------------------------


def test_mixed_header_says_what_where_when_and_counts_honestly(mixed):
    rc, _, root, reports, _ = mixed
    assert rc == 1  # lab-mixed failed, gpu-a100 has no verdicts
    assert root.find("h1").words == "gpuprov fleet report"
    meta = root.find("p", class_="meta").words
    assert f"inventory {reports.parent / 'mixed-hosts.yml'}" in meta
    assert re.search(r"generated \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ by gpuprov 0\.1\.0", meta)
    assert counts(root) == {"passed": 3, "failed": 1, "no-verdicts": 1, "expected": 5}
    assert "3/5 hosts passed their required layers" in root.find("header").words
    assert root.find("title").words == "gpuprov fleet report: 3/5 hosts passed"


def test_mixed_overview_puts_failing_hosts_first_and_says_each_verdict_in_words(mixed):
    root = mixed[2]
    rows = overview_rows(root)
    assert list(rows) == ["lab-mixed", "gpu-a100", "lab-cpu", "lab-k40m", "lab-m40"]
    assert {h: r["Result"].words for h, r in rows.items()} == {
        "lab-mixed": "FAILED",
        "gpu-a100": "NO VERDICTS",
        "lab-cpu": "PASSED",
        "lab-k40m": "PASSED",
        "lab-m40": "PASSED",
    }
    k40 = rows["lab-k40m"]
    assert (k40["L1 driver"].words, k40["L1 driver"].attrs["class"]) == (
        "EXPECTED",
        "cell v-expected",
    )
    assert k40["L3 cuda"].words == "EXPECTED"
    assert k40["L5 distributed"].words == "pass (cpu)* (required)"
    assert rows["lab-mixed"]["L5 distributed"].words == "FAIL* (required)"
    assert rows["lab-cpu"]["L2 container"].words == "FAIL"  # not required: the host passes
    assert rows["gpu-a100"]["L0 hardware"].words == "not run"
    # The cell's title is the reason (or why it is expected).
    assert k40["L1 driver"].attrs["title"].startswith("userspace only: no kernel module: a docker")
    assert rows["lab-mixed"]["Recent runs"].words.count("did not pass") == 2


def test_mixed_expected_layers_are_set_apart_with_their_reason_and_source(mixed):
    root = mixed[2]
    expected = root.by_id("expected-h").parent
    items = [li.words for li in expected.find_all("li")]
    assert items == [
        "EXPECTED L1 on lab-k40m, lab-m40: userspace only: no kernel module: a docker container "
        "has no kernel of its own (nvidia_driver installs the userspace only there) (derived "
        "from the reports' facts, not required there: docs/report.md)",
        "EXPECTED L3 on lab-k40m: the inventory expects the CPU build 2.13.0+cpu here "
        f"(gpu_smoke_expected_torch): {fx.LAB_TORCH_REASON} (derived from the reports' facts, "
        "not required there: docs/report.md)",
        "EXPECTED L1 on lab-mixed: userspace only: no kernel module (a lab host is a container) "
        "(declared: gpu_smoke_cannot_pass)",
        "EXPECTED L3 on lab-mixed: the CPU build on simulated GPUs (gpu_smoke_expected_torch) "
        "(declared: gpu_smoke_cannot_pass)",
    ]


def test_mixed_attention_names_every_problem_with_why(mixed):
    root = mixed[2]
    items = [li.words for li in root.by_id("attention-h").parent.find_all("li")]
    assert items == [
        f"FAILED lab-mixed: L5 fail: {fx.L5_FAIL}",
        "NO VERDICTS gpu-a100: no smoke verdicts (playbooks/smoke.yml did not run on it)",
        "WARNING lab-cpu: installed torch 2.12.0+cpu is not the plan's 2.13.0+cpu; re-run "
        "site.yml, or declare the intent with gpu_smoke_expected_torch",
        "FAIL lab-cpu L2 (not required, so the host still passes): docker run --gpus all "
        "failed: could not select device driver with capabilities gpu",
    ]
    for a in root.by_id("attention-h").parent.find_all("a"):
        assert root.by_id(a.attrs["href"][1:]).tag == "article"


def test_mixed_host_sections_hold_each_layer_with_reason_and_hint(mixed):
    root = mixed[2]
    order = [a.attrs["data-host"] for a in root.by_id("hostlist").find_all("article")]
    assert order == ["lab-mixed", "gpu-a100", "lab-cpu", "lab-k40m", "lab-m40"]
    mixed_host = section(root, "lab-mixed")
    assert mixed_host.find("h3").words == "lab-mixed FAILED"
    details = {d.find("summary").find("strong").words: d for d in mixed_host.find_all("details")}
    l5 = details["L5 distributed"]
    assert l5.has("open")
    assert l5.find("summary").words == f"FAIL L5 distributed required: {fx.L5_FAIL}"
    assert f"Hint: {fx.L5_HINT}" in l5.words
    l1 = details["L1 driver"]
    assert l1.has("open")
    assert "Expected here (declared by the inventory: gpu_smoke_cannot_pass)" in l1.words
    assert "gpu-compat explain 'NVIDIA-SMI has failed because it couldn'" in l1.words
    # A pass with nothing more to say is a plain line, not an empty disclosure.
    plain = [d.words for d in mixed_host.find_all("div", class_="plain")]
    assert "pass L0 hardware required: 2 NVIDIA GPU(s) as expected via pci" in plain
    # Every layer that did not pass has its reason on the page, in its host's section.
    fleet = json.loads((mixed[3] / "fleet.json").read_text())
    for row in fleet["hosts"]:
        text = section(root, row["host"]).words
        for v in row["layers"].values():
            if v["category"] in ("fail", "failopt", "expected"):
                assert " ".join(v["reason"].split()) in text, (row["host"], v)
                assert not v["expected"] or " ".join(v["expected"].split()) in text


def test_mixed_stack_difference_has_its_reason_and_an_accident_a_warning(mixed):
    root = mixed[2]
    m40 = section(root, "lab-m40")
    facts = dict(
        zip(
            [dt.words for dt in m40.find("dl").find_all("dt")],
            [dd.words for dd in m40.find("dl").find_all("dd")],
            strict=True,
        )
    )
    assert facts["PyTorch, planned"] == "2.15.0+cu126"
    assert facts["PyTorch, installed"] == "none found"
    assert facts["Driver"].startswith("550.163.01 (userspace only: no kernel module)")
    assert facts["GPUs"].startswith("2x Tesla M40 index 0 Tesla M40 pci_id 10de:17fd")
    assert [li.words for li in m40.find_all("li", class_="note")] == [
        "Note: no torch installed (the plan's is 2.15.0+cu126), on purpose: no PyTorch "
        "environment on this host (pytorch_method: none)"
    ]
    cpu = section(root, "lab-cpu")
    assert [li.words for li in cpu.find_all("li", class_="warn")] == [
        "Warning: installed torch 2.12.0+cpu is not the plan's 2.13.0+cpu; re-run site.yml, or "
        "declare the intent with gpu_smoke_expected_torch"
    ]


def test_mixed_environment_serving_notebook_storage_monitoring_and_history(mixed):
    root, text = mixed[2], mixed[1]
    k40 = section(root, "lab-k40m")
    serving = k40.find(
        "h4",
    ).parent  # the article
    tables = {
        t.find("caption").words if t.find_all("caption") else "": t
        for t in serving.find_all("table")
    }
    rows = [
        [c.words for c in tr.children if isinstance(c, Node)]
        for tr in tables["Export (L6): pass (cpu)"].find("tbody").find_all("tr")
    ]
    assert rows == [
        ["flask", "http://172.18.0.4:5000", "ready", "ok", "3.25 (n=20)"],
        [
            "triton",
            "http://172.18.0.4:8000",
            "not ready",
            "FAIL TimeoutError: not ready after 180s",
            "-",
        ],
    ]
    assert "URL (tunnel to it) http://127.0.0.1:8888/lab" in k40.words
    assert "ssh -N -L 8888:127.0.0.1:8888 -p 22200 root@127.0.0.1" in k40.words
    assert "profile lab-b at http://172.18.0.3:5000: probe failed: AccessDenied" in k40.words
    assert "scraped as gpuprov: 172.18.0.4:9100" in k40.words
    assert "must-never-be-copied" not in text  # the notebook token never reaches the page
    runs = k40.find("ol", class_="timeline").find_all("li")
    assert [li.attrs["class"] for li in runs] == ["v-fail", "v-pass", "v-pass"]
    assert runs[0].find("span", class_="sr").words == "2026-12-01T09:00:00Z: did not pass (L6)"


def test_history_is_kept_by_the_report_bounded_and_not_repeated(mixed, capsys):
    reports = mixed[3]
    runs = json.loads((reports / "history" / "lab-mixed.json").read_text())["runs"]
    assert [r["time"] for r in runs][-1] == fx.TIME
    assert runs[-1] == {
        "time": fx.TIME,
        "ok": False,
        "failed": ["L5"],
        "expected": ["L1", "L3"],
        "failed_not_required": [],
    }
    inventory = reports.parent / "mixed-hosts.yml"
    args = ["--reports", str(reports), "--inventory", str(inventory), "--quiet"]
    report.main([*args, "--history", "2"])  # the same smoke run again: nothing added
    again = json.loads((reports / "history" / "lab-mixed.json").read_text())["runs"]
    assert again == runs
    doc = json.loads((reports / "smoke" / "lab-mixed.json").read_text())
    (reports / "smoke" / "lab-mixed.json").write_text(
        json.dumps({**doc, "time": "2026-12-03T00:00:00Z"})
    )
    report.main([*args, "--history", "2"])
    kept = json.loads((reports / "history" / "lab-mixed.json").read_text())["runs"]
    assert [r["time"] for r in kept] == [fx.TIME, "2026-12-03T00:00:00Z"]
    assert not (reports / "history" / "gpu-a100.json").exists()  # no verdicts, no run


def test_all_pass(tmp_path, capsys):
    rc, _, root, _, out = render("all-pass", tmp_path, capsys)
    assert rc == 0
    assert counts(root) == {"passed": 2, "failed": 0, "no-verdicts": 0, "expected": 0}
    chips = {
        li.attrs["data-count"]: li.attrs["class"]
        for li in root.find_all("li")
        if li.has("data-count")
    }
    assert chips == {
        "passed": "v-pass",
        "failed": "v-none",
        "no-verdicts": "v-none",
        "expected": "v-none",
    }
    assert root.by_id("attention-h").parent.find("p").words.startswith("Nothing: every host")
    assert not root.find_all(id="expected-h")
    rows = overview_rows(root)
    assert {r["L1 driver"].words for r in rows.values()} == {"pass* (required)"}
    assert section(root, "gpu-a01").find("dl").words.startswith("GPUs 8x A100-SXM4-80GB")
    assert "\nexpected: " not in out.out


def test_unreachable_hosts_count_as_without_verdicts_and_old_verdicts_are_a_warning(
    tmp_path, capsys
):
    rc, _, root, _, out = render("unreachable", tmp_path, capsys)
    assert rc == 1
    assert counts(root) == {"passed": 2, "failed": 0, "no-verdicts": 1, "expected": 0}
    assert overview_rows(root)["gpu-a02"]["Result"].words == "NO VERDICTS"
    assert section(root, "gpu-a02").find("p").words == (
        "Did not pass: no smoke verdicts (playbooks/smoke.yml did not run on it)"
    )
    # A day-old pass says nothing of the host now: a warning, under "Needs attention" too.
    why = (
        "its verdicts are from 2026-12-01T06:00:00Z, 24.7 h before the fleet's newest: "
        "the last smoke run did not reach it (unreachable, or --limit)"
    )
    assert section(root, "gpu-a03").find("li", class_="warn").words == f"Warning: {why}"
    items = [li.words for li in root.by_id("attention-h").parent.find_all("li")]
    assert f"WARNING gpu-a03: {why}" in items
    # It passed then (its result says so) and is among the hosts with problems (rank 2).
    assert section(root, "gpu-a03").attrs["data-rank"] == "2"
    assert "WARNING: gpu-a03: its verdicts are from 2026-12-01T06:00:00Z" in out.out


def test_empty_reports_still_write_a_page_that_says_so(tmp_path, capsys):
    reports = tmp_path / "empty"
    inventory = fx.write_case("empty", reports)
    (reports / "fleet.html").write_text("<p>an old page, all green</p>")
    assert report.main(["--reports", str(reports), "--inventory", str(inventory), "--html"]) == 2
    assert "no reports under" in capsys.readouterr().err
    root = parse((reports / "fleet.html").read_text())
    assert counts(root) == {"passed": 0, "failed": 0, "no-verdicts": 0, "expected": 0}
    assert root.find("header").find_all("p")[1].words.startswith(f"no reports under {reports}/plan")
    assert not root.find_all("table")
    assert not (reports / "fleet.json").exists()


# --- accessibility and self-containment ------------------------------------------------------


@pytest.mark.parametrize("case", fx.CASES, ids=list(fx.CASES))
def test_headings_are_real_and_in_order(case, tmp_path, capsys):
    root = render(case, tmp_path, capsys)[2]
    levels = [int(n.tag[1]) for n in root.iter() if re.fullmatch(r"h[1-6]", n.tag)]
    assert levels[0] == 1
    assert levels.count(1) == 1
    assert all(b <= a + 1 for a, b in itertools.pairwise(levels)), levels
    assert all(n.words for n in root.iter() if re.fullmatch(r"h[1-6]", n.tag))
    assert root.find("html").attrs["lang"] == "en"


@pytest.mark.parametrize("case", fx.CASES, ids=list(fx.CASES))
def test_header_cells_are_scoped_and_colour_never_stands_alone(case, tmp_path, capsys):
    root = render(case, tmp_path, capsys)[2]
    for th in root.find_all("th"):
        assert th.attrs.get("scope") in ("col", "row"), th.words
    for n in root.iter():
        classes = (n.attrs.get("class") or "").split()
        if any(c in VERDICT_CLASSES for c in classes):
            assert n.words or n.attrs.get("title"), n  # words (or a title) beside the colour
    for li in root.find_all("li"):
        if li.parent is not None and "timeline" in (li.parent.attrs.get("class") or ""):
            assert li.find("span", class_="sr").words  # the glyph has a text alternative


@pytest.mark.parametrize("case", fx.CASES, ids=list(fx.CASES))
def test_the_page_is_self_contained(case, tmp_path, capsys):
    text, root = render(case, tmp_path, capsys)[1:3]
    for tag in ("link", "img", "iframe", "object", "embed"):
        assert not root.find_all(tag), tag
    assert not [n for n in root.iter() if "src" in n.attrs]
    assert all(a.attrs["href"].startswith("#") for a in root.find_all("a"))
    style = root.find("style").text
    assert "url(" not in style
    assert "@import" not in style
    script = root.find("script").text
    assert "http" not in script
    assert "fetch(" not in script
    for form in root.find_all("form"):
        assert form.has("hidden")  # the controls appear only when the script runs
    assert text.startswith("<!DOCTYPE html>")


def _luminance(hex_colour: str) -> float:
    rgb = [int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(fg: str, bg: str) -> float:
    a, b = sorted((_luminance(fg), _luminance(bg)), reverse=True)
    return (a + 0.05) / (b + 0.05)


def test_contrast_formula():
    assert round(contrast("#000000", "#ffffff"), 1) == 21.0
    assert round(contrast("#767676", "#ffffff"), 2) == 4.54  # the classic AA grey


def test_every_colour_pair_the_css_emits_has_contrast_of_at_least_4_5(mixed):
    style = mixed[2].find("style").text
    rules = re.findall(r"([^{}]+)\{([^{}]*)\}", style)
    body = next(decl for sel, decl in rules if sel.strip() == "body")
    page_bg = re.search(r"background:(#[0-9a-f]{6})", body).group(1)
    checked = {}
    for selector, decl in rules:
        fg = re.search(r"(?<![-\w])color:(#[0-9a-f]{6})", decl)
        if not fg:
            continue
        bg = re.search(r"background:(#[0-9a-f]{6})", decl)
        ratio = contrast(fg.group(1), bg.group(1) if bg else page_bg)
        checked[selector.strip()] = ratio
        assert ratio >= 4.5, f"{selector.strip()}: {ratio:.2f}"
    for cls in VERDICT_CLASSES:
        assert f".{cls}" in checked, f".{cls} has no colour pair"
    assert len(checked) >= 15


def test_host_ids_are_distinct_for_names_that_differ_only_in_punctuation() -> None:
    names = ["gpu-a01", "gpu.a01", "gpu_a01", "gpu a01", "gpu_2e_a01"]
    ids = [report_page.anchor(n) for n in names]
    assert len(set(ids)) == len(names), ids
    assert ids[0] == "host-gpu-a01"  # an ordinary name keeps its id
    assert all(re.fullmatch(r"host-[A-Za-z0-9_-]+", i) for i in ids), ids


def test_no_id_on_the_page_is_shared_whatever_the_hosts_are_called(tmp_path, capsys) -> None:
    """A host called "list" had the id of the hosts' container (host-list)."""
    for host in ("list", "gpu.a01", "gpu-a01"):
        (tmp_path / "smoke").mkdir(exist_ok=True)
        doc = {"host": host, "ok": True, "required": [], "not_passed": [], "layers": []}
        (tmp_path / "smoke" / f"{host}.json").write_text(json.dumps(doc))
    report.main(["--reports", str(tmp_path), "--html", "--quiet"])
    page = (tmp_path / "fleet.html").read_text()
    ids = re.findall(r'\sid="([^"]+)"', page)
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    assert 'id="host-list"' in page  # the host's own section
