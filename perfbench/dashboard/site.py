"""The static site: one folder per host class with overview, per-op, trends, roofline and tickets
pages, plus an index of host classes. plotly.js is written once into the site (assets/) and every
page loads it by a relative path: the site works offline and from file://, no CDN.

Each page records, for tests and for anyone curious, how many figures it has, how many it drew
(an SVG with at least one trace or heatmap), which came out empty, and every script error or
console.error, as JSON in `<pre id="pb-check" hidden>` (see CHECK_JS and DRAW_JS).

Every page carries SIGNATURE in its head and every folder the site creates (assets/, a host
folder) a signed perfbench.outdir.FOLDER_SIGN file: the proof that a later run may write over or
remove it (nothing without it is written over: _prepare checks every name first)."""

from __future__ import annotations

import json
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

from perfbench import outdir
from perfbench.compare import verdicts, views
from perfbench.compare.render import fmt_by_path, fmt_ns
from perfbench.dashboard import figures as fig
from perfbench.dashboard.data import latest_full, short
from perfbench.dashboard.figures import esc

CSS = """body{font-family:system-ui,sans-serif;margin:0;color:#222}header{background:#1f2937;color:#fff;padding:10px 18px}
header a{color:#cbd5e1;margin-right:14px;text-decoration:none}header a.on{color:#fff;font-weight:600}
main{padding:14px 18px}table{border-collapse:collapse;margin:8px 0 18px}td,th{border:1px solid #ddd;padding:3px 8px;
font-size:13px;text-align:right}th{background:#f3f4f6}td.l,th.l{text-align:left}.win{color:#2166ac}.loss{color:#b2182b}
.note{color:#555;font-size:13px}.fig{margin-bottom:18px}select{margin-left:6px}"""

# collects script errors and console.error calls for the page's self-check (DRAW_JS)
CHECK_JS = """<script>
window.__pbErrors = [];
window.addEventListener('error', function (e) { window.__pbErrors.push(String(e.message || e)); });
(function () { var ce = console.error; console.error = function () {
  window.__pbErrors.push(Array.prototype.join.call(arguments, ' ')); ce.apply(console, arguments); }; })();
</script>"""
DRAW_JS = """<script>
(function () {
  var figs = window.__pbFigures || [], empty = [];
  window.addEventListener('unhandledrejection', function (e) { window.__pbErrors.push('rejected: ' + e.reason); });
  function report(drawn) {
    var out = document.getElementById('pb-check');
    out.textContent = JSON.stringify({figures: figs.length, drawn: drawn, empty: empty, errors: window.__pbErrors});
  }
  if (typeof Plotly === 'undefined') { window.__pbErrors.push('plotly.js did not load'); report(0); return; }
  var config = {responsive: true, displaylogo: false, modeBarButtonsToRemove: ['sendChartToCloud']};
  Promise.allSettled(figs.map(function (f) {
    // a synchronous throw inside newPlot becomes this figure's rejection, not the end of the check
    return new Promise(function (ok) { ok(Plotly.newPlot(f.id, f.data, f.layout, config)); }).then(function (gd) {
      // drawn = an SVG root and at least one trace or heatmap image in it
      var ok = gd.querySelector('.main-svg') && gd.querySelectorAll('.trace, .hm').length > 0;
      if (!ok) { empty.push(f.id); }
      return ok;
    });
  })).then(function (res) {
    res.forEach(function (r, i) { if (r.status === 'rejected') { window.__pbErrors.push(figs[i].id + ': ' + r.reason); } });
    report(res.filter(function (r) { return r.status === 'fulfilled' && r.value; }).length);
  });
})();
</script>"""


def _js(obj) -> str:
    """JSON safe inside <script>: no '<', '>' or '&' can end the script or open a tag."""
    return (json.dumps(obj, separators=(",", ":"), allow_nan=False, default=str)
            .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


def slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", str(s)).strip("-").lower()[:60] or "x"


def host_dir(key: str) -> str:
    """A host class's folder: readable and unique (two keys never share one)."""
    import hashlib

    return f"{slug(key)[:40]}-{hashlib.sha1(key.encode()).hexdigest()[:8]}"


MARKER = ".perfbench-dashboard"  # in a folder this command wrote: its contents may be replaced
SIGNATURE = '<meta name="generator" content="perfbench dashboard">'  # in every page's head, and FOLDER_SIGN


class Page:
    def __init__(self, title: str):
        self.title, self.parts, self.figs = title, [], []

    def add(self, html_text: str) -> None:
        self.parts.append(html_text)

    def figure(self, figdict: dict) -> None:
        fid = f"fig{len(self.figs)}"
        self.figs.append({"id": fid, **views.finite(figdict)})
        self.parts.append(f'<div class="fig" id="{fid}"></div>')

    def render(self, nav: str, asset_prefix: str) -> str:
        return (f"<!doctype html><html lang=en><head><meta charset=utf-8>{SIGNATURE}<title>{esc(self.title)}</title>"
                f"<style>{CSS}</style>{CHECK_JS}<script src=\"{asset_prefix}assets/plotly.min.js\"></script></head>"
                f"<body><header>{nav}</header><main><h1>{esc(self.title)}</h1>{''.join(self.parts)}</main>"
                f'<pre id="pb-check" hidden></pre>'
                f"<script>window.__pbFigures = {_js(self.figs)};</script>{DRAW_JS}</body></html>")


def _nav(host: dict, here: str, ops: list[str], multi_host: bool) -> str:
    links = [("overview.html", "Overview")] + [(f"op-{slug(o)}.html", o) for o in ops] + [
        ("trends.html", "Trends"), ("roofline.html", "Roofline"), ("tickets.html", "Tickets")]
    out = ['<a href="../index.html">Hosts</a>' if multi_host else ""]
    out += [f'<a class="{"on" if href == here else ""}" href="{href}">{esc(label)}</a>' for href, label in links]
    out.append(f'<span class="note" style="color:#cbd5e1">{esc(host["key"])}</span>')
    return "".join(out)


def _fmt_ratio(r) -> str:
    return "-" if r is None else f"{r:.3f}"


def _run_line(r: dict) -> str:
    return (f"run {r['id']} · suite {esc(r['suite'])} · {r['started_at']:%Y-%m-%d %H:%M} · commit "
            f"{esc((r['git_sha'] or '?')[:10])} {esc(r['branch'] or '')} · {len(r['cells'])} cells"
            + (" · partial" if r["partial"] else ""))


def overview(host: dict, latest: dict) -> Page:
    p = Page(f"perfbench: ours vs ONNX Runtime on {host['key']}")
    p.add(f'<p class="note">Ratios are ours/ORT (below 1: we are faster). fast_1 = cells where ours is correct and '
          f"faster than ORT / all cells due (failures count as slow, n/a excluded); by ORT path: the same over the cells "
          f"against ORT's own kernel, its kernel with Casts inserted, its ONNX function body, or its kernel in a "
          f"substitute dtype (f32 for bf16). {len(host['tickets'])} open "
          f'ticket(s): <a href="tickets.html">the work queue</a>.</p>')
    for sname, r in sorted(latest.items()):
        regions = sorted(views.summaries(r["cells"], by=views.REGION_KEYS),
                         key=lambda g: (g["op"], g["dtype"], g["threads"]))
        tickets = defaultdict(int)
        for t in host["tickets"]:
            tickets[(t["op"], t["dtype"], t["threads"])] += 1
        p.add(f"<h2>Suite {esc(sname)}</h2><p class=note>latest: {_run_line(r)}</p>")
        rows = ["<tr><th class=l>op</th><th>dtype</th><th>threads</th><th>fast_1</th><th>by ORT path</th><th>win</th>"
                "<th>loss</th>"
                "<th>undecided</th><th>fail</th><th>n/a</th><th>geomean ours/ORT</th><th>open tickets</th></tr>"]
        for g in regions:
            c = g["counts"]
            f1 = "-" if g["fast_1"] is None else f"{100 * g['fast_1']:.0f}%"
            rows.append(f"<tr><td class=l><a href=\"op-{slug(g['op'])}.html\">{esc(g['op'])}</a></td>"
                        f"<td>{esc(g['dtype'])}</td><td>{esc(g['threads'])}</td><td>{f1}</td>"
                        f"<td>{esc(fmt_by_path(g))}</td><td class=win>{c['win']}</td>"
                        f"<td class=loss>{c['loss']}</td><td>{c['undecided']}</td><td>{c['fail']}</td><td>{c['n/a']}</td>"
                        f"<td>{_fmt_ratio(g['geomean_ratio'])}</td><td>{tickets[(g['op'], g['dtype'], g['threads'])]}</td></tr>")
        p.add("<table>" + "".join(rows) + "</table>")
        p.figure(fig.fast1_bars(regions, f"fast_1 per op, dtype and threads — suite {sname}, run {r['id']}"))
    if not latest:
        p.add("<p>No complete runs for this host class yet: <code>perfbench run --suite attention</code>.</p>")
    return p


def op_page(host: dict, op: str, run: dict, choices: list[dict], name_of) -> Page:
    p = Page(f"{op}: ours/ORT heatmaps")
    opts = "".join(f'<option value="{name_of(r)}"{" selected" if r["id"] == run["id"] else ""}>{_run_line(r)}</option>'
                   for r in choices)
    p.add(f"<p>Run <select onchange=\"location.href=this.value\">{opts}</select></p>")
    p.add(f'<p class="note">Colour: log scale, centred on 1.0 — blue = we win, red = we lose. Grey: n/a (no ratio); '
          f"dark grey: ours fails (never a win). {fig.MARK_SUBST} compared with a substituted ORT dtype; "
          f"{fig.MARK_DISC} ORT departs from the oracle (ort-discrepancy); {fig.MARK_DISPATCH} ORT's per-node "
          f"dispatch is more than half of ORT's time (hover: the kernel-only ratio); {fig.MARK_OVER} a share of "
          "peak above 100% (the ceiling is wrong for that cell, never its result). Hover for times, CI, "
          "throughput, ORT path and case id.</p>")
    cells = [c for c in run["cells"] if c["op"] == op]
    over = sum(1 for c in cells for sh in (c.get("ours_share"), c.get("ort_share")) if verdicts.over_ceiling(sh))
    if over:
        p.add(f'<p class="note">{fig.MARK_OVER} {over} measurement(s) of this op exceed 100% of their ceiling: '
              "a probe or the working-set model is wrong for them, or they are within a probe's own spread of it "
              "(<code>perfbench peaks --show</code>).</p>")
    groups: dict = defaultdict(list)
    for c in cells:
        groups[(c["dtype"], c["threads"], c["cache"], c["spin"], c["device"])].append(c)
    for (dt, th, cache, spin, dev), cs in sorted(groups.items()):
        extra = "".join(x for x in (f", cache {cache}" if cache != "warm" else "", f", spin {spin}" if spin != "off" else "",
                                    f", {dev}" if dev != "cpu" else ""))
        if all(c["numerics_only"] for c in cs):
            continue
        p.figure(fig.heatmap(op, cs, f"{op} {dt}, {th} thread{'s' if th != 1 else ''}{extra} — ours/ORT, run {run['id']}"))
    return p


def trends_page(host: dict, runs: list[dict]) -> Page:
    p = Page("Trends: ours/ORT and times across runs")
    p.add('<p class="note">Each line is one case; error bars are the ratio\'s 95% CI; a red × marks a regression '
          "flag from <code>perfbench ab</code>/<code>compare</code> on that run.</p>")
    # flags by (op, dtype, threads) -> {(commit, cell): verdict}: a comparison's head is matched to
    # the history runs of its commit (an `ab` head is not itself a history run)
    flags: dict = defaultdict(dict)
    for sha, rows in host["flags"].items():
        for f in rows:
            cell = (f["case_id"], f["dtype"], f["threads"], f["cache"], f["spin"], f.get("device", "cpu"))
            flags[(f["case_id"].split(".", 1)[0], f["dtype"], f["threads"])][(sha, cell)] = f["verdict"]
    for sname in sorted({r["suite"] for r in runs}):
        rs = [r for r in runs if r["suite"] == sname]
        per: dict = defaultdict(lambda: defaultdict(dict))
        times: dict = defaultdict(lambda: defaultdict(dict))
        label_of: dict = {}
        for r in rs:
            for c in r["cells"]:
                if c["numerics_only"]:
                    continue
                key = (c["op"], c["dtype"], c["threads"])
                label = short(c) + "".join(x for x in (f" cache {c['cache']}" if c["cache"] != "warm" else "",
                                                       f" spin {c['spin']}" if c["spin"] != "off" else "",
                                                       f" {c['device']}" if c["device"] != "cpu" else ""))
                label_of[(c["case_id"], c["dtype"], c["threads"], c["cache"], c["spin"], c["device"])] = label
                if c["ratio"] is not None:
                    per[key][label][r["id"]] = (c["ratio"], c["lo"], c["hi"])
                if c["ours_ns"]:
                    times[key][f"ours {label}"][r["id"]] = (c["ours_ns"], None, None)
                if c["ort_ns"]:
                    times[key][f"ORT {label}"][r["id"]] = (c["ort_ns"], None, None)
        sha_runs = defaultdict(list)
        for r in rs:
            sha_runs[r["git_sha"]].append(r["id"])
        p.add(f"<h2>Suite {esc(sname)} ({len(rs)} runs)</h2>")
        for key in sorted(per):
            op, dt, th = key
            fl = {(rid, label_of[cell]): v for (sha, cell), v in flags[key].items() if cell in label_of
                  for rid in sha_runs.get(sha, [])}
            p.figure(fig.trend(per[key], rs, fl, f"{op} {dt}, {th} thread(s): ours/ORT per run", "ratio"))
            p.figure(fig.trend(times[key], rs, {}, f"{op} {dt}, {th} thread(s): median time per call", "time"))
    return p


def roofline_page(host: dict, latest: dict) -> Page:
    p = Page("Roofline: achieved GFLOP/s against arithmetic intensity")
    if not host["peaks"]:
        p.add("<p>No peaks measured for this host class (<code>perfbench peaks</code>).</p>")
    p.add('<p class="note">Lines: this host\'s measured FMA peak and read bandwidth by cache level '
          "(<code>perfbench peaks</code>); points: ours and ORT per cell of the latest run. A cell that "
          "writes is divided by a mix of the read and copy probes, so it can sit above a read roof "
          "with a share under 100%.</p>")
    for r in (latest[k] for k in sorted(latest)):
        groups: dict = defaultdict(list)
        for c in r["cells"]:
            if not c["numerics_only"]:
                groups[(c["op"], c["threads"])].append(c)
        for (op, th), cs in sorted(groups.items()):
            p.figure(fig.roofline(cs, host["peaks"], th, f"{op}, {th} thread(s), all dtypes — run {r['id']}"))
    return p


def tickets_page(host: dict, ops: list[str]) -> Page:
    p = Page("Tickets: the open work queue")
    ts = sorted(host["tickets"], key=lambda t: ({"wrong-answer": 0, "broken": 1, "loss": 2}.get(t["kind"], 3),
                                                 -(t["priority"] or 0)))
    if not ts:
        p.add("<p>No open tickets (<code>perfbench tickets --watch</code> lists losses below the ticket bar).</p>")
    rows = ["<tr><th>#</th><th class=l>kind</th><th class=l>title</th><th>cells</th><th>priority</th>"
            "<th>worst</th><th class=l>view</th></tr>"]
    for t in ts:
        link = f'<a href="op-{slug(t["op"])}.html">{esc(t["op"])}</a>' if t["op"] in ops else esc(t["op"])
        prio = fmt_ns(t["priority"]) + "/call" if t["kind"] == "loss" else "-"
        rows.append(f"<tr><td>{esc(t['id'])}</td><td class=l>{esc(t['kind'])}</td><td class=l>{esc(t['title'])}</td>"
                    f"<td>{esc(t['cells'])}</td><td>{esc(prio)}</td><td>{_fmt_ratio(t['worst_ratio'])}</td>"
                    f"<td class=l>{link}</td></tr>")
    if ts:
        p.add("<table>" + "".join(rows) + "</table><p class=note><code>perfbench tickets show ID</code> has each "
              "ticket in full.</p>")
    return p


# what this command writes at the top of its folder, the only names its marker may have it remove:
# pages (one host class) and index.html; assets/ and host folders (host_dir, several host classes).
# A name is not proof (a user's op-notes.html or release-20240101/ matches): an entry is removed only
# if it also carries SIGNATURE (outdir.own_path)
OWN_FILES = re.compile(r"(index|overview|trends|roofline|tickets)\.html|op-[a-z0-9-]+\.html")
OWN_FOLDERS = re.compile(r"assets|[a-z0-9-]{1,40}-[0-9a-f]{8}")


def _warn(message: str) -> None:
    print(message, file=sys.stderr)


def _prepare(out: Path, names: list[str], plotly_js: bytes) -> list:
    """Make `out` ready for a run that writes `names` (relative paths, pages and
    assets/plotly.min.js): a new or empty folder, or one this command wrote before; anything else
    is refused (UsageError, exit 2) before anything is removed or written.

    A non-empty folder is ours only if its MARKER parses as {"written": [names]}: no marker, or an
    empty or malformed one, is refused. Then every name this run writes is checked
    (outdir.not_ours): a page there without SIGNATURE (the user's own, or from a version before
    signatures), a folder at a page's name or a file at a folder's is refused, all of them named;
    assets/plotly.min.js carries no signature and is ours when assets/ is a signed folder or the
    file is the very plotly.js we write. A symlink at a name is no obstacle (replaced, never
    followed); a name under an entry the prune below removes is not checked (it goes).

    Then the marker's entries are removed (so pages of ops, runs or hosts no longer in the
    database do not linger) and nothing else is touched (.git, CNAME, your own files). The marker
    is untrusted (a published site branch or a shared folder may carry a planted one): an entry is
    removed only if it is one of the names this command writes (OWN_FILES, OWN_FOLDERS) at the top
    of the folder, with no symlink on the way, and carries our signature (a page with SIGNATURE in
    its head; a folder with a signed outdir.FOLDER_SIGN in it), see perfbench.outdir.own_path.
    Returns the (entry, why) left alone: write_site reports those it did not write over (a page
    from a version before signatures, or a user's own file or folder)."""
    from perfbench.errors import UsageError

    outdir.ensure_folder(out)  # a file or a link to no folder: UsageError
    marker = out / MARKER
    if not any(out.iterdir()):
        return []
    if not marker.exists():
        raise UsageError(f"{out} is not empty and has no {MARKER} file (what `perfbench dashboard` leaves in a "
                         "folder it wrote): choose a new or empty folder")
    try:
        listed = outdir.parse_marker(marker)
    except outdir.BadMarker as e:
        raise UsageError(f"{marker} {e}, so {out} is not known to be a site `perfbench dashboard` wrote: choose a "
                         f"new or empty folder; or, if it really is one, put {{\"written\": []}} in {marker} (your "
                         "files are never written over, and nothing is removed)") from None

    def ours(name: str, path: Path) -> bool:
        return name == "assets/plotly.min.js" and (
            outdir.signed(path.parent / outdir.FOLDER_SIGN, SIGNATURE) or path.read_bytes() == plotly_js)

    going = set(outdir.prune(out, listed, set(), OWN_FILES, OWN_FOLDERS, signature=SIGNATURE, dry_run=True).removed)
    found = outdir.not_ours(out, [n for n in names if n.split("/")[0] not in going], SIGNATURE, ours)
    if found:
        raise UsageError(f"{out}: {outdir.listing(found)} at names this run writes, not written by `perfbench "
                         f"dashboard` (no {SIGNATURE} in the head: written by an older perfbench or by someone "
                         "else): nothing was written; move them away or choose another folder")
    return outdir.prune(out, listed, set(), OWN_FILES, OWN_FOLDERS, signature=SIGNATURE).left


def write_site(hosts: list[dict], out: Path, run_choices: int = 6) -> dict:
    """Write the site under `out`; returns {"pages": n, "figures": n, "seconds": s, "index": path}.
    Every page's name is known before anything is written (_prepare checks them all)."""
    import plotly.offline

    t0 = time.perf_counter()
    multi = len(hosts) > 1
    plan = []  # (host folder name or "", page name, host, ops, make the Page)
    host_links = []
    for host in hosts:
        folder = host_dir(host["key"]) if multi else ""
        latest = latest_full(host["runs"])
        ops = sorted({c["op"] for r in latest.values() for c in r["cells"]})

        def add(name: str, make, folder=folder, host=host, ops=ops) -> None:
            plan.append((folder, name, host, ops, make))

        add("overview.html", lambda host=host, latest=latest: overview(host, latest))
        for op in ops:
            recent = [r for r in host["runs"] if any(c["op"] == op for c in r["cells"])][-run_choices:]
            base = f"op-{slug(op)}"
            main = max((r for r in latest.values() if any(c["op"] == op for c in r["cells"])),
                       key=lambda r: (r["started_at"], r["id"]))

            def name_of(r, base=base, main=main):
                return f"{base}.html" if r["id"] == main["id"] else f"{base}-run{r['id']}.html"

            choices = recent if main in recent else recent + [main]
            for r in choices:
                add(name_of(r), lambda host=host, op=op, r=r, choices=choices, name_of=name_of:
                    op_page(host, op, r, choices, name_of))
        add("trends.html", lambda host=host: trends_page(host, host["runs"]))
        add("roofline.html", lambda host=host, latest=latest: roofline_page(host, latest))
        add("tickets.html", lambda host=host, ops=ops: tickets_page(host, ops))
        host_links.append((f"{folder}/overview.html" if multi else "overview.html", host))

    plotly_js = plotly.offline.get_plotlyjs().encode("utf-8")
    names = ["assets/plotly.min.js"] + [f"{f}/{n}" if f else n for f, n, *_ in plan] + ["index.html"]
    left = _prepare(out, names, plotly_js)
    written = []
    outdir.own_folder(out / "assets", SIGNATURE, _warn)
    written.append("assets")
    outdir.write_bytes(out / "assets" / "plotly.min.js", plotly_js)
    pages = figs = 0
    for folder, name, host, ops, make in plan:
        if folder and folder not in written:
            outdir.own_folder(out / folder, SIGNATURE, _warn)
            written.append(folder)
        page = make()
        outdir.write_text(out / folder / name, page.render(_nav(host, name, ops, multi), "../" if folder else ""))
        if not folder:
            written.append(name)
        pages += 1
        figs += len(page.figs)
    index = Page("perfbench dashboard")
    if not hosts:
        index.add("<p>The database has no runs yet: <code>perfbench run --suite attention</code>.</p>")
    for href, host in host_links:
        latest = latest_full(host["runs"])
        runs = ", ".join(f"{esc(s)}: run {r['id']} ({r['started_at']:%Y-%m-%d})" for s, r in sorted(latest.items()))
        index.add(f'<p><a href="{href}">{esc(host["key"])}</a> — {len(host["runs"])} runs; latest {runs or "none"}; '
                  f"{len(host['tickets'])} open tickets</p>")
    outdir.write_text(out / "index.html", index.render("", ""))
    written.append("index.html")
    outdir.write_marker(out / MARKER, "perfbench dashboard", written)
    for rel, why in left:  # an entry written over by this run needs no word
        if not (isinstance(rel, str) and rel in written):
            _warn(f"warning: not removing {rel!r} listed in {out / MARKER}: {why}")
    pages += 1
    return {"pages": pages, "figures": figs, "seconds": time.perf_counter() - t0, "index": str(out / "index.html")}
