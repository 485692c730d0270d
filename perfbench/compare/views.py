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
        "kernel_only": verdicts.kernel_only(c.ratio, c.ratio_lo, c.ratio_hi, ort.median_ns if ort else None,
                                            dispatch),
        "numerics": {"err_ours": c.err_ours, "err_ort": c.err_ort, "err_ours_vs_ort": c.err_ours_vs_ort,
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


def summaries(cells: list[dict], by: tuple = SUMMARY_KEYS) -> list[dict]:
    """Per group of cells (default op x dtype x threads x cache x spin; `by` names other keys), in
    order of first appearance: fast_1, verdict counts, geometric-mean ratio."""
    groups: OrderedDict = OrderedDict()
    for c in cells:
        groups.setdefault(tuple(c[k] for k in by), []).append(c)
    out = []
    for key, cs in groups.items():
        objs = [_V(c["verdict"], c["ratio"]) for c in cs]
        out.append({**dict(zip(by, key)),
                    "fast_1": verdicts.fast_1(objs), "counts": verdicts.counts(objs),
                    "geomean_ratio": verdicts.geomean(c["ratio"] for c in cs if c["verdict"] != "fail"),
                    "cells": len(cs)})
    return out


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
    return {"fast_1": verdicts.fast_1(objs), "counts": verdicts.counts(objs),
            "due": sum(1 for c in cells if c["verdict"] != "n/a")}


def dispatch_of(run) -> dict | None:
    """The newest ORT per-node dispatch stored for the run's host ({"value", "samples"} in ns),
    or None (never measured, or a run not attached to a session)."""
    from sqlalchemy import select
    from sqlalchemy.orm import object_session

    from perfbench.store import models as m

    s = object_session(run)
    if s is None:
        return None
    p = s.scalar(select(m.Peak).where(m.Peak.host_id == run.host_id, m.Peak.kind == "ort_node_dispatch")
                 .order_by(m.Peak.id.desc()).limit(1))
    return {"value": p.value, "samples": p.samples} if p else None


def document(run) -> dict:
    dispatch = dispatch_of(run)
    cells = [cell_view(c, dispatch) for c in sorted(run.cells, key=lambda c: c.id)]
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
