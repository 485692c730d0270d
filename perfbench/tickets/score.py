"""fast_1 per region (op / dtype / threads), split by the ORT path the cells were against
(kernel / casts / function / substituted), over a suite's history (CONTRACTS §2)."""

from __future__ import annotations

from sqlalchemy import select

from perfbench.compare import views
from perfbench.compare.render import grid
from perfbench.store import models as m


def history(s, suite: str, host_class_id: int | None, last: int) -> dict:
    """The newest `last` full runs (complete, not partial, not invalidated, origin run) of `suite`
    on the host class, oldest first, and per region its fast_1 in each (None: not measured)."""
    q = select(m.Run).where(m.Run.suite == suite, m.Run.status == "complete", m.Run.partial.is_(False),
                            m.Run.invalidated.is_(False), m.Run.origin == "run")
    if host_class_id is not None:
        q = q.where(m.Run.host_class_id == host_class_id)
    runs = list(reversed(s.scalars(q.order_by(m.Run.started_at.desc(), m.Run.id.desc()).limit(last)).all()))
    regions: dict = {}  # (op, dtype, threads, ORT path or "all") -> per run: its summary or None
    for i, r in enumerate(runs):
        cells = []
        for c in r.cells:
            ort = c.side("ort")
            row = {"op": c.case.op, "dtype": c.dtype, "threads": c.threads, "verdict": c.verdict, "ratio": c.ratio,
                   "ort_path": ort.path if ort else None, "path": "all"}
            cells.append(row)
            cells.append({**row, "path": views.path_of(row) or "-"})
        by = views.REGION_KEYS + ("path",)
        for g in views.summaries(cells, by=by):
            regions.setdefault((g["op"], g["dtype"], g["threads"], g["path"]), [None] * len(runs))[i] = g
    # a region measured against one ORT path only: its path row repeats "all" and is left out
    paths: dict = {}
    for op, dt, th, path in regions:
        if path != "all":
            paths.setdefault((op, dt, th), set()).add(path)
    out = []
    for (op, dt, th, path), per_run in sorted(regions.items(), key=lambda kv: (kv[0][:3], kv[0][3] != "all", kv[0][3])):
        if path != "all" and len(paths.get((op, dt, th), ())) < 2:
            continue
        only = sorted(paths.get((op, dt, th), ())) if path == "all" else [path]
        out.append({"op": op, "dtype": dt, "threads": th, "ort_path": path,
                    "ort_paths": only,
                    "fast_1": [g["fast_1"] if g else None for g in per_run],
                    "cells": [g["cells"] if g else 0 for g in per_run]})
    return {"suite": suite, "runs": [{"id": r.id, "git_sha": r.git_sha, "started_at": r.started_at.isoformat()}
                                     for r in runs], "regions": out}


def table(doc: dict) -> str:
    heads = ["op", "dtype", "thr", "ORT path"] + [f"run {r['id']}" + (f" {r['git_sha'][:7]}" if r["git_sha"] else "")
                                      for r in doc["runs"]]
    rows = []
    for g in doc["regions"]:
        label = ("all: " + ", ".join(g["ort_paths"]) if len(g["ort_paths"]) > 1 else g["ort_paths"][0] if g["ort_paths"]
                 else "-") if g["ort_path"] == "all" else f"  {g['ort_path']}"
        rows.append([g["op"], g["dtype"], str(g["threads"]), label]
                    + ["-" if f is None else f"{100 * f:.0f}%" for f in g["fast_1"]])
    return grid(heads, rows) + ("\n\nfast_1 = cells where ours is correct and faster than ORT / all cells due (n/a "
                                "excluded), per ORT path: kernel (ORT's own kernel in the dtype), casts (Casts "
                                "inserted around it), function (its ONNX function body), substituted (ORT's kernel "
                                "in the substitute dtype, e.g. f32 for bf16)")
