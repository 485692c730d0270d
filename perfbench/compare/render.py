"""Rendering a run document (compare.views.document): terminal table, markdown, CSV, JSON, and
pyperf JSON (usable with `python -m pyperf stats/hist/compare_to`)."""

from __future__ import annotations

import csv
import io
import json
import math

from perfbench.compare import verdicts
from perfbench.compare.escape import md_text, term
from perfbench.compare.views import short_case

LEGEND = (
    "ours/ORT < 1 means we are faster. Times are medians of per-replicate estimates (marginal cost of one "
    "more call, harness overhead removed); the ratio is the geometric mean of per-replicate ours/ORT ratios "
    "with its 95% interval on the log ratios, which includes between-run variation (n replicates, each a fresh "
    "ORT session and fresh buffers, spread over worker processes; the spread between those processes and the "
    "calibrated between-run spread sigma_b are in the standard error, Welch-Satterthwaite dof). "
    "Verdict: win = whole CI < 1, loss = whole CI > 1, undecided = otherwise, fail = our numerics or run "
    "failed, n/a = no ratio. kernel-only = the ratio with ORT's measured per-node dispatch taken out of "
    "ORT's time (the verdict stays on the as-run ratio: inside a graph ORT pays that dispatch for every node); "
    "vs ORT f32 = an f16/bf16 cell against ORT's f32 kernel (the run's f32 twin cell, or the as-run ratio where "
    "ORT was substituted). %peak = share of this host's measured ceiling: the bandwidth probed at "
    "the side's working set and thread count (read, mixed with copy for the share of its bytes the op writes), "
    "or the f32 FMA peak (a bf16 MatMul/Gemm on bf16 pairs: the higher of the bf16 dot and FMA peaks; "
    "`perfbench peaks --show`); above 100% it is "
    "marked \u2191 (the ceiling is wrong for that cell). numerics \"plain a|b\" = the errors of ours|ORT against "
    "the op's stated semantics where the cell is judged against another reference (MatMulNBits accuracy 4: "
    "A quantized to int8 first); they judge nothing."
)
DISPATCH_NOTE = ("† ORT's per-node dispatch ({}, `perfbench peaks --show`) is more than half of ORT's time in {} "
                 "cell(s), up to {:.0f}% of it: their ratio compares our kernel with mostly ORT's executor; the "
                 "kernel-only column takes the dispatch out.")
CEILING_NOTE = ("{} {} measurement(s) (ours or ORT's) exceed 100% of their ceiling, up to {:.0f}%: the ceiling is "
                "wrong for them (a probe, or the working set the cell keeps resident) or within a probe's own "
                "spread of them, not the cell.")


def fmt_ns(ns) -> str:
    if ns is None or (isinstance(ns, float) and math.isnan(ns)):
        return "-"
    if abs(ns) < 1e3:
        return f"{ns:.0f} ns"
    if abs(ns) < 1e6:
        return f"{ns / 1e3:.1f} µs"
    if abs(ns) < 1e9:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e9:.2f} s"


def _fmt_ci(r: dict | None, missing: str = "n/a") -> str:
    """'ratio [low–high]' of a {"ratio", "ci_low", "ci_high"} dict; "-" without one, `missing`
    where its ratio is None."""
    if not r:
        return "-"
    if r["ratio"] is None:
        return missing
    return f"{r['ratio']:.3f} [{r['ci_low']:.3f}–{r['ci_high']:.3f}]"


def fmt_ratio(c: dict) -> str:
    return _fmt_ci(c, missing="-")


def fmt_kernel(c: dict) -> str:
    return _fmt_ci(c.get("kernel_only"))


def fmt_vs_f32(c: dict) -> str:
    return _fmt_ci(c.get("vs_ort_f32"))


def fmt_by_path(s: dict) -> str:
    """fast_1 split by ORT path: 'kernel 80% casts 100%'."""
    return " ".join(f"{p} {100 * f:.0f}%" for p, f in (s.get("fast_1_by_path") or {}).items()) or "-"


def dispatch_marked(c: dict) -> bool:
    return verdicts.dispatch_heavy(c.get("kernel_only"))


def dispatch_note(doc: dict) -> str | None:
    marked = [c for c in doc["cells"] if dispatch_marked(c)]
    if not marked:
        return None
    d = doc.get("dispatch") or {}
    ds = d.get("samples") or [d["value"]]
    disp = f"{d['value'] / 1e3:.2f} µs [{min(ds) / 1e3:.2f}, {max(ds) / 1e3:.2f}] here"
    return DISPATCH_NOTE.format(disp, len(marked), 100 * max(c["kernel_only"]["dispatch_share"] for c in marked))


def over_shares(doc: dict) -> list[float]:
    """Every share of peak above 1 in the document (ours and ORT's sides)."""
    return [s["peak_share"] for c in doc["cells"] for s in (c["ours"], c["ort"])
            if s and verdicts.over_ceiling(s.get("peak_share"))]


def ceiling_note(doc: dict) -> str | None:
    over = over_shares(doc)
    return CEILING_NOTE.format(verdicts.OVER_CEILING, len(over), 100 * max(over)) if over else None


def fmt_tp(c: dict, side: str = "ours") -> str:
    s = c[side]
    if not s or s["throughput"] is None:
        return "-"
    share = ""
    if s["peak_share"] is not None:
        mark = verdicts.OVER_CEILING if verdicts.over_ceiling(s["peak_share"]) else ""
        share = f" {100 * s['peak_share']:.0f}%{mark}"
    lvl = f" {c['work']['level']}" if c["work"]["level"] else ""
    unit = "GB/s" if s["unit"] == "GB/s" else "GF/s"
    return f"{s['throughput']:.1f} {unit}{share}{lvl}"


def fmt_numerics(c: dict) -> str:
    n = c["numerics"]
    ours = c["ours"] or {}
    if ours.get("status") == "mismatch":
        return f"MISMATCH {n['err_ours']:.1e}>{n['tol']:.1e}" + fmt_plain(n)
    if n["err_ours"] is None:
        return ours.get("status", "-")
    return f"ok {n['err_ours']:.1e}≤{n['tol']:.1e}" + fmt_plain(n)


def fmt_plain(n: dict) -> str:
    """The errors against the op's stated semantics, where the cell was judged against another
    reference (MatMulNBits accuracy 4): ` plain ours|ORT`."""
    if n.get("err_ours_plain") is None and n.get("err_ort_plain") is None:
        return ""
    ours, ort = (("-" if v is None else f"{v:.1e}") for v in (n.get("err_ours_plain"), n.get("err_ort_plain")))
    return f" plain {ours}|{ort}"


def fmt_ort_path(c: dict) -> str:
    o = c["ort"] or {}
    if o.get("status") in (None, "no-kernel"):
        return o.get("status") or "-"
    p = o.get("path") or "-"
    if p == "substituted":
        p = f"substituted→{o['dtype']}"
    if o.get("status") not in ("ok",):
        p += f" ({o['status']})"
    return p


def status_of(c: dict) -> str:
    """Verdict column, with failures spelled out."""
    v = c["verdict"]
    ours = c["ours"] or {}
    if v == "fail":
        return f"FAIL:{ours.get('status')}"
    if v == "n/a" and c["numerics_only"]:
        return "numerics"
    return v


def table(doc: dict, color: bool = False) -> str:
    cells = doc["cells"]
    if not cells:
        return "(no cells)"
    headers = ["case", "dtype", "thr", "ours", "ORT", "ours/ORT [95% CI]", "kernel-only", "vs ORT f32", "verdict",
               "ours throughput", "numerics err≤tol", "ORT path"]
    by_op: dict = {}
    for c in cells:
        by_op.setdefault(c["op"], []).append(c)
    out = []
    for op_name, cs in by_op.items():
        rows = []
        for c in cs:
            ort_ns = (c["ort"] or {}).get("median_ns")
            mark = "†" if dispatch_marked(c) else ""
            ext = "" if c["cache"] == "warm" else " cold"
            ext += "" if c["spin"] == "off" else " spin"
            rows.append([short_case(c["case_id"], c["op"], c["params"]) + ext, c["dtype"], str(c["threads"]),
                         fmt_ns((c["ours"] or {}).get("median_ns")), fmt_ns(ort_ns) + mark, fmt_ratio(c),
                         fmt_kernel(c), fmt_vs_f32(c), status_of(c), fmt_tp(c), fmt_numerics(c), fmt_ort_path(c)])
        out.append(term(op_name))
        out.append(grid(headers, rows, color))
        out.append("")
    # summaries
    out.append("summary (fast_1 = share of cells where ours is ok and faster; failures count against it)")
    sh = ["op", "dtype", "thr", "cells", "fast_1", "by ORT path", "win", "loss", "undecided", "fail", "n/a",
          "geomean ours/ORT"]
    srows = []
    for s in doc["summary"]:
        k = s["counts"]
        srows.append([s["op"] + ("" if s["cache"] == "warm" else " cold") + ("" if s["spin"] == "off" else " spin"),
                      s["dtype"], str(s["threads"]), str(s["cells"]),
                      "-" if s["fast_1"] is None else f"{100 * s['fast_1']:.0f}%", fmt_by_path(s),
                      str(k["win"]), str(k["loss"]), str(k["undecided"]), str(k["fail"]), str(k["n/a"]),
                      "-" if s["geomean_ratio"] is None else f"{s['geomean_ratio']:.3f}"])
    out.append(grid(sh, srows, color))
    o = doc.get("overall") or {}
    if o.get("fast_1") is not None:
        out.append(f"overall: fast_1 {100 * o['fast_1']:.0f}% of {o['due']} cells due ({fmt_by_path(o)}); "
                   + ", ".join(f"{k} {v}" for k, v in o["counts"].items() if v))
    out.append("")
    out.append(_wrap(LEGEND))
    for note in (dispatch_note(doc), ceiling_note(doc)):
        if note:
            out.append(_wrap(note))
    return "\n".join(out)


def _wrap(text: str, width: int = 110) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False))


def grid(headers: list, rows: list, color: bool = False) -> str:
    headers = [term(h) for h in headers]  # stored text (case ids, hostnames, shas in headers) reaches a terminal
    rows = [[term(v) for v in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    for r in rows:
        cells = [v.ljust(w) for v, w in zip(r, widths)]
        if color:
            for i, v in enumerate(r):
                if v.startswith(("FAIL", "loss", "MISMATCH")):
                    cells[i] = f"\x1b[31m{cells[i]}\x1b[0m"
                elif v.startswith("win"):
                    cells[i] = f"\x1b[32m{cells[i]}\x1b[0m"
        out.append("  ".join(cells).rstrip())
    return "\n".join(out)


def _md_escape(s) -> str:
    """Repository/data text for markdown: render_change.md_text (no HTML, links, mentions, autolinks,
    table breaks), without its length cap (a row's cells are short; the legend is ours)."""
    return md_text(s, limit=100_000)


def markdown(doc: dict) -> str:
    r = doc["run"]
    lines = [f"### perfbench run {r['id']}: suite {_md_escape(r['suite'])} ({_md_escape(r['status'])}"
             + (", partial" if r["partial"] else "") + ")", "",
             f"Host class: {_md_escape(r['host_class'])} · ORT {_md_escape(r['ort_version'])} · commit "
             f"{_md_escape((r['git_sha'] or 'unknown')[:12])}{' (dirty)' if r['dirty'] else ''}", "",
             "| case | dtype | threads | ours | ORT | ours/ORT [95% CI] | kernel-only | vs ORT f32 | verdict | "
             "ours throughput | numerics | ORT path |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in doc["cells"]:
        lines.append("| " + " | ".join(_md_escape(x) for x in [
            c["case_id"], c["dtype"], str(c["threads"]), fmt_ns((c["ours"] or {}).get("median_ns")),
            fmt_ns((c["ort"] or {}).get("median_ns")) + ("†" if dispatch_marked(c) else ""), fmt_ratio(c),
            fmt_kernel(c), fmt_vs_f32(c), status_of(c), fmt_tp(c), fmt_numerics(c), fmt_ort_path(c)]) + " |")
    lines += ["", "| op | dtype | threads | fast_1 | by ORT path | win | loss | undecided | fail | n/a | geomean |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in doc["summary"]:
        k = s["counts"]
        lines.append(f"| {_md_escape(s['op'])} | {_md_escape(s['dtype'])} | {s['threads']} | "
                     + ("-" if s["fast_1"] is None else f"{100 * s['fast_1']:.0f}%")
                     + f" | {fmt_by_path(s)} | {k['win']} | {k['loss']} | {k['undecided']} | {k['fail']} | {k['n/a']} | "
                     + ("-" if s["geomean_ratio"] is None else f"{s['geomean_ratio']:.3f}") + " |")
    lines += ["", LEGEND] + ["\n" + n for n in (dispatch_note(doc), ceiling_note(doc)) if n]  # ours, not data
    return "\n".join(lines) + "\n"


CSV_FIELDS = ["run_id", "case_id", "op", "dtype", "threads", "device", "cache", "spin", "verdict", "ratio", "ci_low",
              "ci_high", "n", "ours_status", "ours_median_ns", "ort_status", "ort_median_ns", "ort_dtype", "ort_path",
              "ours_throughput", "ort_throughput", "throughput_unit", "ours_peak_share", "ort_peak_share", "level",
              "kernel_ratio", "kernel_ci_low", "kernel_ci_high", "ort_dispatch_share", "vs_ort_f32_ratio",
              "vs_ort_f32_ci_low", "vs_ort_f32_ci_high", "err_ours",
              "err_ort", "err_ours_vs_ort", "tol", "timing_hash", "err_ours_plain", "err_ort_plain"]


def to_csv(doc: dict) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    for c in doc["cells"]:
        o, t, k, f = c["ours"] or {}, c["ort"] or {}, c.get("kernel_only") or {}, c.get("vs_ort_f32") or {}
        w.writerow({
            "run_id": doc["run"]["id"], "case_id": c["case_id"], "op": c["op"], "dtype": c["dtype"],
            "threads": c["threads"], "device": c["device"], "cache": c["cache"], "spin": c["spin"],
            "verdict": c["verdict"], "ratio": c["ratio"], "ci_low": c["ci_low"], "ci_high": c["ci_high"], "n": c["n"],
            "ours_status": o.get("status"), "ours_median_ns": o.get("median_ns"), "ort_status": t.get("status"),
            "ort_median_ns": t.get("median_ns"), "ort_dtype": t.get("dtype"), "ort_path": t.get("path"),
            "ours_throughput": o.get("throughput"), "ort_throughput": t.get("throughput"),
            "throughput_unit": o.get("unit"), "ours_peak_share": o.get("peak_share"), "ort_peak_share": t.get("peak_share"),
            "level": c["work"]["level"], "kernel_ratio": k.get("ratio"), "kernel_ci_low": k.get("ci_low"),
            "kernel_ci_high": k.get("ci_high"), "ort_dispatch_share": k.get("dispatch_share"),
            "vs_ort_f32_ratio": f.get("ratio"), "vs_ort_f32_ci_low": f.get("ci_low"), "vs_ort_f32_ci_high": f.get("ci_high"),
            "err_ours": c["numerics"]["err_ours"], "err_ort": c["numerics"]["err_ort"],
            "err_ours_vs_ort": c["numerics"]["err_ours_vs_ort"], "err_ours_plain": c["numerics"].get("err_ours_plain"),
            "err_ort_plain": c["numerics"].get("err_ort_plain"), "tol": c["numerics"]["tol"],
            "timing_hash": c["timing_hash"],
        })
    return buf.getvalue()


def _json_safe(v):
    """JSON has no NaN or infinity: non-finite numbers become the strings "inf", "-inf", "nan"
    (an infinite error means a non-finite value where the oracle was finite)."""
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    return v


def to_json(doc: dict) -> str:
    return json.dumps(_json_safe(doc), indent=2, default=str, allow_nan=False) + "\n"


def to_pyperf(doc: dict, path: str) -> int:
    """Write a pyperf BenchmarkSuite to `path`: one benchmark per cell and side
    (`<cell key>/ours`, `/ort`), one pyperf run per replicate whose values are that replicate's
    block estimates in seconds. Returns the number of benchmarks."""
    import pyperf

    benches = []
    r = doc["run"]
    for c in doc["cells"]:
        key = f"{c['case_id']}/{c['dtype']}/t{c['threads']}/{c['cache']}/spin-{c['spin']}"
        for impl in ("ours", "ort"):
            side = c[impl]
            if not side or not side["replicates_ns"]:
                continue
            runs = []
            for blocks in side["blocks_ns"] or [[v] for v in side["replicates_ns"]]:
                values = [b / 1e9 for b in blocks if b is not None and b > 0]
                if not values:
                    continue
                md = {"name": f"{key}/{impl}", "perfbench_run": str(r["id"]), "unit": "second",
                      "hostname": r["host"], "perfbench_ratio_verdict": c["verdict"]}
                runs.append(pyperf.Run(values, metadata=md, collect_metadata=False))
            if runs:
                benches.append(pyperf.Benchmark(runs))
    if not benches:
        raise ValueError("no timed cells to export")
    pyperf.BenchmarkSuite(benches).dump(path, replace=True)
    return len(benches)
