"""Plain-data views of a stored run (what every renderer draws from), and per-group summaries."""

from __future__ import annotations

import math
from collections import OrderedDict

from perfbench import SCHEMA_VERSION, ops
from perfbench.compare import verdicts


def cell_view(c, dispatch: dict | None = None) -> dict:
    """One stored Cell as plain data (the JSON schema of `perfbench show --format json`).
    dispatch: the host's measured ORT per-node dispatch (dispatch_of), for the kernel-only ratio."""
    ours, ort = c.side("ours"), c.side("ort")

    def side(mm):
        if mm is None:
            return None
        return {"status": mm.status, "message": mm.message, "dtype": mm.dtype, "path": mm.path or None,
                "nodes": mm.detail or None, "median_ns": mm.median_ns, "replicates_ns": mm.replicates_ns, "blocks_ns": mm.blocks_ns,
                "floor_ns": mm.floor_ns, "throughput": mm.throughput, "unit": mm.throughput_unit,
                "peak_share": mm.peak_share}

    return {
        "case_id": c.case.case_id, "op": c.case.op, "params": c.case.params,
        "dtype": c.dtype, "threads": c.threads, "device": c.device, "cache": c.cache, "spin": c.spin,
        "numerics_only": c.numerics_only,
        "verdict": c.verdict, "verdict_note": c.verdict_note,
        "ratio": c.ratio, "ci_low": c.ratio_lo, "ci_high": c.ratio_hi, "n": c.n, "ci_method": c.ci_method,
        "sd_log": c.sd_log,
        "kernel_only": verdicts.kernel_only_of(c, dispatch),
        "numerics": {"err_ours": c.err_ours, "err_ort": c.err_ort, "err_ours_vs_ort": c.err_ours_vs_ort,
                     "err_ours_plain": c.err_ours_plain, "err_ort_plain": c.err_ort_plain,
                     "tol": c.tol, "floor": c.floor},
        "ours": side(ours), "ort": side(ort),
        "work": {"flops": c.flops, "bytes": c.bytes_moved, "bound": c.bound, "level": c.level, "peak": c.peak,
                 "peak_unit": c.peak_unit},
        "protocol": {"K": c.K, "ours_iters": c.ours_iters, "ort_runs": c.ort_runs, "isa": c.isa, "seed": c.seed,
                     "wall_s": c.wall_s, "process": list((c.design or {}).get("process") or []),
                     "order": list((c.design or {}).get("order") or [])},
        "timing_hash": c.timing_hash, "numerics_hash": c.numerics_hash,
    }


def run_view(r) -> dict:
    return {
        "id": r.id, "suite": r.suite, "status": r.status, "partial": r.partial, "quick": r.quick,
        "invalidated": r.invalidated, "filters": r.filters, "started_at": r.started_at.isoformat(),
        "finished_at": r.finished_at.isoformat() if r.finished_at else None, "message": r.message,
        "host": r.hostname, "host_class": r.host_class.key, "git_sha": r.git_sha, "branch": r.branch,
        "dirty": r.dirty, "ort_version": r.ort_version, "protocol_version": r.protocol_version,
        "build": {"build_id": r.build.build_id, "source_hash": r.build.source_hash, "compiler": r.build.compiler_version,
                  "flags": r.build.flags, "isa_compiled": r.build.isa_compiled},
        "versions": r.versions, "settings": r.settings, "tuning": r.tuning, "load_avg": r.load_avg,
        "cells_planned": r.cells_planned,
    }


SUMMARY_KEYS = ("op", "dtype", "threads", "cache", "spin")
REGION_KEYS = ("op", "dtype", "threads")  # a region (fast_1 score, dashboard overview)


ORT_PATHS = ("kernel", "casts", "function", "substituted")


def path_of(c: dict) -> str | None:
    """Which ORT path a cell's ratio is against: kernel (ORT's own kernel in the cell's dtype),
    casts (Casts inserted around it), function (the op expanded into its ONNX function body),
    substituted (ORT's kernel in the op's declared substitute dtype, e.g. f32 for bf16); None
    where ORT ran nothing."""
    p = c["ort_path"] if "ort_path" in c else (c.get("ort") or {}).get("path")
    return p if p in ORT_PATHS else None


def fast_1_by_path(cells: list[dict]) -> dict:
    """fast_1 of the cells against each ORT path present (due cells only; path order fixed)."""
    out = {}
    for p in ORT_PATHS:
        objs = [_V(c["verdict"], c["ratio"]) for c in cells if path_of(c) == p]
        f = verdicts.fast_1(objs)
        if f is not None:
            out[p] = f
    return out


def summaries(cells: list[dict], by: tuple = SUMMARY_KEYS) -> list[dict]:
    """Per group of cells (default op x dtype x threads x cache x spin; `by` names other keys), in
    order of first appearance: fast_1 (and split by ORT path), verdict counts, geometric-mean ratio."""
    groups: OrderedDict = OrderedDict()
    for c in cells:
        groups.setdefault(tuple(c[k] for k in by), []).append(c)
    out = []
    for key, cs in groups.items():
        objs = [_V(c["verdict"], c["ratio"]) for c in cs]
        out.append({**dict(zip(by, key)),
                    "fast_1": verdicts.fast_1(objs), "fast_1_by_path": fast_1_by_path(cs),
                    "counts": verdicts.counts(objs),
                    "geomean_ratio": verdicts.geomean(c["ratio"] for c in cs if c["verdict"] != "fail"),
                    "cells": len(cs)})
    return out


def vs_ort_f32(cells: list[dict]) -> None:
    """Per f16/bf16 cell, "vs_ort_f32": our time against ORT's f32 kernel. A substituted cell
    is already timed against it (its as-run ratio). Otherwise the run's f32 twin (same case,
    threads, device, cache, spin) supplies ORT's f32 replicates, on values of the same
    distribution, not the same bytes: exp(mean log ours - mean log ORT f32) with a Welch
    interval whose variance adds both sides' between-cell spreads (the stated defaults: the two
    were timed apart, in the same run). None: an f32 cell; ratio None: no timed twin."""
    from scipy import stats as _st

    from perfbench import stats
    from perfbench.compare import change

    f32 = {(c["case_id"], c["threads"], c["device"], c["cache"], c["spin"]): c for c in cells if c["dtype"] == "f32"}
    s_ours, dof_ours, _ = change.sigma_prior(None, "ours")
    s_ort, dof_ort, _ = change.sigma_prior(None, "ort")
    for c in cells:
        if c["dtype"] == "f32" or c["numerics_only"]:
            c["vs_ort_f32"] = None
            continue
        if path_of(c) == "substituted":
            c["vs_ort_f32"] = {"ratio": c["ratio"], "ci_low": c["ci_low"], "ci_high": c["ci_high"],
                               "method": "as-run (ORT ran its f32 kernel)", "ort_path": "kernel"}
            continue
        twin = f32.get((c["case_id"], c["threads"], c["device"], c["cache"], c["spin"]))
        ours = (c["ours"] or {}).get("replicates_ns") or []
        theirs = ((twin or {}).get("ort") or {}).get("replicates_ns") or []
        ok = (c["ours"] or {}).get("status") == "ok" and twin is not None and \
            (twin["ort"] or {}).get("status") in ("ok", "ort-discrepancy")
        if not ok or len(ours) < 2 or len(theirs) < 2 or min(ours + theirs) <= 0:
            c["vs_ort_f32"] = {"ratio": None, "ci_low": None, "ci_high": None,
                               "method": "no timed f32 twin in this run", "ort_path": None}
            continue
        d, se_w, dof_w = stats.unpaired_log_change(theirs, ours)
        v = s_ours**2 + s_ort**2
        dof = stats.ws_dof(se_w**2, dof_w, v, stats.ws_dof(s_ours**2, dof_ours, s_ort**2, dof_ort))
        half = float(_st.t.ppf(0.975, dof)) * math.sqrt(se_w**2 + v)
        c["vs_ort_f32"] = {"ratio": math.exp(d), "ci_low": math.exp(d - half), "ci_high": math.exp(d + half),
                           "method": "f32 twin cell of this run (Welch, between-cell defaults folded in)",
                           "ort_path": (twin["ort"] or {}).get("path")}


def finite(v):
    """NaN/inf become null, recursively: the document is strict JSON."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [finite(x) for x in v]
    return v


class _V:
    def __init__(self, verdict, ratio):
        self.verdict, self.ratio = verdict, ratio


def overall(cells: list[dict]) -> dict:
    objs = [_V(c["verdict"], c["ratio"]) for c in cells]
    return {"fast_1": verdicts.fast_1(objs), "fast_1_by_path": fast_1_by_path(cells), "counts": verdicts.counts(objs),
            "due": sum(1 for c in cells if c["verdict"] != "n/a")}


def dispatch_of(run) -> dict | None:
    """The ORT per-node dispatch stored for the run's host that the run was measured with
    ({"value", "samples"} in ns), or None (never measured, or a run not attached to a session)."""
    from sqlalchemy import select
    from sqlalchemy.orm import object_session

    from perfbench.store import models as m

    s = object_session(run)
    if s is None:
        return None
    q = select(m.Peak).where(m.Peak.host_id == run.host_id, m.Peak.kind == "ort_node_dispatch")
    # the figure the run was measured with (the newest before it started), else the oldest after:
    # re-measuring peaks later does not rewrite an old run's kernel-only ratios
    p = (s.scalar(q.where(m.Peak.measured_at <= run.started_at).order_by(m.Peak.measured_at.desc(), m.Peak.id.desc())
                  .limit(1))
         or s.scalar(q.order_by(m.Peak.measured_at, m.Peak.id).limit(1)))
    return {"value": p.value, "samples": p.samples} if p else None


def document(run) -> dict:
    dispatch = dispatch_of(run)
    cells = [cell_view(c, dispatch) for c in sorted(run.cells, key=lambda c: c.id)]
    vs_ort_f32(cells)
    return {"schema_version": SCHEMA_VERSION, "run": run_view(run), "dispatch": dispatch, "cells": cells,
            "summary": summaries(cells), "overall": overall(cells)}


def short_case(case_id: str, op_name: str, params: dict) -> str:
    """The case's parameters that differ from the op's defaults (tables only; ids stay whole)."""
    try:
        op = ops.get(op_name)
        defaults = {p.name: p.default for p in op.params}
    except Exception:  # noqa: BLE001 - an op no longer registered still renders
        defaults = {}
    parts = [f"{k}={v}" for k, v in params.items() if defaults.get(k) != v]
    return " ".join(parts) or case_id
