"""Tickets as text: titles, the markdown body (also the GitHub issue body), tables and JSON.
Every string that comes from the data is escaped (compare.escape) before it reaches markdown."""

from __future__ import annotations

import math

from perfbench.compare import verdicts
from perfbench.compare.escape import clean, md_text
from perfbench.compare.render import fmt_ns
from perfbench.tickets import ranges

KIND_LABEL = {"wrong-answer": "wrong answer", "broken": "ours fails to run", "loss": "losing to ORT",
              "coverage": "coverage (ORT has no kernel)"}


def _x(r) -> str:
    return "—" if r is None or not math.isfinite(r) else f"{r:.2f}"


def where(g) -> str:
    """'RotaryEmbedding f32, 2 threads' (+ cold cache, spin on, device, modes)."""
    parts = [f"{g.op} {g.dtype}", f"{g.threads} thread{'s' if g.threads != 1 else ''}"]
    if g.cache != "warm":
        parts.append(f"{g.cache} cache")
    if g.spin != "off":
        parts.append(f"spin {g.spin}")
    if g.device != "cpu":
        parts.append(g.device)
    parts += [f"{k}={v}" for k, v in sorted((g.modes or {}).items())]
    return ", ".join(parts)


def _span(cells: list[dict]) -> str:
    """'seq 1–4096; heads 32, head_size 128': the axes that vary, then those that do not."""
    names = list(dict.fromkeys(k for c in cells for k in c["axes"]))
    varying, fixed = [], []
    for k in names:
        vals = sorted({c["axes"].get(k) for c in cells if k in c["axes"]}, key=ranges.numeric)
        if len(vals) > 1:
            varying.append(f"{k} {vals[0]}–{vals[-1]}")
        else:
            fixed.append(f"{k} {vals[0]}")
    return "; ".join(x for x in (", ".join(varying), ", ".join(fixed)) if x)


def box_count(cells: list[dict], lattice: dict) -> int:
    """Cells of the group's lattice inside the range's bounding box (the n of 'losing k/n')."""
    names = {k for c in cells for k in c["axes"]}
    lo = {k: min(ranges.numeric(c["axes"][k]) for c in cells if k in c["axes"]) for k in names}
    hi = {k: max(ranges.numeric(c["axes"][k]) for c in cells if k in c["axes"]) for k in names}
    n = sum(1 for a in lattice.values() if set(a) == names and all(lo[k] <= ranges.numeric(a[k]) <= hi[k]
                                                                    for k in names))
    return max(n, len(cells))


def title(t, lattice: dict) -> str:
    cells = t.cells
    k, n = len(cells), box_count(cells, lattice)
    span = _span(cells)
    if t.kind == "loss":
        rs = [c["ratio"] for c in cells if c.get("ratio")]
        what = f"losing {k}/{n} cells, {min(rs):.2f}–{max(rs):.2f}× slower" if len(rs) > 1 and min(rs) != max(rs) \
            else f"losing {k}/{n} cells, {_x(rs[0] if rs else None)}× slower"
    elif t.kind == "wrong-answer":
        what = f"wrong answer in {k}/{n} cells"
    elif t.kind == "broken":
        statuses = sorted({c.get("ours_status") or "?" for c in cells})
        what = f"ours fails to run ({', '.join(statuses)}) in {k}/{n} cells"
    else:
        what = f"ORT has no kernel: {k} cells measured ours only"
    return clean(f"{where(t)}: {what}" + (f" ({span})" if span else ""), 250)


def repro(t) -> str:
    """The command that measures the range again (ranges.reproduce)."""
    group = {"op": t.op, "dtype": t.dtype, "threads": t.threads, "cache": t.cache, "spin": t.spin,
             "device": t.device, "modes": t.modes or {}}
    return ranges.reproduce(t.suite, group, t.filters)


def state_text(t) -> str:
    if t.state == "open":
        return "open" + (f" (reopened {t.reopened}×)" if t.reopened else "")
    if t.closed_reason == "merged":
        return f"closed: merged into ticket {t.merged_into_id}"
    if t.closed_reason == "obsolete":
        return f"closed: obsolete (run {t.closed_run_id}, a full run of the suite, no longer has these cells)"
    return f"closed: fixed (run {t.closed_run_id} measured every cell, none a loss)"


def _share(x) -> str:
    """A share of peak; above 100% marked ↑ (the ceiling is wrong for that cell, not the cell)."""
    if x is None:
        return "—"
    return f"{100 * x:.0f}%" + (verdicts.OVER_CEILING if verdicts.over_ceiling(x) else "")


def _tput(v, unit) -> str:
    return "—" if v is None else f"{v:.3g} {md_text(unit or '', 16)}"


def _ort_path(c) -> str:
    p = c.get("ort_path") or "—"
    if p == "substituted" and c.get("ort_dtype"):
        p = f"substituted ({c['ort_dtype']})"
    return md_text(p, 40)


MAX_ROWS = 120  # cells in a body's table (the rest are counted; `tickets show --format json` has all)
MAX_EVENTS = 30


def cell_table(t) -> list[str]:
    lines = _cell_table(t, t.cells[:MAX_ROWS])
    if len(t.cells) > MAX_ROWS:
        lines.append(f"| … and {len(t.cells) - MAX_ROWS} more cells (`perfbench tickets show {t.id} --format json`) |")
    return lines


def _cell_table(t, cells) -> list[str]:
    if t.kind in ("loss", "coverage"):
        lines = ["| Case | Ours | ORT | ours/ORT [95% CI] | Ours throughput | Share of peak | ORT path |",
                 "|---|---:|---:|---|---:|---:|---|"]
        for c in cells:
            ci = f"{_x(c.get('ratio'))} [{_x(c.get('lo'))}, {_x(c.get('hi'))}]" if c.get("ratio") else "—"
            lines.append(f"| {md_text(c['case'], 120)} | {fmt_ns(c.get('ours_ns'))} | {fmt_ns(c.get('ort_ns'))} | "
                         f"{ci} | {_tput(c.get('throughput'), c.get('unit'))} | {_share(c.get('peak_share'))} | "
                         f"{_ort_path(c)} |")
        return lines
    lines = ["| Case | Ours | err(ours) | tol | Message |", "|---|---|---:|---:|---|"]
    for c in cells:
        err = "—" if c.get("err_ours") is None else f"{c['err_ours']:.2e}"
        tol = "—" if c.get("tol") is None else f"{c['tol']:.1e}"
        lines.append(f"| {md_text(c['case'], 120)} | {md_text(c.get('ours_status') or '?', 24)} | {err} | {tol} | "
                     f"{md_text(c.get('message') or '', 160)} |")
    return lines


def _seen(run_id, sha) -> str:
    return f"run {run_id}" + (f" ({md_text(sha[:12], 16)})" if sha else "")


def events_of(t) -> list:
    """A ticket's history as body() takes it."""
    return [{"event": e.event, "run_id": e.run_id, "detail": e.detail} for e in t.events]


def body(t, host_class: str, events: list | None = None) -> str:
    """The ticket as markdown (also the GitHub issue's body, so nothing in it changes unless the
    ticket does: a second sync sends nothing)."""
    out = [f"**{md_text(KIND_LABEL.get(t.kind, t.kind))}** · {md_text(where(t))} · host class "
           f"{md_text(host_class, 120)}", ""]
    out.append(f"- **State:** {md_text(state_text(t))}")
    if t.split_from_id:
        out.append(f"- **Split from:** ticket {t.split_from_id}")
    if t.kind == "loss":
        out.append(f"- **Priority:** {fmt_ns(t.priority)} per call over the range (ours − ORT, summed), "
                   f"worst ratio {_x(t.worst_ratio)}×")
    out.append(f"- **First seen:** {_seen(t.first_run_id, t.first_sha)} · **last seen:** "
               f"{_seen(t.last_run_id, t.last_sha)}")
    out += ["", *cell_table(t), "", "Reproduce:", "", "```", repro(t), "```"]
    if events:
        out += ["", "<details><summary>History</summary>", ""]
        if len(events) > MAX_EVENTS:
            out.append(f"- … {len(events) - MAX_EVENTS} earlier events")
        for e in events[-MAX_EVENTS:]:
            detail = ", ".join(f"{k} {v}" for k, v in sorted(e["detail"].items()) if k != "title")
            out.append(f"- {md_text(e['event'])} by run {e['run_id']}" + (f": {md_text(detail)}" if detail else ""))
        out += ["", "</details>"]
    out += ["", "Ratios are ours/ORT (geometric mean of per-replicate ratios, 95% t-interval); times are "
            "medians; a range is neighbouring cells of one group (docs/tickets.md)."]
    return "\n".join(out) + "\n"


def as_dict(t, host_class: str) -> dict:
    return {"id": t.id, "uid": t.uid, "kind": t.kind, "state": t.state, "closed_reason": t.closed_reason,
            "title": t.title, "host_class": host_class, "group": t.group_key, "op": t.op, "dtype": t.dtype,
            "device": t.device, "threads": t.threads, "cache": t.cache, "spin": t.spin, "modes": t.modes,
            "priority_excess_ns": t.priority, "worst_ratio": t.worst_ratio, "cells": t.cells,
            "first_run": t.first_run_id, "first_sha": t.first_sha, "last_run": t.last_run_id,
            "last_sha": t.last_sha, "closed_run": t.closed_run_id, "merged_into": t.merged_into_id,
            "split_from": t.split_from_id, "reopened": t.reopened, "reproduce": repro(t), "github": t.github,
            "opened_at": t.opened_at.isoformat(), "updated_at": t.updated_at.isoformat(),
            "closed_at": t.closed_at.isoformat() if t.closed_at else None,
            "history": [{"event": e.event, "run": e.run_id, "at": e.at.isoformat(), **e.detail} for e in t.events]}
