"""Plotly figures as plain dicts (data + layout), built from dashboard.data. Every string that
comes from the database is HTML-escaped before it reaches a figure (plotly renders a subset of
HTML in text and hover labels)."""

from __future__ import annotations

import html
import math
import re
from collections import defaultdict

from perfbench.compare import verdicts
from perfbench.compare.render import fmt_ns
from perfbench.dashboard.data import short

MARK_SUBST, MARK_DISC = "†", "‡"
MARK_DISPATCH = "½"  # ORT's per-node dispatch is more than half of ORT's time (the tables' †)
MARK_OVER = verdicts.OVER_CEILING  # a share of peak above 100%: the ceiling is wrong for the cell


def dispatch_heavy(c: dict) -> bool:
    return verdicts.dispatch_heavy(c.get("kernel_only"))


def over_ceiling(c: dict) -> bool:
    return verdicts.over_ceiling(c.get("ours_share")) or verdicts.over_ceiling(c.get("ort_share"))
# diverging, centred on ratio 1 (log2 = 0): blue = we win, red = we lose
DIVERGING = [[0.0, "#2166ac"], [0.25, "#67a9cf"], [0.5, "#f7f7f7"], [0.75, "#ef8a62"], [1.0, "#b2182b"]]


def esc(s) -> str:
    return html.escape(str(s), quote=True)


def _ratio_text(c: dict) -> str:
    if c["verdict"] == "fail":
        return "FAIL"
    if c["ratio"] is None:
        return "n/a"
    mark = ""
    if c.get("ort_path") == "substituted":
        mark += MARK_SUBST
    if c.get("ort_status") == "ort-discrepancy":
        mark += MARK_DISC
    if dispatch_heavy(c):
        mark += MARK_DISPATCH
    if over_ceiling(c):
        mark += MARK_OVER
    return f"{c['ratio']:.2f}{mark}"


def _hover(c: dict) -> str:
    parts = [f"<b>{esc(c['case_id'])}</b>", f"{esc(c['dtype'])}, {esc(c['threads'])} thread(s), cache {esc(c['cache'])}"]
    if c["verdict"] == "fail":
        parts.append(f"ours: {esc(c['ours_status'])} (fails: never a win)")
    else:
        parts.append(f"ours {fmt_ns(c['ours_ns'])} · ORT {fmt_ns(c['ort_ns'])}")
        if c["ratio"] is not None:
            parts.append(f"ours/ORT {c['ratio']:.3f} [{c['lo']:.3f}, {c['hi']:.3f}] ({esc(c['verdict'])})")
            k = c.get("kernel_only")
            if k and k["ratio"] is not None:
                parts.append(f"kernel-only {k['ratio']:.3f} [{k['ci_low']:.3f}, {k['ci_high']:.3f}] (ORT's "
                             f"dispatch {fmt_ns(k['dispatch_ns'])} = {100 * k['dispatch_share']:.0f}% of its time"
                             + (f" {MARK_DISPATCH}" if dispatch_heavy(c) else "") + ")")
            elif k:
                parts.append(f"kernel-only n/a: {esc(k['note'])} {MARK_DISPATCH}")
        else:
            parts.append(f"no ratio: {esc(c['note'] or c['verdict'])}")
    for side, tp, sh in (("ours", c["ours_tp"], c["ours_share"]), ("ORT", c.get("ort_tp"), c.get("ort_share"))):
        if tp is None:
            continue
        share = ""
        if sh is not None:
            share = f", {100 * sh:.0f}% of peak"
            if verdicts.over_ceiling(sh):
                share += f" {MARK_OVER} over the ceiling: the ceiling is wrong for this cell"
        parts.append(f"{side} {tp:.3g} {esc(c['unit'] or '')}{share}")
    path = c.get("ort_path") or "-"
    if path == "substituted":
        path = f"substituted: compared with ORT {c.get('ort_dtype')} {MARK_SUBST}"
    parts.append(f"ORT path: {esc(path)}")
    if c.get("ort_status") == "ort-discrepancy":
        parts.append(f"ORT departs from the oracle (ort-discrepancy) {MARK_DISC}")
    return "<br>".join(parts)


def axes_of(cells: list[dict]) -> tuple[str | None, list[str]]:
    """The op's main shape axis (the numeric parameter with the most values) and the others that vary."""
    vals: dict = defaultdict(set)
    for c in cells:
        for k, v in c["params"].items():
            vals[k].add(v)
    varying = [k for k, v in vals.items() if len(v) > 1]
    numeric = [k for k in varying if all(isinstance(x, int) for x in vals[k])]
    main = max(numeric, key=lambda k: (len(vals[k]), k), default=None)
    return main, [k for k in varying if k != main]


def heatmap(op: str, cells: list[dict], title: str) -> dict:
    """ours/ORT over the main shape axis (x) and the other varying parameters (y): colour log2(ratio)
    centred on 1; fail and n/a cells grey, never coloured as wins; marks for substituted ORT dtypes
    and ort-discrepancy."""
    timed = [c for c in cells if not c["numerics_only"]]
    main, rest = axes_of(timed)
    xs = sorted({c["params"].get(main) for c in timed}, key=lambda v: (v is None, v)) if main else [""]
    ylab = {}
    for c in timed:
        ylab[id(c)] = " ".join(f"{k}={c['params'][k]}" for k in rest if k in c["params"]) or op
    def natural(label: str):
        return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", label)]

    ys = sorted(set(ylab.values()), key=natural)
    z = [[None] * len(xs) for _ in ys]
    zbad = [[None] * len(xs) for _ in ys]
    text = [[""] * len(xs) for _ in ys]
    hover = [[""] * len(xs) for _ in ys]
    for c in timed:
        i, j = ys.index(ylab[id(c)]), xs.index(c["params"].get(main) if main else "")
        text[i][j] = _ratio_text(c)
        hover[i][j] = _hover(c)
        if c["verdict"] == "fail" or c["ratio"] is None:
            zbad[i][j] = 1 if c["verdict"] == "fail" else 0
        else:
            z[i][j] = math.log2(c["ratio"])
    lim = max([abs(v) for row in z for v in row if v is not None] + [math.log2(1.5)])
    steps = (0.67, 1, 1.5) if lim < 1.2 else (0.25, 0.5, 1, 2, 4) if lim < 2.5 else (0.125, 0.25, 1, 4, 8)
    ticks = [r for r in steps if abs(math.log2(r)) <= lim + 1e-9]
    xlabels = [esc(x) for x in xs]
    ylabels = [esc(y) for y in ys]
    data = [
        {"type": "heatmap", "x": xlabels, "y": ylabels, "z": z, "zmin": -lim, "zmax": lim, "zmid": 0,
         "colorscale": DIVERGING, "text": text, "texttemplate": "%{text}", "customdata": hover,
         "hovertemplate": "%{customdata}<extra></extra>", "xgap": 2, "ygap": 2,
         "colorbar": {"title": {"text": "ours/ORT"}, "tickvals": [math.log2(r) for r in ticks],
                      "ticktext": [f"{r:g}×" for r in ticks]}},
        {"type": "heatmap", "x": xlabels, "y": ylabels, "z": zbad, "zmin": 0, "zmax": 1, "showscale": False,
         "colorscale": [[0, "#bdbdbd"], [1, "#404040"]], "text": text, "texttemplate": "%{text}",
         "customdata": hover, "hovertemplate": "%{customdata}<extra></extra>", "xgap": 2, "ygap": 2,
         "textfont": {"color": "#ffffff"}},
    ]
    layout = {"title": {"text": esc(title)}, "xaxis": {"title": {"text": esc(main or "")}, "type": "category"},
              "yaxis": {"title": {"text": esc(", ".join(rest) or "case")}, "type": "category", "automargin": True},
              "height": max(260, 120 + 34 * len(ys)), "margin": {"l": 10, "r": 10, "t": 60, "b": 60}}
    return {"data": data, "layout": layout}


def fast1_bars(rows: list[dict], title: str) -> dict:
    labels = [esc(f"{r['op']} {r['dtype']} t{r['threads']}") for r in rows]
    vals = [None if r["fast_1"] is None else 100 * r["fast_1"] for r in rows]
    colors = ["#2166ac" if (v or 0) >= 50 else "#b2182b" for v in vals]
    return {"data": [{"type": "bar", "x": labels, "y": vals, "marker": {"color": colors},
                      "hovertemplate": "%{x}: fast_1 %{y:.0f}%<extra></extra>"}],
            "layout": {"title": {"text": esc(title)}, "yaxis": {"title": {"text": "fast_1 (% of cells faster than ORT)"},
                                                                "range": [0, 100]},
                       "xaxis": {"title": {"text": "op, dtype, threads"}, "tickangle": -40, "automargin": True},
                       "height": 420, "margin": {"t": 60}}}


def trend(series: dict, runs: list[dict], flags: dict, title: str, what: str) -> dict:
    """series: label -> {run id: (value, lo, hi) or None}. x = the runs (id and commit)."""
    xs = [f"run {r['id']}" + (f" {esc((r['git_sha'] or '')[:7])}" if r["git_sha"] else "") for r in runs]
    data = []
    for label, per_run in sorted(series.items()):
        y, lo, hi, mark = [], [], [], []
        for r in runs:
            v = per_run.get(r["id"])
            y.append(v[0] if v else None)
            lo.append((v[0] - v[1]) if v and v[1] is not None else None)
            hi.append((v[2] - v[0]) if v and v[2] is not None else None)
            mark.append(flags.get((r["id"], label)) if v else None)
        trace = {"type": "scatter", "mode": "lines+markers", "name": esc(label), "x": xs, "y": y,
                 "text": [esc(label)] * len(xs), "hovertemplate": "%{text}<br>%{x}: %{y:.3g}<extra></extra>"}
        if what == "ratio":
            trace["error_y"] = {"type": "data", "symmetric": False, "array": hi, "arrayminus": lo, "thickness": 1}
        data.append(trace)
        fx = [x for x, f in zip(xs, mark) if f]
        if fx:
            data.append({"type": "scatter", "mode": "markers", "name": esc(label) + " flagged", "x": fx,
                         "y": [yy for yy, f in zip(y, mark) if f], "showlegend": False,
                         "text": [esc(f"{f} (perfbench ab/compare): {label}") for f in mark if f],
                         "marker": {"symbol": "x", "size": 13, "color": "#b2182b"},
                         "hovertemplate": "%{text}<extra></extra>"})
    ytitle = "ours/ORT (95% CI)" if what == "ratio" else "median time per call (ns)"
    layout = {"title": {"text": esc(title)}, "xaxis": {"title": {"text": "run (commit)"}, "type": "category"},
              "yaxis": {"title": {"text": ytitle}, "type": "log"}, "height": 420, "margin": {"t": 60},
              "legend": {"font": {"size": 10}}}
    if what == "ratio":
        layout["shapes"] = [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": 1, "y1": 1,
                             "line": {"dash": "dot", "color": "#555"}}]
    return {"data": data, "layout": layout}


def roofline(cells: list[dict], peaks: list[dict], threads: int, title: str) -> dict:
    """Achieved GFLOP/s against arithmetic intensity (flop/byte), ours and ORT, under this host's
    measured FMA peak and bandwidth by cache level."""
    pts = [c for c in cells if c["flops"] and c["bytes"] and c["ratio"] is not None and c["ours_ns"]]
    data = []
    for dt in sorted({c["dtype"] for c in pts}):
        for side, key, sym in (("ours", "ours_ns", "circle"), ("ORT", "ort_ns", "diamond-open")):
            sel = [c for c in pts if c["dtype"] == dt and c[key]]
            data.append({"type": "scatter", "mode": "markers", "name": esc(f"{side} {dt}"),
                         "x": [c["flops"] / c["bytes"] for c in sel], "y": [c["flops"] / c[key] for c in sel],
                         "text": [esc(short(c)) for c in sel], "marker": {"symbol": sym, "size": 8, "opacity": 0.8},
                         "hovertemplate": "%{text}<br>%{x:.3g} flop/byte, %{y:.3g} GFLOP/s<extra>%{fullData.name}"
                                          "</extra>"})
    ai = [c["flops"] / c["bytes"] for c in pts] or [0.1, 10.0]
    lo_x, hi_x = min(ai) / 2, max(ai) * 2
    peaks = [verdicts.best(p) for p in peaks]  # the figures cells are divided by (each probe's best sample)
    top = max((p["value"] for p in peaks if p["kind"] == "fma_f32" and p["threads"] == threads), default=None)
    if top:
        data.append({"type": "scatter", "mode": "lines", "name": f"FMA f32 peak {top:.0f} GFLOP/s", "x": [lo_x, hi_x],
                     "y": [top, top], "line": {"dash": "dash", "color": "#000"}})
    reads = sorted((p for p in peaks if p["kind"] == "read" and p["threads"] == threads),
                   key=lambda p: p.get("working_set_bytes") or 0)
    for level in ("L1", "L2", "L3", "DRAM"):
        if level == "DRAM":  # the largest working set probed; ladder points above 3/4 of L3 are labelled
            bw = [reads[-1]["value"]] if reads else []  # DRAM but still partly cached
        else:
            bw = [p["value"] for p in reads if p["level"] == level]
        if not bw:
            continue
        gbs = max(bw)
        x1 = max(lo_x * 1.01, min(hi_x, top / gbs)) if top else hi_x
        data.append({"type": "scatter", "mode": "lines", "name": f"{level} read {gbs:.0f} GB/s", "x": [lo_x, x1],
                     "y": [gbs * lo_x, gbs * x1], "line": {"dash": "dot"}})
    layout = {"title": {"text": esc(title)},
              "xaxis": {"title": {"text": "arithmetic intensity (flop/byte)"}, "type": "log"},
              "yaxis": {"title": {"text": "achieved GFLOP/s"}, "type": "log"}, "height": 460, "margin": {"t": 60}}
    return {"data": data, "layout": layout}
