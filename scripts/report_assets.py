"""The fleet page's style and script, inlined into fleet.html (no external asset: the page
works from file:// and from a mail attachment). scripts/report_page.py writes the page.

Every colour pair is a foreground on a background with a contrast ratio of at least 4.5:1
(WCAG AA for normal text); tests/unit/test_report_page.py computes the ratios from the CSS
this module emits. Colour is never the only signal: every cell also says its verdict.
"""

from __future__ import annotations

# class -> (foreground, background). v-* are verdicts (cells, badges, timeline runs).
PALETTE = {
    "v-pass": ("#14532d", "#dcf3e3"),
    "v-fail": ("#ffffff", "#b42318"),
    "v-failopt": ("#ffffff", "#b42318"),
    "v-expected": ("#5c3300", "#fde9b8"),
    "v-skip": ("#344054", "#eaecf0"),
    "v-none": ("#475467", "#ffffff"),
    "v-unknown": ("#ffffff", "#475467"),
    "warn": ("#7a2e0e", "#fff4e5"),
    "note": ("#1d2939", "#f2f4f7"),
    "page": ("#101828", "#ffffff"),
    "muted": ("#475467", "#ffffff"),
    "link": ("#1849a9", "#ffffff"),
    "head": ("#101828", "#e4e7ec"),
    "code": ("#101828", "#f2f4f7"),
}


def css() -> str:
    p = PALETTE
    pairs = "\n".join(
        f".{name}{{color:{fg};background:{bg}}}"
        for name, (fg, bg) in p.items()
        if name.startswith("v-") or name in ("warn", "note", "muted")
    )
    return f"""
:root{{color-scheme:light}}
[hidden]{{display:none !important}}
body{{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
  margin:0 auto;max-width:1200px;padding:1rem 1.5rem 3rem;color:{p["page"][0]};
  background:{p["page"][1]}}}
a{{color:{p["link"][0]};background:{p["link"][1]}}}
h1{{font-size:1.6rem;margin:.2rem 0}}
h2{{font-size:1.25rem;margin:1.8rem 0 .6rem;border-bottom:2px solid #d0d5dd}}
h3{{font-size:1.1rem;margin:0 0 .5rem;display:flex;gap:.6rem;align-items:center;flex-wrap:wrap}}
h4{{font-size:.95rem;margin:1rem 0 .3rem}}
code{{color:{p["code"][0]};background:{p["code"][1]};padding:0 .25em;border-radius:3px;
  overflow-wrap:anywhere}}
.meta{{color:{p["muted"][0]};background:{p["muted"][1]};margin:.2rem 0 .8rem}}
.counts{{display:flex;flex-wrap:wrap;gap:.6rem;list-style:none;padding:0;margin:.6rem 0}}
.counts li{{padding:.4rem .8rem;border-radius:6px;border:1px solid #98a2b3}}
.counts strong{{font-size:1.3rem;margin-right:.3rem}}
table{{border-collapse:collapse;margin:.3rem 0}}
th,td{{border:1px solid #98a2b3;padding:.3rem .5rem;text-align:left;vertical-align:top}}
thead th{{color:{p["head"][0]};background:{p["head"][1]}}}
.overview td.cell{{text-align:center;white-space:nowrap;font-weight:600}}
.overview th small{{display:block;font-weight:400}}
.badge{{display:inline-block;padding:.05rem .5rem;border-radius:4px;font-weight:700;
  font-size:.85rem;border:1px solid #344054}}
.host{{border:1px solid #98a2b3;border-radius:8px;padding:.8rem 1rem;margin:1rem 0}}
.host.rank-0{{border-left:6px solid #b42318}}
.host.rank-1{{border-left:6px solid #475467}}
.facts{{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem;margin:.4rem 0}}
.facts dt{{font-weight:600}}
.facts dd{{margin:0}}
.notes{{list-style:none;padding:0;margin:.5rem 0}}
.notes li{{padding:.3rem .6rem;margin:.25rem 0;border-left:4px solid #98a2b3}}
.notes li.warn{{border-left-color:#b54708}}
.layer{{border:1px solid #d0d5dd;border-radius:6px;margin:.3rem 0;padding:.2rem .5rem}}
.layer.plain{{padding-left:1.55rem}}
details.layer summary{{cursor:pointer;padding:.1rem 0}}
.layer .badge{{min-width:5.5rem;text-align:center;margin-right:.4rem}}
details.layer .body{{padding:0 0 .2rem 1.5rem}}
details.layer .body p{{margin:.2rem 0}}
.req{{font-weight:700}}
.timeline{{display:flex;flex-wrap:wrap;gap:3px;list-style:none;padding:0;margin:0}}
.timeline li{{min-width:1.4rem;text-align:center;border-radius:3px;font-weight:700;
  padding:0 .2rem;border:1px solid #344054}}
.timeline li small{{font-weight:400;margin-left:.2rem}}
.controls{{display:flex;flex-wrap:wrap;gap:1rem;align-items:end;margin:.5rem 0}}
.controls label{{display:flex;flex-direction:column;font-weight:600;font-size:.9rem}}
.controls input,.controls select{{font:inherit;padding:.2rem .4rem}}
.sr{{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap}}
{pairs}
"""


# Filter and sort the overview rows and the host sections alike. Without JavaScript the
# controls stay hidden and the page reads in its written order (failing hosts first).
SCRIPT = """
(function () {
  "use strict";
  var root = document.documentElement;
  window.addEventListener("error", function (e) {
    root.setAttribute("data-js-error", String(e.message));
  });
  var controls = document.getElementById("controls");
  if (!controls) { root.setAttribute("data-js", "ready"); return; }
  var q = document.getElementById("filter-host");
  var show = document.getElementById("filter-show");
  var sort = document.getElementById("sort-by");
  var shown = document.getElementById("shown");
  var groups = [
    [document.querySelector("#overview tbody"), "tr[data-host]"],
    [document.getElementById("hostlist"), "article[data-host]"]
  ];
  function key(el) {
    return sort.value === "name" ? 0 : Number(el.getAttribute("data-rank"));
  }
  function apply() {
    var text = q.value.trim().toLowerCase(), n = 0;
    groups.forEach(function (g) {
      if (!g[0]) { return; }
      var items = Array.prototype.slice.call(g[0].querySelectorAll(g[1]));
      items.sort(function (a, b) {
        var ha = a.getAttribute("data-host"), hb = b.getAttribute("data-host");
        return key(a) - key(b) || (ha < hb ? -1 : ha > hb ? 1 : 0);
      });
      items.forEach(function (el) {
        var rank = Number(el.getAttribute("data-rank"));
        var hit = el.getAttribute("data-host").toLowerCase().indexOf(text) !== -1 &&
          (show.value === "all" || (show.value === "problems" ? rank < 3 : rank < 2));
        el.hidden = !hit;
        if (hit && g[1].charAt(0) === "t") { n += 1; }
        g[0].appendChild(el);
      });
    });
    shown.textContent = n + " of " + groups[0][0].querySelectorAll("tr[data-host]").length +
      " hosts shown";
  }
  // ?host=TEXT&show=all|problems|failed&sort=problems|name: a view to link to.
  var params = new URLSearchParams(window.location.search);
  q.value = params.get("host") || "";
  [[show, "show"], [sort, "sort"]].forEach(function (p) {
    var want = params.get(p[1]);
    var known = Array.prototype.some.call(p[0].options, function (o) {
      return o.value === want;
    });
    if (known) { p[0].value = want; }
  });
  [q, show, sort].forEach(function (el) {
    el.addEventListener(el === q ? "input" : "change", apply);
  });
  controls.hidden = false;
  apply();
  root.setAttribute("data-js", "ready");
})();
"""
